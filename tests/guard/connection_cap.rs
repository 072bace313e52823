//! The connection cap: connections past it are closed at once, the service
//! answers throughout on those it holds, and clients that leave make room.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{CHECK, POLICY, sample, start};
use crate::common::http;
use crate::common::wait::{PATIENCE, wait_for_blocking};

/// One request on an open keep-alive connection; the answer's status and
/// body.
fn raw_get(stream: &mut TcpStream, path: &str) -> (u16, String) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nhost: slidegate\r\n\r\n").unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let read = stream.read(&mut buffer).expect("an answer");
        assert!(read > 0, "the connection was closed");
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received).into_owned();
        let Some(head_end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length: usize = text[..head_end]
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        if received.len() >= head_end + 4 + length {
            let status = text[9..12].parse().unwrap();
            return (status, text[head_end + 4..head_end + 4 + length].to_owned());
        }
    }
}

fn open_connections(metrics_over: &mut TcpStream) -> u64 {
    let (_, metrics) = raw_get(metrics_over, "/metrics");
    sample(&metrics, "slidegate_connections_open")
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_the_service_still_answers() {
    const CAP: usize = 40;
    let mut service = start(
        "cap",
        &format!("{POLICY}[server]\nmax_connections = {CAP}\n"),
        |_, _| {},
    );
    // Bounded by this process's file limit (the server has the same one).
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    let extra = 400.min((limit.rlim_cur as usize).saturating_sub(CAP + 64) / 2);
    assert!(extra > 0, "file limit too low: {}", limit.rlim_cur);

    // Wait for every connection to be served, or given back; `held[0]`
    // asks.
    let settle = |held: &mut [TcpStream], expected: usize| {
        wait_for_blocking(&format!("{expected} connections open"), PATIENCE, || {
            open_connections(&mut held[0]) == expected as u64
        });
    };
    // The start-up probe's connection has ended before the others arrive,
    // and every held connection is served before the extra ones do. (Idle
    // connections are dropped after 10 s without a request: the test
    // keeps well inside that.)
    let mut held = vec![TcpStream::connect(service.addr).unwrap()];
    settle(&mut held, 1);
    held.extend((1..CAP).map(|_| TcpStream::connect(service.addr).unwrap()));
    settle(&mut held, CAP);

    let mut closed = 0;
    for _ in 0..extra {
        let Ok(mut stream) = TcpStream::connect(service.addr) else {
            continue;
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n");
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => closed += 1,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            other => panic!("a connection past the cap was served: {other:?}"),
        }
    }
    assert_eq!(closed, extra, "every connection past the cap is closed");

    // The service answered throughout, on the connections it holds.
    let (status, metrics) = raw_get(&mut held[1], "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&metrics, "slidegate_connections_refused_total"),
        extra as u64
    );
    assert_eq!(sample(&metrics, "slidegate_connections_open"), CAP as u64);
    assert_eq!(raw_get(&mut held[2], "/healthz").0, 200);

    // Clients that leave make room: a fresh client is answered.
    held.truncate(CAP / 2);
    wait_for_blocking("closed connections given back", PATIENCE, || {
        open_connections(&mut held[0]) <= (CAP / 2) as u64
    });
    let fresh = http::post(service.addr, "/v1/check", CHECK).await;
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert!(service.is_running());
    println!(
        "cap {CAP}: {extra} connections past it closed at once, the process up, a fresh client answered"
    );
}
