//! What a client sends is bounded in work and memory, not only in count:
//! the counters one policy may touch (`limits.max_counters`), the
//! near-cache in bytes (`near_cache.max_bytes`), and the embedded store's
//! capacity over the counters of failure mode `local`. Each on the real
//! server or library, as a user runs it.
#![cfg(all(feature = "server", feature = "memcached"))]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use common::http;
use common::in_process;
use serde_json::json;
use slidegate::config::{Config, Overrides};
use slidegate::server::{self, App};
use tokio::sync::oneshot;

/// The real server, built from a configuration as the binary builds it.
struct Served {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// A configuration from `toml`, as if read from `bounds.toml`.
fn resolve(toml: &str) -> Result<Config, String> {
    Config::resolve(
        Some((Path::new("bounds.toml"), toml)),
        &Overrides::default(),
    )
    .map_err(|error| error.to_string())
}

async fn serve(toml: &str) -> Served {
    let config = resolve(toml).expect("a valid configuration");
    let app = Arc::new(App::from_config(&config).await.expect("the app"));
    let served = in_process::serve(server::serve, app).await;
    Served {
        addr: served.addr,
        _stop: served.stop,
    }
}

/// `count` limits at precision 1000, each with its own window.
fn fine_limits(count: usize) -> Vec<serde_json::Value> {
    (1..=count)
        .map(|seconds| json!({"limit": 5, "window": format!("{seconds}s"), "precision": 1000}))
        .collect()
}

#[tokio::test]
async fn an_inline_policy_past_max_counters_is_a_400_naming_limits() {
    let served = serve("").await;
    // 16 limits at precision 1000: 16,016 counters in one ~1 KB body.
    let body = json!({"key": "k", "limits": fine_limits(16)});
    let response = http::post(served.addr, "/v1/check", &body.to_string()).await;
    assert_eq!(response.status, 400, "{}", response.body);
    let error = response.error();
    assert!(error.starts_with("limits: "), "{error}");
    assert!(
        error.contains("16016 counters") && error.contains("limits.max_counters = 128"),
        "{error}"
    );

    // At the bound: 127 + 1 = 128 counters pass.
    let at_bound =
        json!({"key": "k", "limits": [{"limit": 5, "window": "127s", "precision": 127}]});
    let response = http::post(served.addr, "/v1/check", &at_bound.to_string()).await;
    assert_eq!(response.status, 200, "{}", response.body);

    // A higher bound, configured, lets the same body through.
    let served = serve("[limits]\nmax_counters = 16016\n").await;
    let response = http::post(served.addr, "/v1/peek", &body.to_string()).await;
    assert_eq!(response.status, 200, "{}", response.body);
}

#[test]
fn a_configured_policy_past_max_counters_is_a_config_error_naming_it() {
    let limits: Vec<String> = (1..=16)
        .map(|seconds| format!("{{ limit = 5, window = \"{seconds}s\", precision = 1000 }}"))
        .collect();
    let toml = format!("[policies.big]\nlimits = [{}]\n", limits.join(", "));
    let error = resolve(&toml).unwrap_err();
    assert!(
        error.starts_with("bounds.toml: policies.big.limits: 16016 counters"),
        "{error}"
    );
    assert!(error.contains("limits.max_counters = 128"), "{error}");

    for bad in ["0", "1", "16017"] {
        let toml = format!("[limits]\nmax_counters = {bad}\n");
        let error = resolve(&toml).unwrap_err();
        assert!(
            error.starts_with("bounds.toml: limits.max_counters: must be from 2 to 16016"),
            "{error}"
        );
    }
}

/// A reload that lowers `limits.max_counters` holds each request to the
/// bound of the configuration it was served under. One that read a wide
/// named policy just before the reload is decided (before, the limiter held
/// it to the new bound and it was a 400), while inline limits past the new
/// bound, parsed after it, are refused naming it.
#[tokio::test]
async fn a_lowered_max_counters_holds_each_request_to_its_own_configuration() {
    let wide = resolve(
        "[limits]\nmax_counters = 128\n[policies.wide]\n\
         limits = [{ limit = 5, window = \"100s\", precision = 100 }]\n",
    )
    .expect("a valid configuration");
    let app = Arc::new(App::from_config(&wide).await.expect("the app"));
    // What a request of the first configuration holds: its policy, 101
    // counters, read before the reload.
    let read_before = wide.policies["wide"].clone();
    let narrow = resolve("[limits]\nmax_counters = 16\n").expect("a valid configuration");
    app.apply_config(&narrow);
    let decision = app.limiter().check("k", &read_before, 1).await;
    assert!(decision.is_ok(), "{decision:?}");

    let served = in_process::serve(server::serve, app).await;
    let body = json!({"key": "k", "limits": [{"limit": 5, "window": "100s", "precision": 100}]});
    let response = http::post(served.addr, "/v1/check", &body.to_string()).await;
    assert_eq!(response.status, 400, "{}", response.body);
    let error = response.error();
    assert!(
        error.starts_with("limits: ") && error.contains("limits.max_counters = 16"),
        "{error}"
    );
}

/// `memory.capacity` bounds the counters of failure mode `local` too: with
/// Memcached down, a flood of distinct keys decided on this process's
/// counters holds at most that many.
#[tokio::test]
async fn local_fallback_counters_stay_within_memory_capacity() {
    let mut memcached = common::Memcached::start();
    let toml = format!(
        "[memcached]\nservers = [\"{}\"]\ntimeout_ms = 2000\n\
         [failure]\nmode = \"local\"\n[memory]\ncapacity = 256\n\
         [policies.api]\nlimits = [{{ limit = 5, window = \"1m\" }}]\n",
        memcached.addr()
    );
    let config = resolve(&toml).expect("a valid configuration");
    let app = App::from_config(&config).await.expect("the app");
    memcached.kill();

    let limiter = app.limiter();
    let policy = &config.policies["api"];
    for index in 0..5_000 {
        let decision = limiter
            .check(&format!("flood-{index}"), policy, 1)
            .await
            .expect("decided by the local counters");
        assert_eq!(decision.source, slidegate::Source::Fallback);
    }
    let held = limiter.local_counters();
    println!("local counters after 5,000 distinct keys: {held} (capacity 256)");
    assert!(held <= 256, "{held} local counters, capacity 256");
    assert!(held > 0);
}

/// The near-cache holds at most `near_cache.capacity` keys, however many
/// are refused: 200 keys each refused by the store, a capacity of 16.
#[tokio::test]
async fn the_near_cache_holds_at_most_its_capacity() {
    use slidegate::{Limit, MemoryStore, Policy, Source};

    const CAPACITY: u64 = 16;
    let limiter = common::patient_limiter(MemoryStore::new())
        .near_cache_capacity(CAPACITY)
        .build();
    let policy = Policy::new("one", vec![Limit::new(1, 3_600_000, 1).unwrap()]).unwrap();
    for index in 0..200 {
        let key = format!("key-{index}");
        assert!(limiter.check(&key, &policy, 1).await.unwrap().allowed);
        let refused = limiter.check(&key, &policy, 1).await.unwrap();
        assert_eq!((refused.allowed, refused.source), (false, Source::Store));
    }
    // Settled: moka applies its bound in its pending bookkeeping.
    limiter.near_cache_bytes();
    let held = limiter.near_cache_len();
    println!("200 keys refused, near-cache capacity {CAPACITY}: {held} held");
    assert!(held <= CAPACITY, "{held} keys held");
    assert!(held > 0, "the near-cache remembered nothing");
}
