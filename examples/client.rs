//! A client of the HTTP service: check before doing work, and on 429 wait as
//! long as `Retry-After` says (never retry a request that can never pass).
//!
//!     cargo run --release &                          # the service, on 127.0.0.1:8080
//!     cargo run --example client -- client-42 5      # key, attempts

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const SERVICE: &str = "127.0.0.1:8080";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let key = args.next().unwrap_or_else(|| "client-42".to_owned());
    let attempts: u32 = args.next().map_or(Ok(5), |n| n.parse())?;
    // Inline limits, so this works against a service with no config file.
    let body = serde_json::json!({
        "key": key,
        "limits": [{"limit": 3, "window": "10s"}],
    })
    .to_string();

    for attempt in 1..=attempts {
        let (status, retry_after, answer) = check(&body).await?;
        println!("attempt {attempt}: {status} {answer}");
        if status == 429 {
            let Some(seconds) = retry_after else {
                println!("this request can never pass; giving up");
                break;
            };
            println!("waiting {seconds} s as Retry-After says");
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
        }
    }
    Ok(())
}

async fn check(body: &str) -> Result<(u16, Option<u64>, String), Box<dyn std::error::Error>> {
    let stream = TcpStream::connect(SERVICE).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let request = hyper::Request::post("/v1/check")
        .header("host", SERVICE)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))?;
    let response = sender.send_request(request).await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok()?.parse().ok());
    let answer = response.into_body().collect().await?.to_bytes();
    Ok((
        status,
        retry_after,
        String::from_utf8_lossy(&answer).into_owned(),
    ))
}
