//! What the server makes of what it is sent: a bad field is a 400 that
//! names it; size, method and path have statuses of their own; a body is
//! read whole up to the byte limit and not past it; and no input, however
//! broken, makes the server fail.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{assert_json, memory_app};
use crate::common::{http, metrics};

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field() {
    let app = memory_app().await;
    let cases = [
        ("{\"key\": ", "body: malformed JSON"),
        ("{\"policy\": \"api\"}", "key: is required"),
        (
            "{\"key\": \"\", \"policy\": \"api\"}",
            "key: must not be empty",
        ),
        (
            "{\"key\": \"k\", \"policy\": \"nope\"}",
            "policy: no policy named \"nope\"",
        ),
        (
            "{\"key\": \"k\", \"limits\": [{\"limit\": 5, \"window\": \"5 minutes\"}]}",
            "limits[0].window:",
        ),
        (
            "{\"key\": \"k\", \"policy\": \"api\", \"cost\": 0}",
            "cost: must be an integer from 1",
        ),
        (
            "{\"key\": \"k\", \"policy\": \"api\", \"cost\": 1000000000001}",
            "cost: must be an integer from 1 to 1000000000000, got 1000000000001",
        ),
        (
            "{\"key\": \"k\", \"limits\": [{\"limit\": 0, \"window\": \"1s\"}]}",
            "limits[0].limit:",
        ),
        (
            "{\"key\": \"k\", \"limits\": [{\"limit\": 1, \"window\": \"1s\", \"precision\": 3}]}",
            "limits[0].precision:",
        ),
    ];
    for path in ["/v1/check", "/v1/peek", "/v1/report"] {
        for (body, expected) in cases {
            let response = http::post(app.addr, path, body).await;
            assert_eq!(response.status, 400, "{path} {body}");
            assert_json(&response);
            assert!(
                response.error().starts_with(expected),
                "{body}: {}",
                response.error()
            );
        }
    }
    let long_key = "x".repeat(1025);
    let response = app
        .post("/v1/check", json!({"key": long_key, "policy": "api"}))
        .await;
    assert_eq!(
        (response.status, response.error()),
        (400, "key: must be at most 1024 bytes, got 1025".to_owned())
    );
    let limits = vec![json!({"limit": 1, "window": "1s"}); 17];
    let response = app
        .post("/v1/check", json!({"key": "k", "limits": limits}))
        .await;
    assert_eq!(
        (response.status, response.error()),
        (400, "limits: at most 16 limits, got 17".to_owned())
    );
}

#[tokio::test]
async fn statuses_for_size_method_and_path() {
    let app = memory_app().await;
    let big = format!(
        "{{\"key\": \"{}\", \"policy\": \"api\"}}",
        "x".repeat(70_000)
    );
    let response = http::post(app.addr, "/v1/check", &big).await;
    assert_eq!(response.status, 413);
    assert_json(&response);

    // Chunked, so no Content-Length warns in advance: refused while reading.
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = "POST /v1/check HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = "a".repeat(16 * 1024);
    for _ in 0..5 {
        let written = stream
            .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .await;
        if written.is_err() {
            break;
        }
    }
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let response = app.get("/v1/check").await;
    assert_eq!(
        (response.status, response.header("allow")),
        (405, Some("POST"))
    );
    assert_json(&response);
    let response = http::post(app.addr, "/healthz", "").await;
    assert_eq!(
        (response.status, response.header("allow")),
        (405, Some("GET, HEAD"))
    );
    let response = app.get("/v2/check").await;
    assert_eq!(response.status, 404);
    assert_json(&response);

    let response = app.get("/healthz").await;
    assert_eq!(
        (response.status, response.json()),
        (200, json!({"status": "ok"}))
    );
    let response = app.get("/readyz").await;
    assert_eq!(
        (response.status, response.json()),
        (200, json!({"status": "ready", "store": "memory"}))
    );

    app.post("/v1/check", json!({"key": "k", "policy": "api", "cost": 3}))
        .await;
    app.post("/v1/check", json!({"key": "k", "policy": "api"}))
        .await;
    app.post("/v1/check", json!({"key": "k", "policy": "api"}))
        .await;
    let metrics = metrics::scrape(app.addr).await;
    for (series, value) in [
        (
            r#"slidegate_decisions_total{policy="api",outcome="allowed"}"#,
            1.0,
        ),
        (
            r#"slidegate_decisions_total{policy="api",outcome="rejected"}"#,
            1.0,
        ),
        (
            r#"slidegate_decisions_total{policy="api",outcome="near_cache"}"#,
            1.0,
        ),
        ("slidegate_near_cache_hits_total", 1.0),
        (r#"slidegate_store_errors_total{kind="timeout"}"#, 0.0),
    ] {
        assert_eq!(metrics.value(series), value, "{series}");
    }
}

/// A body that comes in several chunks is read whole, and the limit holds
/// to the byte: 64 KiB of chunks is read (and decided), one byte more is a
/// 413.
#[tokio::test]
async fn a_body_in_chunks_is_read_whole_up_to_the_limit() {
    let app = memory_app().await;
    let chunked = |pieces: &[&str]| {
        let mut request =
            "POST /v1/check HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                .to_owned();
        for piece in pieces {
            request.push_str(&format!("{:x}\r\n{piece}\r\n", piece.len()));
        }
        request.push_str("0\r\n\r\n");
        request
    };
    let answer_to = |request: String| async move {
        let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        http::raw_exchange(&mut stream, request.as_bytes(), Duration::from_secs(10)).await
    };
    let answer = answer_to(chunked(&[
        r#"{"key": "#,
        r#""chunks", "poli"#,
        r#"cy": "api"}"#,
    ]))
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");

    // Whitespace is JSON: a call padded to exactly the limit, in 4 KiB chunks.
    let call = r#"{"key": "padded", "policy": "api"}"#;
    let padded = format!("{call}{}", " ".repeat(64 * 1024 - call.len()));
    let pieces: Vec<&str> = padded
        .as_bytes()
        .chunks(4096)
        .map(|piece| std::str::from_utf8(piece).unwrap())
        .collect();
    let answer = answer_to(chunked(&pieces)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let over = format!("{padded} ");
    let answer = answer_to(chunked(&[&over[..40_000], &over[40_000..]])).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

/// A client that announces a 1 MiB body and sends all of it before it
/// reads must read the 413, not a reset: the server answers at once, then
/// reads what is in flight (up to a bound) before it closes.
#[tokio::test]
async fn a_client_still_sending_a_large_body_reads_its_413() {
    let app = memory_app().await;
    const BODY: usize = 1 << 20;
    let chunk = vec![b'a'; 64 * 1024];
    for attempt in 0..10 {
        let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        let head = format!(
            "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: {BODY}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let (mut sent, mut write_error) = (0, None);
        while sent < BODY {
            // A broken pipe here is the bug (a client such as curl stops
            // at it): note it, and still try to read the answer.
            if let Err(error) = stream.write_all(&chunk).await {
                write_error = Some(error);
                break;
            }
            sent += chunk.len();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while !answer.windows(2).any(|pair| pair == b"\r\n") {
                match stream.read(&mut buffer).await {
                    Ok(0) => return Ok(()),
                    Ok(n) => answer.extend_from_slice(&buffer[..n]),
                    Err(error) => return Err(error),
                }
            }
            Ok(())
        })
        .await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            write_error.is_none()
                && matches!(read, Ok(Ok(())))
                && answer.starts_with("HTTP/1.1 413"),
            "attempt {attempt}, {sent} bytes sent ({write_error:?}): {read:?} {answer:?}"
        );
    }
}

/// What is drained of a refused body is bounded: a client that keeps
/// trickling a huge body after its 413 has the connection closed once
/// 1 MiB or 2 s have been read and dropped (the README), not held open for
/// as long as it sends. Bounded: at most 8 s of sending.
#[tokio::test]
async fn a_refused_body_is_drained_for_a_bounded_time_only() {
    let app = memory_app().await;
    let mut stream = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let head = "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
                content-length: 67108864\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut reading, mut writing) = stream.into_split();
    let started = std::time::Instant::now();
    // 32 KiB every 50 ms: 640 KiB a second, for at most 8 s.
    let trickle = tokio::spawn(async move {
        let chunk = vec![b'a'; 32 * 1024];
        while started.elapsed() < Duration::from_secs(8) {
            if writing.write_all(&chunk).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(8), async {
        loop {
            match reading.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            }
        }
    })
    .await;
    let after = started.elapsed();
    trickle.abort();
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 413"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        closed.is_ok(),
        "the connection was still open after {after:?} of a trickled body"
    );
}

/// Random bytes and random near-JSON never make the server fail: every
/// answer is a 200, 400, 413 or 429 with a JSON body, and the server keeps
/// answering. Bounded: 400 requests.
#[tokio::test]
async fn no_input_breaks_the_server() {
    let app = memory_app().await;
    let mut seed: u64 = 0x5eed;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let pieces = [
        "{",
        "}",
        "[",
        "]",
        "\"key\"",
        "\"policy\"",
        "\"api\"",
        "\"limits\"",
        "\"cost\"",
        ":",
        ",",
        "1",
        "-1",
        "0",
        "1e400",
        "18446744073709551616",
        "null",
        "true",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "\"window\"",
        "\"1s\"",
        "\"precision\"",
        "{\"limit\":3,\"window\":\"1s\"}",
        " ",
        "\u{feff}",
        "\"\u{1F511}\"",
    ];
    for round in 0..400 {
        let body: Vec<u8> = if round % 2 == 0 {
            (0..next() % 200).map(|_| (next() % 256) as u8).collect()
        } else {
            (0..next() % 30)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect::<String>()
                .into_bytes()
        };
        let path = ["/v1/check", "/v1/peek", "/v1/report"][round % 3];
        let response = http::send(app.addr, "POST", path, &[], body.clone()).await;
        assert!(
            [200, 400, 413, 429].contains(&response.status),
            "{} for {:?}",
            response.status,
            String::from_utf8_lossy(&body)
        );
        assert_json(&response);
    }
    assert_eq!(app.get("/healthz").await.status, 200);
}
