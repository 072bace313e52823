//! A minimal HTTP/1.1 client for the end-to-end tests: one connection per
//! request, hyper's own client, answers read whole.

use std::net::SocketAddr;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub struct Response {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {:?}", self.body))
    }

    /// The `error` message of a 4xx/5xx answer.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
}

pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Response {
    let stream = TcpStream::connect(addr)
        .await
        .expect("connect to the server");
    send_on(stream, addr, method, path, headers, body).await
}

/// A GET from a chosen loopback address (127.0.0.2, ...), as a distinct
/// client would send it.
pub async fn get_from(
    from: std::net::IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .unwrap_or_else(|error| panic!("bind {from}: {error}"));
    let stream = socket
        .connect(addr)
        .await
        .unwrap_or_else(|error| panic!("connect to {addr}: {error}"));
    send_on(stream, addr, "GET", path, headers, Bytes::new()).await
}

async fn send_on(
    stream: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Response {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(body.into()))
        .expect("a valid request");
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes();
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Response {
    send(
        addr,
        "POST",
        path,
        &[("content-type", "application/json")],
        body.to_owned(),
    )
    .await
}

pub async fn get(addr: SocketAddr, path: &str) -> Response {
    send(addr, "GET", path, &[], Bytes::new()).await
}

/// Write `bytes` (a raw request, as a client that is not hyper would) on
/// `stream` and read everything the server answers until it closes the
/// connection; past `within` the test fails.
pub async fn raw_exchange(
    stream: &mut TcpStream,
    bytes: &[u8],
    within: std::time::Duration,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(bytes).await.expect("write the request");
    let mut answer = String::new();
    tokio::time::timeout(within, stream.read_to_string(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("no answer and close within {within:?}"))
        .expect("read the answer");
    answer
}
