//! The HTTP phases: the real `slidegate` binary and a do-nothing hyper
//! server that parses the same body (the ceiling), each in its own process
//! so its peak RSS is its own, loaded by wrk with `bench/check.lua`; and
//! python `limits` on the same memcached.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::measure::Row;

/// A server process, killed when dropped.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// Envoy RLS gRPC, when served (slidegate only).
    pub rls_addr: Option<SocketAddr>,
    /// What it was started with (its configuration), removed when it stops.
    files: Vec<PathBuf>,
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

fn wait_listening(addr: SocketAddr, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("server exited before listening: {status}");
        }
        assert!(Instant::now() < deadline, "server did not listen on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `slidegate` on Memcached, with a roomy and a tight policy, and Envoy
/// RLS serving a roomy `bench` domain.
pub fn start_slidegate(binary: &Path, memcached: &str, namespace: &str) -> Server {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let rls_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let config = std::env::temp_dir().join(format!("slidegate-bench-{}.toml", std::process::id()));
    let rules = std::env::temp_dir().join(format!("slidegate-bench-{}.yaml", std::process::id()));
    std::fs::write(
        &rules,
        "domain: bench\ndescriptors:\n  - key: client\n    rate_limit:\n      unit: minute\n      requests_per_unit: 4000000000\n",
    )
    .expect("write the bench RLS rules");
    std::fs::write(
        &config,
        format!(
            r#"listen = "{addr}"

[memcached]
servers = ["{memcached}"]
namespace = "{namespace}"
timeout_ms = 200

[near_cache]
capacity = 100000

[policies.roomy]
limits = [{{ limit = 1000000000000, window = "1m" }}]

[policies.tight]
limits = [{{ limit = 1, window = "1m" }}]

[rls]
listen = "{rls_addr}"
config = "{rules}"
"#,
            rules = rules.display()
        ),
    )
    .expect("write the bench config");
    let mut child = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("start {}: {error}", binary.display()));
    wait_listening(addr, &mut child);
    wait_listening(rls_addr, &mut child);
    Server {
        child,
        addr,
        rls_addr: Some(rls_addr),
        files: vec![config, rules],
    }
}

/// This benchmark again, as the HTTP ceiling (`--echo-server`).
pub fn start_echo() -> Server {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let mut child = Command::new(std::env::current_exe().expect("the bench binary"))
        .arg("--echo-server")
        .arg(addr.to_string())
        .stdin(Stdio::null())
        .spawn()
        .expect("start the echo server");
    wait_listening(addr, &mut child);
    Server {
        child,
        addr,
        rls_addr: None,
        files: Vec::new(),
    }
}

/// Options of one wrk run, passed to `bench/check.lua` in its environment.
pub struct Load<'a> {
    pub name: &'a str,
    pub policy: &'a str,
    /// Keys cycled through; 0 for a fresh key per request (per thread).
    pub keys: u64,
    /// Requests per key before moving to the next one.
    pub repeat: u64,
    /// Requests per wrk thread, 0 for no bound but time.
    pub requests_per_thread: u64,
    pub connections: u32,
    pub seconds: u32,
    /// Whether a 2xx answer is the expected one.
    pub expect_ok: bool,
}

pub fn wrk(server: &Server, load: &Load) -> Row {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/check.lua");
    let output = Command::new("wrk")
        .args(["-t2", &format!("-c{}", load.connections)])
        .arg(format!("-d{}s", load.seconds))
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{}/v1/check", server.addr))
        .env("SG_POLICY", load.policy)
        .env("SG_KEYS", load.keys.to_string())
        .env("SG_REPEAT", load.repeat.to_string())
        .env("SG_REQUESTS", load.requests_per_thread.to_string())
        .output()
        .expect("run wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("WRK "))
        .unwrap_or_else(|| panic!("no result from wrk: {text}"));
    let numbers: Vec<f64> = line
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [
        requests,
        duration_us,
        p50,
        p99,
        p999,
        non_2xx,
        socket_errors,
    ] = numbers[..]
    else {
        panic!("unexpected wrk result {line}");
    };
    let unexpected = if load.expect_ok {
        non_2xx
    } else {
        requests - non_2xx
    };
    Row {
        name: load.name.to_owned(),
        concurrency: format!("wrk {} conns", load.connections),
        calls: requests as u64,
        elapsed: Duration::from_micros(duration_us as u64),
        p50,
        p99,
        p999,
        commands_per_call: None,
        peak_rss_kib: None,
        cpu_us_per_call: None,
        memcached_cpu_us_per_call: None,
        unexpected: (unexpected + socket_errors) as u64,
    }
}

/// python `limits` (SlidingWindowCounterRateLimiter over pymemcache), one
/// process, one check at a time, as its users call it.
pub fn python_limits(memcached: &str, checks: u64) -> Option<Row> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/python_limits.py");
    // bench/run.sh points this at the python of its virtual environment.
    let python = std::env::var_os("SLIDEGATE_BENCH_PYTHON").unwrap_or_else(|| "python3".into());
    let mut child = Command::new(python)
        .arg(&script)
        .arg(memcached)
        .arg(checks.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let pid = child.id();
    let stdout = child.stdout.take()?;
    let mut result = None;
    let mut peak = None;
    let (mut cpu_before, mut cpu_after) = (None, None);
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if line == "READY" {
            crate::measure::reset_peak_rss(pid);
            cpu_before = crate::measure::process_cpu(pid);
        } else if let Some(rest) = line.strip_prefix("RESULT ") {
            cpu_after = crate::measure::process_cpu(pid);
            peak = crate::measure::peak_rss_kib(pid);
            result = Some(rest.to_owned());
        }
    }
    let status = child.wait().ok()?;
    if !status.success() {
        eprintln!(
            "python limits failed ({status}); bench/run.sh installs it, or set \
             SLIDEGATE_BENCH_PYTHON to a python that has `limits` and `pymemcache`"
        );
        return None;
    }
    let numbers: Vec<f64> = result?
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [calls, seconds, p50, p99, p999] = numbers[..] else {
        return None;
    };
    Some(Row {
        name: "python limits (SlidingWindowCounter)".to_owned(),
        concurrency: "1 caller".to_owned(),
        calls: calls as u64,
        elapsed: Duration::from_secs_f64(seconds),
        p50,
        p99,
        p999,
        commands_per_call: None,
        peak_rss_kib: peak,
        cpu_us_per_call: crate::measure::per_call(cpu_before, cpu_after, calls as u64),
        memcached_cpu_us_per_call: None,
        unexpected: 0,
    })
}

/// The HTTP ceiling: parse the body as slidegate does, answer at once.
pub async fn serve_echo(addr: &str) {
    use http_body_util::{BodyExt, Full, Limited};
    use hyper::body::Bytes;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Call {
        key: String,
        policy: Option<String>,
        cost: Option<u64>,
    }
    const ANSWER: &str = r#"{"allowed":true,"remaining":999999999999,"retry_after_ms":0,"limits":[{"limit":1000000000000,"window_ms":60000,"precision":1,"estimate":1.0,"remaining":999999999999}],"source":"store"}"#;

    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind the echo server");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(
                |request: hyper::Request<hyper::body::Incoming>| async move {
                    let body = Limited::new(request.into_body(), 64 * 1024)
                        .collect()
                        .await
                        .map(|collected| collected.to_bytes())
                        .unwrap_or_default();
                    let status = match serde_json::from_slice::<Call>(&body) {
                        Ok(_) => 200,
                        Err(_) => 400,
                    };
                    let response = hyper::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
                        .expect("a valid response");
                    Ok::<_, std::convert::Infallible>(response)
                },
            );
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `keys` distinct keys, each checked `repeat` times in a row, over
/// `connections` keep-alive connections: a load bounded by count, which
/// wrk cannot stop early. Answers 200 and 429 are both expected.
pub async fn distinct_keys(
    server: &Server,
    name: &str,
    policy: &str,
    keys: u64,
    repeat: u64,
    connections: u64,
) -> Row {
    use http_body_util::{BodyExt, Full};
    use hyper::body::Bytes;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    let next = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (next, unexpected, addr) = (next.clone(), unexpected.clone(), server.addr);
            let policy = policy.to_owned();
            tokio::spawn(async move {
                let mut latencies = crate::measure::histogram();
                let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let _ = stream.set_nodelay(true);
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .expect("handshake");
                tokio::spawn(connection);
                loop {
                    let key = next.fetch_add(1, Ordering::Relaxed);
                    if key >= keys || started.elapsed() > Duration::from_secs(600) {
                        return latencies;
                    }
                    for _ in 0..repeat {
                        let body = format!(r#"{{"key":"distinct-{key}","policy":"{policy}"}}"#);
                        let request = hyper::Request::post("/v1/check")
                            .header("host", "bench")
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .expect("a valid request");
                        let began = Instant::now();
                        let answered = match sender.send_request(request).await {
                            Ok(response) => {
                                let status = response.status().as_u16();
                                let read = response.into_body().collect().await.is_ok();
                                read && (status == 200 || status == 429)
                            }
                            Err(_) => false,
                        };
                        let _ = latencies.record(began.elapsed().as_nanos() as u64);
                        if !answered {
                            unexpected.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    let mut all = crate::measure::histogram();
    for task in tasks {
        all.add(task.await.expect("load task"))
            .expect("same bounds");
    }
    Row {
        unexpected: unexpected.load(Ordering::Relaxed),
        ..Row::from_histogram(
            name,
            format!("{connections} conns"),
            &all,
            started.elapsed(),
        )
    }
}
