//! A flood of checks with distinct keys through the real binary on the
//! embedded store: prints the peak RSS (VmHWM) and the memory a counter
//! costs once the store is at capacity. A memory measurement, not a speed
//! one; bounded in checks and in time.
//!
//! ```sh
//! cargo build --release --bin slidegate --example flood
//! nice -n 15 target/release/examples/flood --checks 10000000
//! ```
//!
//! Flags: `--checks N` (10,000,000), `--connections N` (32, keep-alive),
//! `--capacity N` (the store's default unless given), `--max-secs S` (3600),
//! `--binary PATH` (target/release/slidegate).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

struct Options {
    checks: u64,
    connections: u64,
    capacity: Option<u64>,
    max_secs: u64,
    binary: String,
}

fn options() -> Options {
    let mut options = Options {
        checks: 10_000_000,
        connections: 32,
        capacity: None,
        max_secs: 3600,
        binary: "target/release/slidegate".to_owned(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let number = || {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{flag}: {value:?} is not a number"))
        };
        match flag.as_str() {
            "--checks" => options.checks = number(),
            "--connections" => options.connections = number().max(1),
            "--capacity" => options.capacity = Some(number()),
            "--max-secs" => options.max_secs = number(),
            "--binary" => options.binary = value,
            other => panic!("unknown flag {other}"),
        }
    }
    options
}

/// `VmHWM` and `VmRSS` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let stream = TcpStream::connect(addr).await.ok()?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", "slidegate")
        .body(Full::new(Bytes::new()))
        .ok()?;
    let response = sender.send_request(request).await.ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

fn sample(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// One keep-alive connection sending checks of keys `first`, `first +
/// step`, ... until `next` passes `checks` or time is up.
async fn drive(
    addr: SocketAddr,
    next: Arc<AtomicU64>,
    checks: u64,
    stop: Arc<AtomicBool>,
    failures: Arc<AtomicU64>,
) {
    'reconnect: while !stop.load(Ordering::Relaxed) {
        let Ok(stream) = TcpStream::connect(addr).await else {
            failures.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let Ok((mut sender, connection)) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            continue;
        };
        tokio::spawn(connection);
        while !stop.load(Ordering::Relaxed) {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= checks {
                return;
            }
            let body =
                format!(r#"{{"key":"flood-{index}","limits":[{{"limit":100,"window":"1m"}}]}}"#);
            let request = hyper::Request::post("/v1/check")
                .header("host", "slidegate")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)))
                .expect("a valid request");
            let answered = match sender.send_request(request).await {
                Ok(response) => {
                    response.status() == 200 && response.into_body().collect().await.is_ok()
                }
                Err(_) => false,
            };
            if !answered {
                failures.fetch_add(1, Ordering::Relaxed);
                continue 'reconnect;
            }
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let options = options();
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let mut command = Command::new(&options.binary);
    command
        .args(["--listen", &addr.to_string()])
        .env_remove("SLIDEGATE_MEMCACHED")
        .env_remove("SLIDEGATE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(capacity) = options.capacity {
        command.args(["--memory-capacity", &capacity.to_string()]);
    }
    let mut child: Child = command
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {}: {error}", options.binary));
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(addr, "/healthz").await.is_none() {
        assert!(Instant::now() < deadline, "slidegate did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, baseline_kib) = memory_kib(pid);
    let capacity = sample(
        &get(addr, "/metrics")
            .await
            .map(|(_, m)| m)
            .unwrap_or_default(),
        "slidegate_memory_capacity",
    );
    println!(
        "slidegate pid {pid}: {baseline_kib} KiB resident at start; store capacity {capacity} counters"
    );

    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let drivers: Vec<_> = (0..options.connections)
        .map(|_| {
            tokio::spawn(drive(
                addr,
                next.clone(),
                options.checks,
                stop.clone(),
                failures.clone(),
            ))
        })
        .collect();

    // Every second: memory, and a fresh client's health check.
    let mut at_capacity_kib = None;
    let mut unanswered_health = 0;
    let mut health_checks: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let done = next.load(Ordering::Relaxed).min(options.checks);
        health_checks += 1;
        if get(addr, "/healthz").await.map(|(status, _)| status) != Some(200) {
            unanswered_health += 1;
        }
        let (peak, rss) = memory_kib(pid);
        if at_capacity_kib.is_none() && done >= capacity {
            at_capacity_kib = Some(rss);
        }
        if health_checks.is_multiple_of(30) {
            println!(
                "{:>5} s: {done} checks, RSS {rss} KiB, peak {peak} KiB",
                started.elapsed().as_secs()
            );
        }
        if drivers.iter().all(|driver| driver.is_finished()) {
            break;
        }
        if started.elapsed() > Duration::from_secs(options.max_secs) {
            println!("time bound reached; stopping");
            stop.store(true, Ordering::Relaxed);
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("slidegate exited: {status}");
        }
    }
    let elapsed = started.elapsed();
    let metrics = get(addr, "/metrics")
        .await
        .map(|(_, m)| m)
        .unwrap_or_default();
    let (peak_kib, rss_kib) = memory_kib(pid);
    let _ = child.kill();
    let _ = child.wait();

    let checks = next.load(Ordering::Relaxed).min(options.checks);
    println!(
        "checks with distinct keys: {checks} in {:.0} s over {} keep-alive connections",
        elapsed.as_secs_f64(),
        options.connections
    );
    println!(
        "failed or unanswered checks: {}",
        failures.load(Ordering::Relaxed)
    );
    println!("fresh-client health checks unanswered: {unanswered_health} of {health_checks}");
    println!(
        "evictions: {}",
        sample(&metrics, "slidegate_memory_evictions_total")
    );
    println!(
        "peak RSS (VmHWM): {:.1} MiB; RSS at the end: {:.1} MiB",
        peak_kib as f64 / 1024.0,
        rss_kib as f64 / 1024.0
    );
    if let Some(at_capacity) = at_capacity_kib.filter(|_| capacity > 0) {
        let per_counter =
            (at_capacity.saturating_sub(baseline_kib) * 1024) as f64 / capacity as f64;
        println!(
            "RSS when the store first reached capacity: {:.1} MiB; above the start: {per_counter:.1} bytes per counter (whole process)",
            at_capacity as f64 / 1024.0
        );
        let end = (rss_kib.saturating_sub(baseline_kib) * 1024) as f64 / capacity as f64;
        println!("at the end, above the start: {end:.1} bytes per counter (whole process)");
    }
}
