//! Connections over time: an idle one is closed after 10 s, and shutdown
//! finishes the request in flight but does not wait on an idle keep-alive
//! connection.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::memory_app;
use crate::common::http;
use crate::common::wait::{PATIENCE, wait_for};

/// A connection that sends no request for 10 s is closed, so idle
/// connections cannot hold places under the cap; not before, and not
/// much after.
#[tokio::test]
async fn a_connection_idle_for_10_s_is_closed() {
    let app = memory_app().await;
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 1024];
    let read = stream.read(&mut buffer).await.unwrap();
    assert!(buffer[..read].starts_with(b"HTTP/1.1 200"));
    let idle_from = std::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    let idle = idle_from.elapsed();
    assert!(closed.is_ok(), "still open after {idle:?} idle");
    assert!(
        idle >= Duration::from_millis(9_900),
        "closed after {idle:?}, before 10 s"
    );
    assert!(idle < Duration::from_secs(13), "closed only after {idle:?}");
}

/// A client that sends its request head a byte at a time, never finishing
/// it, keeps its place no longer than an idle one: closed 10 s after it
/// connected, however steadily the bytes come.
#[tokio::test]
async fn a_head_trickled_a_byte_at_a_time_is_closed_after_10_s() {
    let app = memory_app().await;
    // Timed from before the connection: the server accepts it after.
    let connecting = std::time::Instant::now();
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if stream.write_all(b"x").await.is_err() {
                return;
            }
            let mut buffer = [0u8; 1024];
            match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buffer)).await {
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(_)) => panic!("an answer to a head that never ended"),
                Err(_) => {}
            }
        }
    })
    .await;
    let open_for = connecting.elapsed();
    assert!(closed.is_ok(), "still open after {open_for:?} of trickling");
    assert!(
        open_for >= Duration::from_secs(10),
        "closed after {open_for:?}, before 10 s"
    );
    assert!(
        open_for < Duration::from_secs(13),
        "closed only after {open_for:?}"
    );
}

/// A client that sends requests and never reads the answers keeps its
/// place no longer than an idle one: once the answers fill the socket no
/// request starts, and the connection is closed.
#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_closed() {
    let app = memory_app().await;
    let stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (_never_read, mut writer) = stream.into_split();
    let served = app.app.clone();
    wait_for("the connection to be served", PATIENCE, || {
        std::future::ready(served.open_connections() == 1)
    })
    .await;
    // At most 70 MB of requests: the answers fill both sockets' buffers
    // long before.
    let requests = b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n".repeat(1_000);
    let writing = tokio::spawn(async move {
        for _ in 0..2_000 {
            if writer.write_all(&requests).await.is_err() {
                return;
            }
        }
    });
    wait_for(
        "the connection to be closed",
        Duration::from_secs(40),
        || std::future::ready(served.open_connections() == 0),
    )
    .await;
    writing.abort();
}

/// The head of a `POST /v1/check` carrying `body`.
fn check_head(body: &str) -> String {
    format!(
        "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight() {
    let mut app = memory_app().await;
    // A request whose body is still on its way when shutdown begins.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let body = r#"{"key": "k", "policy": "api"}"#;
    stream.write_all(check_head(body).as_bytes()).await.unwrap();
    let served = app.app.clone();
    wait_for("the connection to be served", PATIENCE, || {
        std::future::ready(served.open_connections() == 1)
    })
    .await;
    app.stop.take().unwrap().send(()).unwrap();
    // Shutdown has begun once the listener is closed.
    let addr = app.addr;
    wait_for("the listener to close", PATIENCE, || async move {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    let answer = http::raw_exchange(&mut stream, body.as_bytes(), Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), &mut app.served)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(app.addr).await.is_err(),
        "still accepting"
    );
}

/// An idle keep-alive connection does not hold shutdown up: it is closed
/// at once, and serving ends well before the drain's 10 s.
#[tokio::test]
async fn shutdown_closes_an_idle_keep_alive_connection_at_once() {
    let mut app = memory_app().await;
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let body = r#"{"key": "k", "policy": "api"}"#;
    let request = check_head(body) + body;
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    // Answered and kept alive: idle now.
    let stopping = std::time::Instant::now();
    app.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), &mut app.served)
        .await
        .expect("serve returned while a connection was idle")
        .unwrap()
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer)).await;
    assert!(
        matches!(closed, Ok(Ok(0) | Err(_))),
        "the idle connection was closed"
    );
    assert!(stopping.elapsed() < Duration::from_secs(5));
}
