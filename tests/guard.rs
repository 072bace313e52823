//! What bounds and guards the service, on the real binary: the API token,
//! the connection cap, the embedded store's capacity. No timed assertions:
//! every wait is bounded, and only bounds a hang.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::http;
use common::metrics::Exposition;
use common::process;
use common::service::Slidegate;
use common::wait::{PATIENCE, wait_for_blocking};
use slidegate::server::{self, Access, Methods, RoutePath};

const TOKEN: &str = "s3cret-token-0123456789abcdef";
const OTHER_TOKEN: &str = "other-token-0123456789abcdef";
const CHECK: &str = r#"{"key": "client-42", "policy": "api"}"#;
const POLICY: &str = "[policies.api]\nlimits = [{ limit = 1000, window = \"1m\" }]\n";

/// The binary on `config` (its `listen` added), logging everything it can
/// (to show that no token is in it); `configure` adds flags, variables or
/// files in its directory.
fn start(name: &str, config: &str, configure: impl FnOnce(&mut Command, &Path)) -> Slidegate {
    let dir = Slidegate::dir(&format!("guard-{name}"));
    let addr = process::free_addr();
    let file = dir.join("slidegate.toml");
    std::fs::write(&file, format!("listen = \"{addr}\"\n{config}")).unwrap();
    let mut command = Slidegate::command();
    command.arg("--config").arg(&file).env("RUST_LOG", "trace");
    configure(&mut command, &dir);
    Slidegate::start_in(dir, command, addr, &[])
}

/// The value of a series in a `/metrics` page, parsed.
fn sample(metrics: &str, series: &str) -> u64 {
    Exposition::parse(metrics).value(series) as u64
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn call(service: &Slidegate, method: &str, path: &str, auth: Option<&str>) -> http::Response {
    let auth = auth.map(bearer);
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    let body = if method == "POST" { CHECK } else { "" };
    http::send(service.addr, method, path, &headers, body.to_owned()).await
}

#[tokio::test]
async fn with_tokens_set_the_api_needs_one_and_health_stays_open() {
    let service = start(
        "tokens",
        &format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\", \"{OTHER_TOKEN}\"]\n"),
        |_, _| {},
    );
    let protected = [
        ("POST", "/v1/check"),
        ("POST", "/v1/peek"),
        ("POST", "/v1/report"),
        ("GET", "/v1/auth?policy=api"),
    ];
    let mut refused = 0;
    for (method, path) in protected {
        for auth in [None, Some("wrong-token-0123456789abcdef"), Some("")] {
            let response = call(&service, method, path, auth).await;
            assert_eq!(response.status, 401, "{method} {path} with {auth:?}");
            assert_eq!(response.header("content-type"), Some("application/json"));
            assert_eq!(
                response.header("www-authenticate"),
                Some("Bearer realm=\"slidegate\"")
            );
            assert!(
                response.error().starts_with("authorization: "),
                "{}",
                response.body
            );
            refused += 1;
        }
        for token in [TOKEN, OTHER_TOKEN] {
            let response = call(&service, method, path, Some(token)).await;
            assert_eq!(response.status, 200, "{method} {path}: {}", response.body);
        }
    }
    // Another scheme, or the token without one, is no bearer token.
    let basic = http::send(
        service.addr,
        "POST",
        "/v1/check",
        &[("authorization", &format!("Basic {TOKEN}"))],
        CHECK.to_owned(),
    )
    .await;
    assert_eq!(basic.status, 401);
    let lower = http::send(
        service.addr,
        "POST",
        "/v1/check",
        &[("authorization", &format!("bearer {TOKEN}"))],
        CHECK.to_owned(),
    )
    .await;
    assert_eq!(lower.status, 200, "the scheme is case-insensitive");

    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            call(&service, "GET", path, None).await.status,
            200,
            "{path}"
        );
    }
    let metrics = call(&service, "GET", "/metrics", None).await.body;
    assert_eq!(
        sample(&metrics, "slidegate_unauthorized_total"),
        refused + 1
    );

    let log = service.log();
    assert!(log.contains("listening on"), "{log}");
    assert!(!log.contains(TOKEN) && !log.contains(OTHER_TOKEN), "{log}");
    println!(
        "401 for {} requests without a valid token; 200 with either token",
        refused + 1
    );
}

/// The path form of forward-auth counts as the query form does: without a
/// token it must not spend anyone's quota.
#[tokio::test]
async fn forward_auth_by_path_needs_a_token_too() {
    let service = start(
        "auth-path",
        &format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\n"),
        |_, _| {},
    );
    let victim = [("x-ratelimit-key", "victim")];
    let response = http::send(service.addr, "GET", "/v1/auth/api/x", &victim, "").await;
    assert_eq!(response.status, 401, "{}", response.body);
    assert_eq!(
        response.header("www-authenticate"),
        Some("Bearer realm=\"slidegate\"")
    );
    let token = bearer(TOKEN);
    let with_token = [victim[0], ("authorization", token.as_str())];
    let response = http::send(service.addr, "GET", "/v1/auth/api/x", &with_token, "").await;
    assert_eq!(response.status, 200, "{}", response.body);
}

/// Every route of the service's own table, called without a token: 401
/// wherever tokens apply, never 401 where they do not. The list comes from
/// the table, so a route added later is walked too.
#[tokio::test]
async fn every_route_without_a_token_is_refused_where_tokens_apply() {
    for metrics_need_token in [false, true] {
        let service = start(
            &format!("walk-{metrics_need_token}"),
            &format!(
                "{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\nmetrics_need_token = {metrics_need_token}\n"
            ),
            |_, _| {},
        );
        let mut open = Vec::new();
        for route in server::ROUTES {
            let path = match route.path {
                RoutePath::Exact(path) => path.to_owned(),
                RoutePath::Prefix(prefix) => format!("{prefix}api/x"),
            };
            let method = match route.methods {
                Methods::Post => "POST",
                Methods::Get => "GET",
            };
            let guarded = match route.access {
                Access::Token => true,
                Access::TokenIfMetricsNeedIt => metrics_need_token,
                Access::Open => false,
            };
            let response = call(&service, method, &path, None).await;
            if guarded {
                assert_eq!(response.status, 401, "{method} {path}: {}", response.body);
            } else {
                assert_ne!(response.status, 401, "{method} {path}: {}", response.body);
                open.push(path);
            }
        }
        let mut expected = vec!["/healthz", "/readyz"];
        if !metrics_need_token {
            expected.push("/metrics");
        }
        // The contract and the status page hold no data.
        expected.extend(["/openapi.json", "/"]);
        assert_eq!(open, expected, "metrics_need_token = {metrics_need_token}");
    }
}

#[tokio::test]
async fn metrics_can_need_a_token_from_the_environment_or_a_file() {
    let service = start(
        "metrics-token",
        &format!("{POLICY}[server]\napi_tokens_file = \"tokens\"\nmetrics_need_token = true\n"),
        |command, _| {
            command.env("SLIDEGATE_API_TOKENS", format!("{OTHER_TOKEN},{TOKEN}"));
        },
    );
    // The environment wins over the file (which does not even exist).
    assert_eq!(call(&service, "GET", "/metrics", None).await.status, 401);
    assert_eq!(
        call(&service, "GET", "/metrics", Some(TOKEN)).await.status,
        200
    );
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(OTHER_TOKEN))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "GET", "/healthz", None).await.status, 200);
    drop(service);

    let service = start(
        "tokens-file",
        &format!("{POLICY}[server]\napi_tokens_file = \"tokens\"\n"),
        |_, dir| {
            std::fs::write(dir.join("tokens"), format!("# rotated weekly\n{TOKEN}\n")).unwrap();
        },
    );
    assert_eq!(call(&service, "POST", "/v1/check", None).await.status, 401);
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(TOKEN))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "GET", "/metrics", None).await.status, 200);
}

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

#[tokio::test]
async fn the_embedded_store_evicts_at_capacity_and_counts_it() {
    let service = start("capacity", POLICY, |command, _| {
        command.args(["--memory-capacity", "16"]);
    });
    for index in 0..100 {
        let body = format!(r#"{{"key": "key-{index}", "policy": "api"}}"#);
        let response = http::post(service.addr, "/v1/check", &body).await;
        assert_eq!(response.status, 200, "{}", response.body);
    }
    let metrics = http::get(service.addr, "/metrics").await.body;
    assert_eq!(sample(&metrics, "slidegate_memory_capacity"), 16);
    assert_eq!(
        sample(&metrics, "slidegate_memory_evictions_total"),
        100 - 16
    );
}

/// When the store path is saturated (the connection's queue is full),
/// checks are answered by the failure mode at once instead of queueing:
/// here behind a node that takes a few kilobytes and then reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_store_path_answers_by_the_failure_mode_at_once() {
    use slidegate::{
        FailureMode, Limit, Limiter, MemcachedOptions, MemcachedStore, Policy, Source,
    };

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // A tiny receive window, so the writer blocks after a few checks.
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let node = listener.local_addr().unwrap().to_string();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let store = MemcachedStore::connect(&MemcachedOptions {
        servers: vec![node],
        namespace: common::unique_namespace(),
        // Queued checks wait this long: anything answered sooner was shed.
        timeout: Duration::from_secs(60),
        connections: 1,
        queue_depth: 8,
        ..MemcachedOptions::default()
    })
    .await
    .unwrap();
    let limiter = Arc::new(
        Limiter::builder(store)
            .timeout(Duration::from_secs(60))
            .failure_mode(FailureMode::Allow)
            .build(),
    );
    let policy = Arc::new(Policy::new("api", vec![Limit::new(10, 60_000, 1).unwrap()]).unwrap());
    const CHECKS: usize = 3_000;
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..CHECKS)
        .map(|index| {
            let (limiter, policy, answers) = (limiter.clone(), policy.clone(), answers.clone());
            tokio::spawn(async move {
                let key = format!("key-{index}");
                let _ = answers.send(limiter.check(&key, &policy, 1).await.unwrap());
            })
        })
        .collect();
    // Collect what is answered while the rest still wait for the node
    // (bounded: the queued checks would wait 60 s).
    let mut shed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // (The shed answers come at once; two quiet seconds end the wait.)
    while let Ok(Some(decision)) =
        tokio::time::timeout(Duration::from_secs(2), answered.recv()).await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "answers kept coming"
        );
        assert_eq!(decision.source, Source::Fallback);
        assert!(decision.allowed, "failure mode allow");
        shed += 1;
        if shed == CHECKS {
            break;
        }
    }
    println!("{shed} of {CHECKS} checks answered by the failure mode at once, the rest queued");
    assert!(shed > CHECKS / 2, "only {shed} shed");
    assert!(limiter.metrics().store_errors >= shed as u64);
    for task in tasks {
        task.abort();
    }
    silent.abort();
}

/// Tokens are 16 to 4096 bytes: a 4096-byte token opens the API, a
/// 4097-byte one stops the start, naming where it came from.
#[tokio::test]
async fn a_token_of_4096_bytes_works_and_a_longer_one_is_refused() {
    let longest = "t".repeat(4096);
    let service = start("longest-token", POLICY, |command, _| {
        command.env("SLIDEGATE_API_TOKENS", &longest);
    });
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(&longest))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "POST", "/v1/check", None).await.status, 401);
    drop(service);

    let mut command = Slidegate::command();
    command
        .args(["--listen", &process::free_addr().to_string()])
        .env("SLIDEGATE_API_TOKENS", "t".repeat(4097));
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success(), "started with a 4097-byte token");
    assert!(
        output.contains("SLIDEGATE_API_TOKENS") && output.contains("4097"),
        "{output}"
    );
}
