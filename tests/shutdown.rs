//! The binary leaving on SIGTERM, as a rolling update sees it: `/readyz`
//! unready at once, every request answered through the shutdown delay on
//! new and on kept-alive connections, a request in flight at the end of the
//! delay answered, and an exit 0 within the delay and the drain bound.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::service::Slidegate;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every check admitted: what is counted here is answers, not decisions.
const CHECK: &str = r#"{"key": "rolling", "limits": [{"limit": 1000000000, "window": "1m"}]}"#;
/// How long the clients go on sending after the signal: well inside a 2 s
/// delay, as a load balancer that has noticed the 503 by then would.
const SENDING_AFTER_SIGNAL: Duration = Duration::from_millis(1500);
/// Requests one client sends at most (the loops are bounded in count too).
const MAX_REQUESTS: u32 = 20_000;

fn start(name: &str, delay_ms: u64, drain_ms: u64) -> Slidegate {
    let mut command = Slidegate::command();
    command
        .args(["--memcached", &common::shared_memcached().addr()])
        .args(["--shutdown-delay-ms", &delay_ms.to_string()])
        .env("SLIDEGATE_DRAIN_TIMEOUT_MS", drain_ms.to_string());
    Slidegate::start(name, command)
}

/// What one client saw.
#[derive(Debug, Default)]
struct Tally {
    answered: u32,
    /// Connections refused or failed, requests without an answer.
    lost: u32,
    /// Answers that asked the client to close its connection.
    told_to_close: u32,
}

async fn connect(addr: SocketAddr) -> Option<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    Some(sender)
}

/// One check on `sender`; whether the server asked to close the connection.
async fn check(sender: &mut SendRequest<Full<Bytes>>, addr: SocketAddr) -> Option<bool> {
    sender.ready().await.ok()?;
    let request = hyper::Request::post("/v1/check")
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(CHECK.as_bytes())))
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let close = response
        .headers()
        .get("connection")
        .is_some_and(|value| value == "close");
    let ok = response.status() == 200;
    response.into_body().collect().await.ok()?;
    ok.then_some(close)
}

/// Sends checks until `until`, each on a new connection (`kept_alive`
/// false) or on one connection for as long as the server keeps it, a new
/// one once it asks to close.
async fn client(addr: SocketAddr, kept_alive: bool, until: tokio::time::Instant) -> Tally {
    let mut tally = Tally::default();
    let mut open = None;
    for _ in 0..MAX_REQUESTS {
        if tokio::time::Instant::now() >= until {
            break;
        }
        if open.is_none() {
            open = connect(addr).await;
        }
        let answered = match &mut open {
            Some(sender) => check(sender, addr).await,
            None => None,
        };
        match answered {
            Some(close) => {
                tally.answered += 1;
                if close {
                    tally.told_to_close += 1;
                }
                if close || !kept_alive {
                    open = None;
                }
            }
            None => {
                tally.lost += 1;
                open = None;
            }
        }
        // Not a flood: the machine is shared.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tally
}

/// `/readyz` on new connections, right after the signal, until it answers
/// 503 (at most 2 s): how long that took, how many answered 200 before,
/// and the 503's body.
async fn until_unready(addr: SocketAddr, signalled: Instant) -> (Duration, u32, String) {
    let mut ready_before = 0;
    for _ in 0..400 {
        let response = common::http::get(addr, "/readyz").await;
        if response.status == 503 {
            return (signalled.elapsed(), ready_before, response.body);
        }
        ready_before += 1;
        assert!(signalled.elapsed() < Duration::from_secs(2), "still ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("/readyz still 200 after {ready_before} probes");
}

/// Two clients, one on new connections and one on a kept-alive one,
/// sending from before a SIGTERM until `SENDING_AFTER_SIGNAL` after it.
async fn clients_through_sigterm(
    service: &Slidegate,
    probe_readyz: bool,
) -> (Tally, Tally, Option<(Duration, u32, String)>) {
    let addr = service.addr;
    assert_eq!(common::http::get(addr, "/readyz").await.status, 200);
    let before_signal = Duration::from_millis(300);
    let until = tokio::time::Instant::now() + before_signal + SENDING_AFTER_SIGNAL;
    let fresh = tokio::spawn(client(addr, false, until));
    let kept = tokio::spawn(client(addr, true, until));
    tokio::time::sleep(before_signal).await;
    service.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let readyz = if probe_readyz {
        Some(until_unready(addr, signalled).await)
    } else {
        None
    };
    (fresh.await.unwrap(), kept.await.unwrap(), readyz)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_delay_no_request_is_lost_and_readyz_turns_503_at_once() {
    let service = start("shutdown-delay", 2000, 10_000);
    let (fresh, kept, readyz) = clients_through_sigterm(&service, true).await;
    let (took, ready_before, body) = readyz.unwrap();
    println!(
        "delay 2 s: new connections {fresh:?}, kept-alive {kept:?}; \
         /readyz 503 {took:?} after SIGTERM ({ready_before} answered 200 before)"
    );
    let log = tokio::task::spawn_blocking(move || service.stop())
        .await
        .unwrap();
    assert_eq!(fresh.lost, 0, "new connections lost requests\n{log}");
    assert_eq!(kept.lost, 0, "a kept-alive connection lost requests\n{log}");
    assert!(
        fresh.answered > 0 && kept.answered > 0,
        "{fresh:?} {kept:?}"
    );
    // Asked to move to a new connection while the delay lasted.
    assert!(kept.told_to_close >= 1, "{kept:?}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["status"], "unavailable", "{body}");
    assert_eq!(body["error"], "shutting down", "{body}");
    // Generous: the flag is set as soon as the signal is read; a loaded
    // machine may take a while to run that task, never a second.
    assert!(
        took < Duration::from_secs(1),
        "/readyz 503 only {took:?} after"
    );
}

/// What the delay is for: without it, requests sent after the signal
/// meet a closed listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delay_requests_after_the_signal_are_refused() {
    let service = start("shutdown-no-delay", 0, 10_000);
    let (fresh, kept, _) = clients_through_sigterm(&service, false).await;
    println!("delay 0: new connections {fresh:?}, kept-alive {kept:?}");
    let log = tokio::task::spawn_blocking(move || service.stop())
        .await
        .unwrap();
    assert!(fresh.lost > 0, "{fresh:?}\n{log}");
}

/// A request whose body is still coming when the delay ends is answered
/// (with `Connection: close`); one that never finishes holds the exit only
/// until the drain bound; the exit is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_at_the_end_of_the_delay_is_answered_and_the_exit_is_bounded() {
    let delay = Duration::from_millis(1000);
    let drain = Duration::from_millis(3000);
    let mut service = start("shutdown-in-flight", 1000, 3000);
    let addr = service.addr;
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        CHECK.len()
    );
    let (first, rest) = CHECK.split_at(10);

    let mut finishing = TcpStream::connect(addr).await.unwrap();
    let mut stalled = TcpStream::connect(addr).await.unwrap();
    service.signal(libc::SIGTERM);
    let signalled = Instant::now();
    // Both requests start during the delay: their heads are whole.
    for stream in [&mut finishing, &mut stalled] {
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(first.as_bytes()).await.unwrap();
    }
    common::wait::wait_for("the delay to end", Duration::from_secs(10), || {
        let over = service.log().contains("shutdown delay over");
        async move { over }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    finishing.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        finishing.read_to_string(&mut answer),
    )
    .await
    .expect("an answer and a close")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );

    // The stalled one keeps the drain open until its bound, then the
    // process exits: within the delay and the drain, and some slack for a
    // loaded machine.
    let bound = delay + drain + Duration::from_secs(3);
    while service.is_running() {
        assert!(
            signalled.elapsed() < bound,
            "still running {bound:?} after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("exited {:?} after SIGTERM", signalled.elapsed());
    assert!(
        signalled.elapsed() >= delay + drain - Duration::from_millis(100),
        "exited before the drain bound with a request still in flight"
    );
    drop(stalled);
    let log = service.stop();
    assert!(
        log.contains("gave up waiting for connections")
            || log.contains("still open at the drain bound"),
        "{log}"
    );
}

/// A second signal, SIGTERM or SIGINT, ends the delay at once: an operator
/// need not wait out a long one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_ends_the_delay_at_once() {
    for second in [libc::SIGTERM, libc::SIGINT] {
        let mut service = start("shutdown-second-signal", 600_000, 10_000);
        service.signal(libc::SIGTERM);
        common::wait::wait_for("the first signal", Duration::from_secs(10), || {
            let seen = service.log().contains("SIGTERM received");
            async move { seen }
        })
        .await;
        assert!(service.is_running());
        service.signal(second);
        let signalled = Instant::now();
        // Far below the ten-minute delay; generous for a loaded machine.
        while service.is_running() {
            assert!(
                signalled.elapsed() < Duration::from_secs(10),
                "the second signal did not end the delay"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let log = service.stop();
        assert!(log.contains("received again: draining now"), "{log}");
    }
}
