//! The HTTP API end to end: the real server on a port-0 listener, a real
//! client, both stores; and the real binary for configuration and signals.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::http::{self, Response};
use common::in_process;
use common::metrics;
use common::wait::{PATIENCE, wait_for};
use serde_json::json;
use slidegate::config::{AuthConfig, IpNet};
use slidegate::server::{self, App};
use slidegate::{
    AnyStore, FailureMode, Limit, Limiter, ManualClock, MemcachedStore, MemoryStore, Policy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

struct TestApp {
    addr: SocketAddr,
    app: Arc<App>,
    clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TestApp {
    async fn post(&self, path: &str, body: serde_json::Value) -> Response {
        http::post(self.addr, path, &body.to_string()).await
    }

    async fn get(&self, path: &str) -> Response {
        http::get(self.addr, path).await
    }
}

fn policies() -> Vec<Policy> {
    vec![
        Policy::new("api", vec![Limit::new(3, 60_000, 1).unwrap()]).unwrap(),
        Policy::new(
            "tiered",
            vec![
                Limit::new(10, 1_000, 1).unwrap(),
                Limit::new(3000, 600_000, 10).unwrap(),
            ],
        )
        .unwrap(),
    ]
}

async fn spawn_app(store: AnyStore, mode: FailureMode, auth: AuthConfig) -> TestApp {
    // Mid-minute, so the numbers below are exact.
    let clock = ManualClock::new(common::today_ms() + 30_000);
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .failure_mode(mode)
        .timeout(Duration::from_millis(500))
        .build();
    let app = Arc::new(App::new(limiter, policies(), auth));
    let served = in_process::serve(server::serve, app.clone()).await;
    TestApp {
        addr: served.addr,
        app,
        clock,
        stop: Some(served.stop),
        served: served.task,
    }
}

async fn memory_app() -> TestApp {
    spawn_app(
        AnyStore::Memory(MemoryStore::new()),
        FailureMode::Allow,
        AuthConfig::default(),
    )
    .await
}

async fn memcached_app(addr: String, mode: FailureMode) -> TestApp {
    let store = MemcachedStore::connect(&common::memcached_options(vec![addr]))
        .await
        .unwrap();
    spawn_app(AnyStore::Memcached(store), mode, AuthConfig::default()).await
}

fn assert_json(response: &Response) {
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{}",
        response.body
    );
}

/// The check → reject → peek → report cycle, with every field and header.
async fn decisions_carry_the_documented_fields(app: TestApp) {
    // Nothing counted yet: nothing has to leave the window.
    let fresh = app
        .post("/v1/peek", json!({"key": "client-42", "policy": "api"}))
        .await;
    assert_eq!(fresh.header("ratelimit"), Some("\"api\";r=3;t=0"));
    let body = json!({"key": "client-42", "policy": "api"});
    for remaining in [2, 1, 0] {
        let response = app.post("/v1/check", body.clone()).await;
        assert_eq!(response.status, 200);
        assert_json(&response);
        assert_eq!(
            response.header("ratelimit-policy"),
            Some("\"api\";q=3;w=60")
        );
        assert_eq!(response.json()["remaining"], remaining);
        // Counted 30 s into this minute: they leave the window when the
        // next minute ends, 90 s from now.
        let state = format!("\"api\";r={remaining};t=90");
        assert_eq!(response.header("ratelimit"), Some(state.as_str()));
        assert!(response.header("retry-after").is_none());
    }
    let response = app.post("/v1/check", body.clone()).await;
    assert_eq!(response.status, 429);
    assert_json(&response);
    // 3 in this minute, half gone: they decay to 2 at 20 s into the next.
    assert_eq!(
        response.json(),
        json!({
            "allowed": false, "remaining": 0, "retry_after_ms": 50_000,
            "limits": [{"limit": 3, "window_ms": 60_000, "precision": 1, "estimate": 3.0, "remaining": 0}],
            "source": "store"
        })
    );
    assert_eq!(response.header("retry-after"), Some("50"));
    assert_eq!(response.header("ratelimit"), Some("\"api\";r=0;t=50"));
    let again = app.post("/v1/check", body.clone()).await;
    assert_eq!(
        (again.status, again.json()["source"].clone()),
        (429, json!("near_cache"))
    );

    let peek = app
        .post("/v1/peek", json!({"key": "client-42", "policy": "api"}))
        .await;
    assert_eq!(
        (peek.status, peek.json()["limits"][0]["estimate"].clone()),
        (429, json!(3.0))
    );
    let report = app
        .post(
            "/v1/report",
            json!({"key": "client-42", "policy": "api", "cost": 2}),
        )
        .await;
    assert_eq!(report.status, 200, "a report always answers 200");
    assert_eq!(report.json()["allowed"], false);
    assert_eq!(report.json()["limits"][0]["estimate"], 5.0);

    // Inline limits, two of them, one at precision 10.
    let inline = json!({"key": "k", "cost": 2, "limits": [
        {"limit": 10, "window": "1s"}, {"limit": 3000, "window": "10m", "precision": 10}]});
    let response = app.post("/v1/check", inline).await;
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["remaining"], 8);
    assert_eq!(
        response.header("ratelimit-policy"),
        Some("\"inline-1s\";q=10;w=1, \"inline-10m-p10\";q=3000;w=600")
    );
    assert_eq!(
        response.header("ratelimit"),
        // 1 s window: this second's counts leave it at the end of the
        // next second; 10 min in 1 min sub-buckets, 30 s into one: its end
        // and 10 min more.
        Some("\"inline-1s\";r=8;t=2, \"inline-10m-p10\";r=2998;t=630")
    );

    // A cost no limit can ever admit.
    let never = app
        .post(
            "/v1/check",
            json!({"key": "k2", "policy": "api", "cost": 4}),
        )
        .await;
    assert_eq!(
        (never.status, never.json()["retry_after_ms"].clone()),
        (429, json!(null))
    );
    assert!(never.header("retry-after").is_none());

    // Two windows on, everything counted has slid out.
    app.clock.advance(Duration::from_secs(120));
    let response = app.post("/v1/check", body).await;
    assert_eq!(
        (
            response.status,
            response.json()["limits"][0]["estimate"].clone()
        ),
        (200, json!(1.0))
    );
}

#[tokio::test]
async fn decisions_on_the_memory_store() {
    decisions_carry_the_documented_fields(memory_app().await).await;
}

#[tokio::test]
async fn decisions_on_memcached() {
    let app = memcached_app(common::shared_memcached().addr(), FailureMode::Allow).await;
    decisions_carry_the_documented_fields(app).await;
}

/// `Retry-After` and the RateLimit `t` are whole seconds rounded up: half
/// a second into the minute, a wait of 49.5 s is 50, and counts that leave
/// the window in 89.5 s are `t=90` (rounded down, a client would come back
/// half a second early and be refused).
#[tokio::test]
async fn retry_after_and_t_round_up() {
    let app = memory_app().await;
    let check = |cost: u64| {
        app.post(
            "/v1/check",
            json!({"key": "r", "policy": "api", "cost": cost}),
        )
    };
    assert_eq!(check(1).await.status, 200);
    app.clock.advance(Duration::from_millis(500));
    let admitted = check(2).await;
    assert_eq!(admitted.status, 200);
    assert_eq!(admitted.header("ratelimit"), Some("\"api\";r=0;t=90"));
    let refused = check(1).await;
    assert_eq!(refused.status, 429);
    // 3 in this minute: 2 once a third of the next has gone, 49.5 s away.
    assert_eq!(refused.json()["retry_after_ms"], 49_500);
    assert_eq!(refused.header("retry-after"), Some("50"));
    assert_eq!(refused.header("ratelimit"), Some("\"api\";r=0;t=50"));
}

/// A refusal under several limits names each limit with its own `r` and
/// `t`: the full one its wait, the other what it still has.
#[tokio::test]
async fn a_refusal_under_several_limits_gives_each_its_own_r_and_t() {
    let app = memory_app().await;
    let check = |cost: u64| {
        app.post(
            "/v1/check",
            json!({"key": "s", "policy": "tiered", "cost": cost}),
        )
    };
    assert_eq!(check(10).await.status, 200);
    let refused = check(1).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    // 10 in this second: one more fits once a tenth of the next has gone.
    assert_eq!(refused.json()["retry_after_ms"], 1_100);
    assert_eq!(refused.header("retry-after"), Some("2"));
    assert_eq!(
        refused.header("ratelimit"),
        Some("\"tiered-1s\";r=0;t=2, \"tiered-10m-p10\";r=2990;t=0")
    );
}

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

/// An app on the memory store whose forward-auth trusts these proxies.
async fn forward_auth_app(trusted_proxies: &[&str]) -> TestApp {
    let auth = AuthConfig {
        trusted_proxies: trusted_proxies
            .iter()
            .map(|network| IpNet::parse(network).unwrap())
            .collect(),
        deny_status: 429,
    };
    spawn_app(
        AnyStore::Memory(MemoryStore::new()),
        FailureMode::Allow,
        auth,
    )
    .await
}

#[tokio::test]
async fn forward_auth_keys_statuses_and_headers() {
    let app = forward_auth_app(&["127.0.0.1"]).await;
    let auth_get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        http::send(app.addr, "GET", path, headers, Vec::new())
    };
    let admitted = auth_get("/v1/auth?policy=api", &[("x-ratelimit-key", "token-1")]).await;
    assert_eq!((admitted.status, admitted.body.as_str()), (200, ""));
    assert_eq!(
        admitted.header("content-type"),
        None,
        "an empty body has no content type"
    );
    assert_eq!(admitted.header("ratelimit"), Some("\"api\";r=2;t=90"));
    auth_get(
        "/v1/auth?policy=api&cost=2",
        &[("x-ratelimit-key", "token-1")],
    )
    .await;
    let refused = auth_get("/v1/auth?policy=api", &[("x-ratelimit-key", "token-1")]).await;
    assert_eq!(
        (refused.status, refused.header("retry-after")),
        (429, Some("50"))
    );
    let for_nginx = auth_get(
        "/v1/auth?policy=api&deny_status=403",
        &[("x-ratelimit-key", "token-1")],
    )
    .await;
    assert_eq!(for_nginx.status, 403);

    // Without the header: the rightmost X-Forwarded-For hop that is not a
    // trusted proxy (10.0.0.1), since 127.0.0.1 (this test) is one.
    let forwarded: &[(&str, &str)] = &[("x-forwarded-for", "203.0.113.9, 10.0.0.1")];
    for _ in 0..3 {
        assert_eq!(auth_get("/v1/auth?policy=api", forwarded).await.status, 200);
    }
    assert_eq!(auth_get("/v1/auth?policy=api", forwarded).await.status, 429);
    assert_eq!(
        auth_get(
            "/v1/auth?policy=api",
            &[("x-forwarded-for", "198.51.100.1")]
        )
        .await
        .status,
        200,
        "another client is another key"
    );

    for (path, expected) in [
        ("/v1/auth", "policy: is required"),
        ("/v1/auth?policy=nope", "policy: no policy named"),
        (
            "/v1/auth?policy=api&cost=x",
            "cost: \"x\" is not a whole number",
        ),
        (
            "/v1/auth?policy=api&cost=0",
            "cost: must be an integer from 1",
        ),
        ("/v1/auth?policy=api&deny_status=200", "deny_status:"),
        (
            "/v1/auth?policy=api&colour=red",
            "colour: unknown query parameter",
        ),
    ] {
        let response = auth_get(path, &[]).await;
        assert_eq!(response.status, 400, "{path}");
        assert!(
            response.error().starts_with(expected),
            "{path}: {}",
            response.error()
        );
    }
}

/// The key is the rightmost X-Forwarded-For hop that is not a trusted
/// proxy: the hops on its left are the client's to write. The two keys
/// start with different counts, so a wrong choice changes the status.
#[tokio::test]
async fn forward_auth_keys_on_the_rightmost_untrusted_hop() {
    let app = forward_auth_app(&["127.0.0.1", "10.0.0.0/8"]).await;
    let (victim, client) = ("203.0.113.66", "198.51.100.7");
    // The victim's quota is spent; the client's is whole.
    let spent = app
        .post(
            "/v1/check",
            json!({"key": victim, "policy": "api", "cost": 3}),
        )
        .await;
    assert_eq!(spent.status, 200);
    let auth_get = |forwarded: String| async move {
        http::send(
            app.addr,
            "GET",
            "/v1/auth?policy=api",
            &[("x-forwarded-for", forwarded.as_str())],
            Vec::new(),
        )
        .await
    };
    for forwarded in [
        // The client wrote the victim's address; the proxy appended the
        // client's.
        format!("{victim}, {client}"),
        // Through a chain of trusted proxies.
        format!("{victim}, {client}, 10.0.0.2, 10.0.0.3"),
        format!("{victim},{client} ,10.1.2.3"),
    ] {
        let response = auth_get(forwarded.clone()).await;
        assert_eq!(response.status, 200, "{forwarded}: keyed on the victim");
    }
    let peek = app
        .post("/v1/peek", json!({"key": client, "policy": "api"}))
        .await;
    assert_eq!(peek.json()["limits"][0]["estimate"], 3.0, "{}", peek.body);
    // Now the client's quota is spent and not the other's: refused.
    let response = auth_get(format!("198.51.100.200, {client}, 10.0.0.2")).await;
    assert_eq!(
        response.status, 429,
        "keyed on the address the client wrote"
    );
}

#[tokio::test]
async fn store_outage_over_http() {
    let mut memcached = common::Memcached::start();
    let open = memcached_app(memcached.addr(), FailureMode::Allow).await;
    let closed = memcached_app(memcached.addr(), FailureMode::Deny).await;
    let body = json!({"key": "k", "policy": "api"});
    assert_eq!(open.get("/readyz").await.status, 200);
    memcached.kill();

    let response = open.post("/v1/check", body.clone()).await;
    assert_eq!(
        (response.status, response.json()["source"].clone()),
        (200, json!("fallback"))
    );
    let response = closed.post("/v1/check", body.clone()).await;
    assert_eq!(response.status, 503);
    assert_json(&response);
    assert_eq!(response.json()["source"], "fallback");
    // Forward-auth too: under deny, an unreachable store is a 503, which
    // a proxy turns into a refusal.
    let auth = http::send(
        closed.addr,
        "GET",
        "/v1/auth?policy=api",
        &[("x-ratelimit-key", "k")],
        Vec::new(),
    )
    .await;
    assert_eq!(auth.status, 503, "{}", auth.body);
    let ready = open.get("/readyz").await;
    assert_eq!(
        (ready.status, ready.json()["status"].clone()),
        (503, json!("unavailable"))
    );
    let metrics = metrics::scrape(open.addr).await;
    assert_eq!(
        metrics.value(r#"slidegate_decisions_total{policy="api",outcome="fallback"}"#),
        1.0
    );

    // Back: the connections redial by themselves; until they have, a
    // check is still the failure mode's (503 under deny).
    memcached.restart();
    wait_for("the store to decide again", PATIENCE, || async {
        let response = closed.post("/v1/check", body.clone()).await;
        response.status == 200 && response.json()["source"] == "store"
    })
    .await;
    assert_eq!(closed.get("/readyz").await.status, 200);
}

/// Failure mode `local` over HTTP: with the store down, the process's own
/// counters enforce the limit, and say so (`source: fallback`).
#[tokio::test]
async fn local_mode_over_http_enforces_the_limit_while_the_store_is_down() {
    let mut memcached = common::Memcached::start();
    let app = memcached_app(memcached.addr(), FailureMode::Local).await;
    memcached.kill();
    let body = json!({"key": "k", "policy": "api"});
    for remaining in [2, 1, 0] {
        let response = app.post("/v1/check", body.clone()).await;
        assert_eq!(response.status, 200, "{}", response.body);
        assert_eq!(response.json()["source"], "fallback");
        assert_eq!(response.json()["remaining"], remaining);
    }
    let refused = app.post("/v1/check", body).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.json()["source"], "fallback");
    assert!(refused.header("retry-after").is_some());
}

/// A connection that sends no request for 10 s is closed, so idle
/// connections cannot hold places under the cap; not before.
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

mod binary {
    //! The `slidegate` binary itself: configuration layering, errors that
    //! name the file and field, SIGTERM.

    use super::common::process::free_addr;
    use super::common::service::Slidegate;
    use super::common::wait::{PATIENCE, wait_for};
    use super::common::{Memcached, http};

    /// The README: "the log says once when the store starts failing and
    /// once when it answers again", however many checks fail meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_says_once_when_the_store_fails_and_once_when_it_is_back() {
        const FAILING: &str = "store failing; the failure mode decides until it answers";
        const BACK: &str = "store answers again";
        let mut memcached = Memcached::start();
        let mut command = Slidegate::command();
        command.args(["--memcached", &memcached.addr(), "--timeout-ms", "2000"]);
        let service = Slidegate::start("store-log", command);
        let check = || async {
            let response = http::post(
                service.addr,
                "/v1/check",
                r#"{"key": "k", "limits": [{"limit": 1000, "window": "1h"}]}"#,
            )
            .await;
            response.json()["source"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(check().await, "store");
        memcached.kill();
        for _ in 0..20 {
            assert_eq!(check().await, "fallback");
        }
        memcached.restart();
        wait_for("the store to decide again", PATIENCE, || async {
            check().await == "store"
        })
        .await;
        for _ in 0..5 {
            assert_eq!(check().await, "store");
        }
        let log = service.stop();
        let lines = |what: &str| log.lines().filter(|line| line.contains(what)).count();
        assert_eq!((lines(FAILING), lines(BACK)), (1, 1), "{log}");
    }

    /// An orchestrator may stop the process the moment it listens: that
    /// SIGTERM is a clean stop, not the default action's kill. Asked as
    /// soon as a connection is accepted, a few times over, since the
    /// window is short.
    #[test]
    fn a_sigterm_right_after_it_listens_is_a_clean_stop() {
        use super::common::process::Daemon;
        for attempt in 0..20 {
            let dir = Slidegate::dir("early-sigterm");
            let addr = free_addr();
            let mut command = Slidegate::command();
            command.args(["--listen", &addr.to_string()]);
            let mut daemon = Daemon::start("slidegate", command, &dir.join("slidegate.log"));
            super::common::wait::wait_for_blocking("it listens", super::PATIENCE, || {
                std::net::TcpStream::connect(addr).is_ok()
            });
            let status = daemon.terminate(std::time::Duration::from_secs(15));
            assert!(
                status.is_some_and(|status| status.success()),
                "attempt {attempt}: {status:?}\n{}",
                daemon.log()
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn flags_beat_environment_beat_file() {
        let dir = Slidegate::dir("layers");
        let file = dir.join("layers.toml");
        let (in_file, in_env, in_flag) = (free_addr(), free_addr(), free_addr());
        std::fs::write(&file, format!("listen = \"{in_file}\"\n")).unwrap();

        let mut command = Slidegate::command();
        command
            .arg("--config")
            .arg(&file)
            .args(["--listen", &in_flag.to_string()])
            .env("SLIDEGATE_LISTEN", in_env.to_string());
        let log = Slidegate::start_in(Slidegate::dir("flag"), command, in_flag, &[]).stop();
        assert!(log.contains("no Memcached server configured"), "{log}");
        assert!(
            log.contains(&format!("listening on http://{in_flag}")),
            "{log}"
        );

        let mut command = Slidegate::command();
        command
            .arg("--config")
            .arg(&file)
            .env("SLIDEGATE_LISTEN", in_env.to_string());
        Slidegate::start_in(Slidegate::dir("env"), command, in_env, &[]).stop();

        let mut command = Slidegate::command();
        command.env("SLIDEGATE_CONFIG", &file);
        Slidegate::start_in(Slidegate::dir("file"), command, in_file, &[]).stop();
    }

    /// With only a discovery endpoint, the store is Memcached, and the log
    /// says so (the endpoint need not answer for the start to go on).
    #[test]
    fn discovery_alone_is_logged_as_memcached() {
        let endpoint = free_addr();
        let mut command = Slidegate::command();
        command.args(["--memcached-discovery", &endpoint.to_string()]);
        let log = Slidegate::start("discovery-alone", command).stop();
        assert!(!log.contains("no Memcached server configured"), "{log}");
        assert!(
            log.contains(&format!(
                "counting in Memcached via discovery at {endpoint}"
            )),
            "{log}"
        );
    }

    #[test]
    fn a_bad_file_stops_the_start_naming_file_and_field() {
        let dir = Slidegate::dir("bad-file");
        let file = dir.join("bad.toml");
        std::fs::write(
            &file,
            "[policies.api]\nlimits = [{ limit = 10, window = \"1s\", precision = 7 }]\n",
        )
        .unwrap();
        let mut command = Slidegate::command();
        command.arg("--config").arg(&file);
        let (status, output) = Slidegate::run_to_exit(command);
        assert!(!status.success());
        let expected = format!(
            "{}: policies.api.limits[0].precision: 7 does not divide",
            file.display()
        );
        assert!(output.contains(&expected), "{output}");

        let mut command = Slidegate::command();
        command.args(["--failure-mode", "sometimes"]);
        let (status, output) = Slidegate::run_to_exit(command);
        assert!(!status.success());
        assert!(
            output.contains("--failure-mode (or SLIDEGATE_FAILURE_MODE)"),
            "{output}"
        );
    }
}
