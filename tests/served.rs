//! The service's newer faces, on one in-process app over the shared
//! memcached: `/metrics` (parsed as OpenMetrics, its series moving) and the
//! Grafana dashboard's queries against it, shadow mode, and forward-auth
//! by path (as Envoy ext_authz asks).

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::http;
use common::metrics::{Exposition, scrape};
use slidegate::config::AuthConfig;
use slidegate::server::{self, App};
use slidegate::{AnyStore, Limit, Limiter, MemcachedStore, Policy};

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(full).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// The service on the shared memcached with a plain, a shadow and a
/// two-limit policy.
async fn app() -> SocketAddr {
    let store = MemcachedStore::connect(&common::memcached_options(vec![
        common::shared_memcached().addr(),
    ]))
    .await
    .unwrap();
    let limiter = Limiter::builder(AnyStore::Memcached(store))
        .timeout(Duration::from_secs(2))
        .build();
    let policies = vec![
        Policy::new(
            "api",
            vec![Limit::per(2, Duration::from_secs(3600)).unwrap()],
        )
        .unwrap(),
        Policy::new(
            "trial",
            vec![Limit::per(1, Duration::from_secs(3600)).unwrap()],
        )
        .unwrap()
        .with_shadow(true),
    ];
    let app = Arc::new(App::new(limiter, policies, AuthConfig::default()));
    common::in_process::serve_forever(server::serve, app).await
}

/// The value of a series, 0 when it is not served (yet).
fn value(series: &Exposition, key: &str) -> f64 {
    series.get(key).unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_parse_and_move() {
    let addr = app().await;
    let before = scrape(addr).await;
    for series in [
        r#"slidegate_decisions_total{policy="api",outcome="allowed"}"#,
        r#"slidegate_decisions_total{policy="trial",outcome="shadow"}"#,
        r#"slidegate_store_errors_total{kind="timeout"}"#,
        r#"slidegate_config_reloads_total{result="failed"}"#,
    ] {
        assert_eq!(
            before.get(series),
            Some(0.0),
            "{series} exists from the start"
        );
    }
    let check = |body: &'static str| http::post(addr, "/v1/check", body);
    for _ in 0..2 {
        assert_eq!(check(r#"{"key": "m", "policy": "api"}"#).await.status, 200);
    }
    assert_eq!(check(r#"{"key": "m", "policy": "api"}"#).await.status, 429);
    assert_eq!(check(r#"{"key": "m", "policy": "api"}"#).await.status, 429);
    let inline = r#"{"key": "m", "limits": [{"limit": 5, "window": "1m"}]}"#;
    assert_eq!(check(inline).await.status, 200);
    assert_eq!(check(r#"{"key": "m"}"#).await.status, 400);

    let after = scrape(addr).await;
    let moved = |key: &str| value(&after, key) - value(&before, key);
    assert_eq!(
        moved(r#"slidegate_decisions_total{policy="api",outcome="allowed"}"#),
        2.0
    );
    assert_eq!(
        moved(r#"slidegate_decisions_total{policy="api",outcome="rejected"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"slidegate_decisions_total{policy="api",outcome="near_cache"}"#),
        1.0
    );
    assert_eq!(
        moved(r#"slidegate_decisions_total{policy="inline",outcome="allowed"}"#),
        1.0
    );
    assert_eq!(moved("slidegate_near_cache_hits_total"), 1.0);
    assert_eq!(moved("slidegate_check_duration_seconds_count"), 5.0);
    // Two checks counted, one refused (and rolled back), one inline: 5.
    assert_eq!(moved("slidegate_store_duration_seconds_count"), 5.0);
    assert_eq!(moved("slidegate_store_calls_total"), 5.0);
    assert_eq!(value(&after, "slidegate_near_cache_entries"), 1.0);
    // Three admitted checks, and the first scrape (counted once answered).
    assert_eq!(
        moved(r#"slidegate_http_responses_total{status="200"}"#),
        4.0
    );
    assert_eq!(
        moved(r#"slidegate_http_responses_total{status="429"}"#),
        2.0
    );
    assert_eq!(
        moved(r#"slidegate_http_responses_total{status="400"}"#),
        1.0
    );
    // No series is named after a key.
    assert!(after.series().all(|(series, _)| !series.contains("\"m\"")));
    // The store's topology: one configured node, its two connections up.
    assert_eq!(value(&after, "slidegate_memcached_nodes"), 1.0);
    let node = common::shared_memcached().addr();
    assert_eq!(
        value(
            &after,
            &format!(r#"slidegate_memcached_connections{{node="{node}"}}"#)
        ),
        2.0
    );
    assert_eq!(
        value(&after, "slidegate_memcached_tls_handshake_failures_total"),
        0.0
    );
    assert!(
        after
            .get(r#"slidegate_memcached_discovery_polls_total{result="failed"}"#)
            .is_some(),
        "discovery polls are served"
    );
}

/// A shadow policy refuses nothing, counts what it would admit, says what
/// it would have decided, and the metrics count its would-be rejects.
#[tokio::test]
async fn shadow_mode_admits_and_tells() {
    let addr = app().await;
    let body = r#"{"key": "s", "policy": "trial"}"#;
    let first = http::post(addr, "/v1/check", body).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["shadow"], true);
    assert_eq!(first.json()["would_allow"], true);
    let second = http::post(addr, "/v1/check", body).await;
    assert_eq!(second.status, 200, "admitted although over the limit");
    assert_eq!(second.json()["allowed"], true);
    assert_eq!(second.json()["would_allow"], false);
    assert!(second.header("retry-after").is_none());
    assert!(
        second.header("ratelimit").is_none(),
        "no RateLimit headers: clients must not slow down for a shadow limit"
    );
    // The wait it would have asked for: until the first check's count
    // has slid out of the hour window, the end of the bucket after its own
    // (1 to 2 hours away).
    let would_wait = second.json()["retry_after_ms"].as_u64().unwrap();
    assert!(
        (3_600_000..=7_200_000).contains(&would_wait),
        "retry_after_ms {would_wait}"
    );
    // The refused request was not counted: the estimate is still 1.
    assert_eq!(second.json()["limits"][0]["estimate"], 1.0);
    // A report is never shadowed: it says what the limits say, and counts.
    let report = http::post(
        addr,
        "/v1/report",
        r#"{"key": "s-report", "policy": "trial", "cost": 2}"#,
    )
    .await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(report.json()["allowed"], false, "{}", report.body);
    assert!(report.json().get("shadow").is_none(), "{}", report.body);
    assert_eq!(report.json()["limits"][0]["estimate"], 2.0, "counted");
    let peek = http::post(addr, "/v1/peek", body).await;
    assert_eq!(peek.json()["limits"][0]["estimate"], 1.0);
    // Forward-auth admits too.
    let auth = http::send(
        addr,
        "GET",
        "/v1/auth?policy=trial",
        &[("x-ratelimit-key", "s")],
        Vec::new(),
    )
    .await;
    assert_eq!(auth.status, 200);
    // Plain policies' answers carry no shadow fields.
    let plain = http::post(addr, "/v1/check", r#"{"key": "s", "policy": "api"}"#).await;
    assert!(plain.json().get("shadow").is_none());

    let series = scrape(addr).await;
    assert_eq!(
        value(
            &series,
            r#"slidegate_decisions_total{policy="trial",outcome="shadow"}"#
        ),
        3.0,
        "the second check, the peek and the auth would have been refused"
    );
}

/// The path form of forward-auth, as Envoy ext_authz asks it: the client's
/// path and query appended, ignored.
#[tokio::test]
async fn forward_auth_by_path_ignores_the_clients_path() {
    let addr = app().await;
    let ask = |path: &'static str| async move {
        http::send(
            addr,
            "GET",
            path,
            &[("x-ratelimit-key", "envoy")],
            Vec::new(),
        )
        .await
    };
    let first = ask("/v1/auth/api/orders/7?policy=other&cost=99").await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("ratelimit-policy"), Some("\"api\";q=2;w=3600"));
    assert_eq!(ask("/v1/auth/api").await.status, 200);
    let refused = ask("/v1/auth/api/").await;
    assert_eq!(refused.status, 429);
    assert!(refused.header("retry-after").is_some());
    let unknown = ask("/v1/auth/nope/x").await;
    assert_eq!(unknown.status, 400);
    assert!(
        unknown
            .error()
            .starts_with("policy: no policy named \"nope\"")
    );
}

/// Envoy's ext_authz sends the client's own method with the path form: a
/// client's POST, PUT, PATCH, DELETE or OPTIONS is decided like its GET,
/// never answered 405 (which Envoy would pass on as a refusal).
#[tokio::test]
async fn forward_auth_answers_whatever_method_the_proxy_sends() {
    let addr = app().await;
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "GET"] {
        let key = format!("envoy-{method}");
        let headers = [("x-ratelimit-key", key.as_str()), ("content-length", "0")];
        for path in ["/v1/auth/api/orders", "/v1/auth?policy=api"] {
            let answer = http::send(addr, method, path, &headers, Vec::new()).await;
            assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
            assert_eq!(
                answer.header("ratelimit-policy"),
                Some("\"api\";q=2;w=3600")
            );
        }
        let refused = http::send(addr, method, "/v1/auth/api/orders", &headers, Vec::new()).await;
        assert_eq!(refused.status, 429, "{method}: {}", refused.body);
    }
    // A parameter given twice is refused, whichever order: which one
    // counted would otherwise depend on it.
    for path in [
        "/v1/auth?policy=nope&policy=api",
        "/v1/auth?policy=api&policy=nope",
        "/v1/auth?policy=api&cost=1&cost=2",
    ] {
        let answer = http::send(
            addr,
            "GET",
            path,
            &[("x-ratelimit-key", "twice")],
            Vec::new(),
        )
        .await;
        assert_eq!(answer.status, 400, "{path}");
        assert!(
            answer.error().ends_with(": given twice"),
            "{path}: {}",
            answer.body
        );
    }
}

/// A client that sends a whole request without a body and then closes its
/// side (`shutdown(SHUT_WR)`, as `nc -N` and some probes do) still gets its
/// answer, and its forward-auth call is decided and counted.
#[tokio::test]
async fn a_request_then_a_half_close_is_answered() {
    use tokio::io::AsyncWriteExt;
    let addr = app().await;
    let ask = |request: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
        http::raw_exchange(&mut stream, b"", Duration::from_secs(5)).await
    };
    let health = ask("GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health:?}");
    let auth =
        "GET /v1/auth?policy=api HTTP/1.1\r\nhost: x\r\nx-ratelimit-key: half-closed\r\n\r\n";
    for expected in ["HTTP/1.1 200", "HTTP/1.1 200", "HTTP/1.1 429"] {
        let answer = ask(auth).await;
        assert!(answer.starts_with(expected), "{expected}: {answer:?}");
    }
}

/// Metric names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find("slidegate_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

#[tokio::test]
async fn the_grafana_dashboard_queries_served_metrics() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("examples/grafana/slidegate.json")).expect("valid JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    assert!(exprs.len() >= 6, "{exprs:?}");

    // A page with every family in it: some traffic, one of each answer.
    let addr = app().await;
    http::post(addr, "/v1/check", r#"{"key": "g", "policy": "api"}"#).await;
    let series = scrape(addr).await;
    let served: BTreeSet<String> = series
        .series()
        .map(|(key, _)| key.split('{').next().unwrap().to_owned())
        .collect();
    let mut queried = BTreeSet::new();
    for expr in &exprs {
        queried.extend(metric_names(expr));
    }
    for needed in [
        "slidegate_decisions_total",
        "slidegate_check_duration_seconds_bucket",
        "slidegate_store_duration_seconds_bucket",
        "slidegate_store_errors_total",
        "slidegate_near_cache_hits_total",
    ] {
        assert!(queried.contains(needed), "the dashboard shows {needed}");
    }
    for name in &queried {
        assert!(
            served.contains(name),
            "the dashboard queries {name}, which /metrics does not serve"
        );
    }
}
