//! Reverse proxies in front of an API, slidegate deciding through
//! `GET /v1/auth`: Debian's nginx (`auth_request`) and Caddy
//! (`forward_auth`), installed by the test when missing, running the configs
//! shipped in `examples/proxies/` (only their loopback ports are changed),
//! in front of the real `slidegate` binary on a real memcached.
//!
//! What a user of those configs relies on: N requests pass with the
//! RateLimit headers, request N+1 reaches the client as 429 with
//! `Retry-After` and the RateLimit headers, API keys and client addresses
//! are limited separately, and an X-Forwarded-For a client writes changes
//! nothing.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::http::{self, Response};
use common::process::{self, Daemon};
use common::service::Slidegate;
use common::tools;
use hyper::body::Bytes;

/// The limit of `examples/proxies/slidegate.toml`: 5 a minute.
const LIMIT: usize = 5;

fn shipped(name: &str) -> String {
    shipped_file(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/proxies")
            .join(name),
    )
}

fn shipped_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The three loopback addresses of the shipped configs, moved to free ports.
struct Ports {
    slidegate: SocketAddr,
    api: SocketAddr,
    proxy: SocketAddr,
}

impl Ports {
    fn rewrite(&self, config: &str) -> String {
        for shipped in ["127.0.0.1:8080", "127.0.0.1:3000", "127.0.0.1:8000"] {
            assert!(
                config.contains(shipped),
                "the shipped config names {shipped}"
            );
        }
        config
            .replace("127.0.0.1:8080", &self.slidegate.to_string())
            .replace("127.0.0.1:3000", &self.api.to_string())
            .replace("127.0.0.1:8000", &self.proxy.to_string())
            .replace(
                "localhost:8000",
                &format!("localhost:{}", self.proxy.port()),
            )
    }
}

/// slidegate with the shipped configuration, on the shared memcached, in a
/// namespace of its own; and the API, a tiny hyper server.
struct Stack {
    ports: Ports,
    dir: PathBuf,
    _slidegate: Slidegate,
    _api: tokio::task::JoinHandle<()>,
}

async fn stack(name: &str) -> Stack {
    let dir = process::temp_dir(name);
    std::fs::create_dir_all(dir.join("slidegate")).unwrap();
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ports = Ports {
        slidegate: process::free_addr(),
        api: api.local_addr().unwrap(),
        proxy: process::free_addr(),
    };
    let api_task = tokio::spawn(serve_api(api));
    let mut command = Slidegate::command();
    command
        .args(["--config"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/proxies/slidegate.toml"))
        .args(["--listen", &ports.slidegate.to_string()])
        .args(["--memcached", &common::shared_memcached().addr()])
        .args(["--namespace", &common::unique_namespace()])
        // Generous: every answer below is the store's, on a busy machine too.
        .args(["--timeout-ms", "2000"])
        .env("RUST_LOG", "warn");
    let slidegate = Slidegate::start_in(dir.join("slidegate"), command, ports.slidegate, &[]);
    Stack {
        ports,
        dir,
        _slidegate: slidegate,
        _api: api_task,
    }
}

/// The protected API: 200 `hello from the API` to everything but
/// `/forbidden`, which it answers 403 itself.
async fn serve_api(listener: tokio::net::TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request: hyper::Request<_>| async move {
                let forbidden = request.uri().path() == "/forbidden";
                let body = if forbidden {
                    "forbidden by the API"
                } else {
                    "hello from the API"
                };
                let mut response = hyper::Response::new(http_body_util::Full::new(
                    Bytes::from_static(body.as_bytes()),
                ));
                if forbidden {
                    *response.status_mut() = hyper::StatusCode::FORBIDDEN;
                }
                Ok::<_, std::convert::Infallible>(response)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

async fn through(proxy: SocketAddr, from: &str, headers: &[(&str, &str)]) -> Response {
    http::get_from(ip(from), proxy, "/orders", headers).await
}

fn assert_admitted(response: &Response, remaining: usize, what: &str) {
    assert_eq!(response.status, 200, "{what}: {}", response.body);
    assert_eq!(response.body, "hello from the API", "{what}");
    assert_ratelimit_headers(response, remaining, what);
}

fn assert_refused(response: &Response, what: &str) {
    assert_eq!(
        response.status, 429,
        "{what}: {} {:?}",
        response.body, response.headers
    );
    let retry: u64 = response
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Retry-After in {:?}", response.headers));
    // At most a window and a bucket share: 5 a minute frees one in 72 s.
    assert!((1..=72).contains(&retry), "{what}: Retry-After {retry}");
    assert_ratelimit_headers(response, 0, what);
}

/// The RateLimit headers of the shipped policy, `remaining` left.
fn assert_ratelimit_headers(response: &Response, remaining: usize, what: &str) {
    assert_eq!(
        response.header("ratelimit-policy"),
        Some("\"api\";q=5;w=60"),
        "{what}"
    );
    let state = response.header("ratelimit").unwrap_or_default();
    assert!(
        state.starts_with(&format!("\"api\";r={remaining};")),
        "{what}: RateLimit {state:?}"
    );
}

/// The behaviour every proxy config must give.
async fn limits_through(proxy: SocketAddr) {
    // An API key: N pass, N+1 is refused; a client-written
    // X-RateLimit-Key cannot pick another key.
    for sent in 0..LIMIT {
        let response = through(proxy, "127.0.0.1", &[("x-api-key", "alice")]).await;
        assert_admitted(&response, LIMIT - 1 - sent, "alice");
    }
    let refused = through(
        proxy,
        "127.0.0.1",
        &[("x-api-key", "alice"), ("x-ratelimit-key", "someone-else")],
    )
    .await;
    assert_refused(&refused, "alice, request N+1");

    // Another key, from the same address: its own counters.
    let bob = through(proxy, "127.0.0.1", &[("x-api-key", "bob")]).await;
    assert_admitted(&bob, LIMIT - 1, "bob");

    // No key: the client address is limited, whatever X-Forwarded-For
    // (or X-RateLimit-Key) the client writes.
    for sent in 0..LIMIT {
        let spoof = format!("203.0.113.{sent}");
        let headers = [
            ("x-forwarded-for", spoof.as_str()),
            ("x-ratelimit-key", spoof.as_str()),
        ];
        let response = through(proxy, "127.0.0.2", &headers).await;
        assert_admitted(&response, LIMIT - 1 - sent, "127.0.0.2");
    }
    let refused = through(proxy, "127.0.0.2", &[("x-forwarded-for", "198.51.100.1")]).await;
    assert_refused(
        &refused,
        "127.0.0.2, request N+1 with a new X-Forwarded-For",
    );

    // Another address: its own counters.
    let other = through(proxy, "127.0.0.3", &[]).await;
    assert_admitted(&other, LIMIT - 1, "127.0.0.3");

    // The API's own 403, on an admitted request, reaches the client as the
    // API wrote it (nginx's recipe turns only slidegate's 403 into a 429).
    let forbidden = http::get_from(
        ip("127.0.0.1"),
        proxy,
        "/forbidden",
        &[("x-api-key", "carol")],
    )
    .await;
    assert_eq!(forbidden.status, 403, "{}", forbidden.body);
    assert_eq!(forbidden.body, "forbidden by the API");
}

/// For `test`: Debian's `proxy` (installed when missing, see
/// tests/common/tools.rs) in front of a stack, run by `command` (given its
/// binary, the stack's directory and the path of the shipped `config`,
/// rewritten to the stack's ports); the limits checked through it.
async fn limits_through_proxy(
    test: &str,
    proxy: &str,
    config: &str,
    command: impl FnOnce(PathBuf, &Path, &Path) -> Command,
) {
    let found = tools::debian(proxy, proxy);
    let Some(binary) = tools::require(test, proxy, found) else {
        return;
    };
    let stack = stack(&format!("slidegate-{proxy}")).await;
    let file = stack.dir.join(config);
    std::fs::write(&file, stack.ports.rewrite(&shipped(config))).unwrap();
    let log = stack.dir.join(format!("{proxy}.log"));
    let mut daemon = Daemon::start(proxy, command(binary, &stack.dir, &file), &log);
    daemon.wait_for(stack.ports.proxy);
    limits_through(stack.ports.proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_limits_the_api() {
    let test = "nginx_auth_request_limits_the_api";
    limits_through_proxy(test, "nginx", "nginx.conf", |nginx, dir, config| {
        let mut command = Command::new(nginx);
        command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(config)
            .args(["-g", "daemon off; pid nginx.pid;"]);
        command
    })
    .await;
    // The 403 slidegate answers nginx never reaches a client: the recipe
    // turned every one into a 429 above.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_limits_the_api() {
    let test = "caddy_forward_auth_limits_the_api";
    limits_through_proxy(test, "caddy", "Caddyfile", |caddy, dir, config| {
        let mut command = Command::new(caddy);
        command
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(config)
            // Caddy keeps state under $HOME and the XDG directories.
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir)
            .env("XDG_CONFIG_HOME", dir);
        command
    })
    .await;
}

/// Without a proxy in between, a peer slidegate does not trust cannot pick
/// its key with X-Forwarded-For.
#[tokio::test]
async fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let stack = stack("slidegate-direct").await;
    let auth = "/v1/auth?policy=api";
    for sent in 0..LIMIT {
        let spoof = format!("203.0.113.{sent}");
        let response = http::get_from(
            ip("127.0.0.4"),
            stack.ports.slidegate,
            auth,
            &[("x-forwarded-for", &spoof)],
        )
        .await;
        assert_eq!(response.status, 200, "{}", response.body);
    }
    let response = http::get_from(
        ip("127.0.0.4"),
        stack.ports.slidegate,
        auth,
        &[("x-forwarded-for", "198.51.100.7")],
    )
    .await;
    assert_eq!(response.status, 429, "{}", response.body);
    assert!(response.header("retry-after").is_some());
    // The trusted proxy's (127.0.0.1) X-Forwarded-For is believed: with
    // the proxy's own quota spent, a client it forwards is still admitted,
    // which it would not be if the header were ignored.
    let from_proxy = |headers: &'static [(&'static str, &'static str)]| {
        http::get_from(ip("127.0.0.1"), stack.ports.slidegate, auth, headers)
    };
    for _ in 0..LIMIT {
        assert_eq!(from_proxy(&[]).await.status, 200);
    }
    assert_eq!(from_proxy(&[]).await.status, 429, "the proxy's own quota");
    let forwarded = from_proxy(&[("x-forwarded-for", "198.51.100.7")]).await;
    assert_eq!(forwarded.status, 200, "{}", forwarded.body);
}

/// The ports the harness hands out for daemons to listen on lie below the
/// kernel's ephemeral range and are never handed out twice by one test
/// process. A port from the ephemeral range, free when asked for, could be
/// taken as the source port of any client connection before the daemon
/// bound it (Caddy, which listens on every address, then failed to start:
/// "address already in use"), and two tests could be given the same one.
#[test]
fn harness_ports_are_outside_the_ephemeral_range_and_never_repeat() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("the kernel's ephemeral port range");
    let mut bounds = range.split_whitespace().map(|n| n.parse::<u16>().unwrap());
    let (low, high) = (bounds.next().unwrap(), bounds.next().unwrap());
    let mut seen = std::collections::HashSet::new();
    for _ in 0..500 {
        let port = process::free_addr().port();
        assert!(
            !(low..=high).contains(&port),
            "port {port} is in the ephemeral range {low}-{high}"
        );
        assert!(seen.insert(port), "port {port} was handed out twice");
    }
}
