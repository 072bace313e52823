//! The ceilings: what a check's two commands (`mg` of the previous bucket,
//! `ma` of the current one) cost on raw tokio sockets, with no client crate
//! and no limiter logic.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::measure::{Row, histogram};

const KEYS: u64 = 10_000;

fn encode_check(index: u64, buffer: &mut Vec<u8>) {
    let key = index % KEYS;
    buffer.extend_from_slice(
        format!("mg rawbench:{key}:1 v\r\nma rawbench:{key}:2 N130 J1 D1 v\r\n").as_bytes(),
    );
}

/// Complete replies at the start of `buffer`: (replies, bytes they take).
fn complete_replies(buffer: &[u8]) -> (usize, usize) {
    let (mut replies, mut at) = (0, 0);
    loop {
        let Some(end) = buffer[at..].windows(2).position(|w| w == b"\r\n") else {
            return (replies, at);
        };
        let mut next = at + end + 2;
        if buffer[at..].starts_with(b"VA") {
            let Some(value_end) = buffer[next..].windows(2).position(|w| w == b"\r\n") else {
                return (replies, at);
            };
            next += value_end + 2;
        }
        replies += 1;
        at = next;
    }
}

/// One check per round trip on each of `connections` connections.
pub async fn one_per_round_trip(
    addr: &str,
    connections: usize,
    total: u64,
    limit: Duration,
) -> Row {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (addr, next) = (addr.to_owned(), next.clone());
            tokio::spawn(async move {
                let mut latencies = histogram();
                let mut stream = TcpStream::connect(&addr)
                    .await
                    .expect("connect to memcached");
                stream.set_nodelay(true).expect("nodelay");
                let (mut out, mut input) = (Vec::new(), Vec::with_capacity(4096));
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= total || started.elapsed() > limit {
                        return latencies;
                    }
                    out.clear();
                    encode_check(index, &mut out);
                    let sent = Instant::now();
                    stream.write_all(&out).await.expect("write");
                    input.clear();
                    loop {
                        stream.read_buf(&mut input).await.expect("read");
                        if complete_replies(&input).0 >= 2 {
                            break;
                        }
                    }
                    let _ = latencies.record(sent.elapsed().as_nanos() as u64);
                }
            })
        })
        .collect();
    let mut all = histogram();
    for task in tasks {
        all.add(task.await.expect("raw task")).expect("same bounds");
    }
    Row::from_histogram(
        "raw sockets, 1 check per round trip",
        format!("{connections} conns"),
        &all,
        started.elapsed(),
    )
}

/// Many checks' commands per write: `connections` connections, each
/// keeping up to `depth` checks in flight.
pub async fn pipelined(
    addr: &str,
    connections: usize,
    depth: usize,
    total: u64,
    limit: Duration,
) -> Row {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (addr, next) = (addr.to_owned(), next.clone());
            tokio::spawn(async move {
                let mut latencies = histogram();
                let mut stream = TcpStream::connect(&addr)
                    .await
                    .expect("connect to memcached");
                stream.set_nodelay(true).expect("nodelay");
                let (mut out, mut input) = (Vec::new(), Vec::with_capacity(64 * 1024));
                let mut in_flight = std::collections::VecDeque::with_capacity(depth);
                let mut odd_reply = false;
                let mut exhausted = false;
                loop {
                    out.clear();
                    let now = Instant::now();
                    while !exhausted && in_flight.len() < depth {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= total || started.elapsed() > limit {
                            exhausted = true;
                            break;
                        }
                        encode_check(index, &mut out);
                        in_flight.push_back(now);
                    }
                    if !out.is_empty() {
                        stream.write_all(&out).await.expect("write");
                    }
                    if in_flight.is_empty() {
                        return latencies;
                    }
                    stream.read_buf(&mut input).await.expect("read");
                    let (replies, used) = complete_replies(&input);
                    input.drain(..used);
                    // Two replies per check; a check ends with its second.
                    for _ in 0..replies {
                        if odd_reply && let Some(sent) = in_flight.pop_front() {
                            let _ = latencies.record(sent.elapsed().as_nanos() as u64);
                        }
                        odd_reply = !odd_reply;
                    }
                }
            })
        })
        .collect();
    let mut all = histogram();
    for task in tasks {
        all.add(task.await.expect("raw task")).expect("same bounds");
    }
    Row::from_histogram(
        "raw sockets, pipelined",
        format!("{connections} conns x depth {depth}"),
        &all,
        started.elapsed(),
    )
}
