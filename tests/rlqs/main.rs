//! Envoy RLQS end to end: the real gRPC server on port-0 listeners over the
//! shared limiter on a real memcached, played against by clients that
//! behave as Envoy's rate-limit-quota filter does (tests/rlqs/envoy.rs).
//!
//! Time: the fleet runs on a manual clock shared by the servers' limiters
//! and the clients, moved in 50 ms steps, so a minute of traffic at the
//! issue's figures (4 clients demanding 2.7 x a limit of 600 per 10 s,
//! reports every second) takes a second or two in a debug build on a busy
//! machine, and the windows are the issue's real 10 s. Figures are printed
//! as `FIGURE ...` lines (`cargo test --test rlqs -- --nocapture`).
//!
//! This file holds the figures, the instances and the simulated fleet; the
//! tests are in the modules below, by what they test.

#[path = "../common/mod.rs"]
mod common;
mod envoy;

mod bounds;
mod example;
mod failure_mode;
mod fleet;
mod guard;
mod memory;
mod reconnect;
mod shutdown;
mod streams;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::in_process;
use envoy::{FakeEnvoy, Labels, Poisson, labels};
use slidegate::config::{AuthConfig, Config, Overrides, RlqsConfig, ServerGuard};
use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use slidegate::server::{App, rlqs};
use slidegate::{AnyStore, FailureMode, Limiter, ManualClock};
use tokio::sync::oneshot;

const LIMIT: usize = 600;
const WINDOW_MS: u64 = 10_000;
const INTERVAL_MS: u64 = 1_000;
const STEP_MS: u64 = 50;

const RLQS: &str = r#"
[rlqs]
assignment_ttl = "10s"
abandon_after = "5s"
unmatched = "allow"

[[rlqs.buckets]]
domain = "envoy"
match = { name = "api", tenant = "*" }
limit = 600
window = "10s"
precision = 10

[[rlqs.buckets]]
match = { name = "closed" }
limit = 1
window = "1m"
"#;

fn rlqs_config(text: &str) -> RlqsConfig {
    Config::resolve(
        Some((Path::new("slidegate.toml"), text)),
        &Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"))
    .rlqs
}

struct Instance {
    addr: SocketAddr,
    app: Arc<App>,
    _stop: oneshot::Sender<()>,
}

async fn instance(
    store: AnyStore,
    clock: &ManualClock,
    mode: FailureMode,
    guard: ServerGuard,
) -> Instance {
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        // Generous: the machine is shared; the failure tests kill memcached.
        .timeout(Duration::from_secs(2))
        .failure_mode(mode)
        .build();
    let app = Arc::new(
        App::new(limiter, [], AuthConfig::default())
            .with_guard(guard)
            .with_rlqs(&rlqs_config(RLQS)),
    );
    let served = in_process::serve(rlqs::serve, app.clone()).await;
    Instance {
        addr: served.addr,
        app,
        _stop: served.stop,
    }
}

/// An instance on the shared memcached, failing open, no token.
async fn plain_instance(clock: &ManualClock) -> Instance {
    instance(
        memcached().await,
        clock,
        FailureMode::Allow,
        ServerGuard::default(),
    )
    .await
}

/// Instances on the shared memcached in one namespace: they share one
/// count, failing open, no token.
async fn sharing_one_count(clock: &ManualClock, instances: usize) -> Vec<Instance> {
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let mut sharing = Vec::new();
    for _ in 0..instances {
        let store = slidegate::MemcachedStore::connect(&options).await.unwrap();
        sharing.push(
            instance(
                AnyStore::Memcached(store),
                clock,
                FailureMode::Allow,
                ServerGuard::default(),
            )
            .await,
        );
    }
    sharing
}

async fn memcached() -> AnyStore {
    AnyStore::Memcached(common::memcached_store().await)
}

/// A clock mid-day, on a window boundary: runs start where they expect.
fn clock() -> ManualClock {
    ManualClock::new(common::today_ms() + 3_600_000)
}

/// One simulated Envoy: its stream, its demand, what it admitted.
struct Client {
    envoy: FakeEnvoy,
    demand: Poisson,
    /// When in each interval it reports (Envoys' timers are not aligned).
    offset_ms: u64,
    admitted: Vec<u64>,
}

impl Client {
    async fn new(addr: SocketAddr, rate: f64, seed: u64, offset_ms: u64, start_ms: u64) -> Client {
        Client {
            envoy: FakeEnvoy::connect(addr, "envoy").await,
            demand: Poisson::new(rate, seed, start_ms),
            offset_ms,
            admitted: Vec::new(),
        }
    }
}

fn api() -> Labels {
    labels(&[("name", "api"), ("tenant", "t1")])
}

/// Run `clients` from `from_ms` to `to_ms` on the shared clock: each
/// step, every client's requests, then the reports due.
async fn run(clients: &mut [Client], clock: &ManualClock, from_ms: u64, to_ms: u64) {
    let bucket = api();
    let mut now = from_ms;
    while now < to_ms {
        now += STEP_MS;
        for client in clients.iter_mut() {
            for at in client.demand.until(now) {
                clock.set(at);
                if client.envoy.request(&bucket, at).await {
                    client.admitted.push(at);
                }
            }
            if now % INTERVAL_MS == client.offset_ms {
                clock.set(now);
                client.envoy.report_all(now).await;
            }
        }
    }
}

/// The most requests admitted in any window of `window_ms`, over times
/// from `from_ms` on.
fn most_in_any_window(clients: &[Client], from_ms: u64, window_ms: u64) -> usize {
    let mut times: Vec<u64> = clients
        .iter()
        .flat_map(|client| client.admitted.iter().copied())
        .filter(|&at| at >= from_ms)
        .collect();
    times.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last] - times[first] >= window_ms {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

fn admitted_between(client: &Client, from_ms: u64, to_ms: u64) -> usize {
    client
        .admitted
        .iter()
        .filter(|&&at| at >= from_ms && at < to_ms)
        .count()
}

/// Four clients, each a quarter of 2.7 x the limit.
async fn fleet(addrs: &[SocketAddr], start: u64) -> Vec<Client> {
    let rate = 2.7 * LIMIT as f64 / (WINDOW_MS / 1000) as f64 / 4.0;
    let mut clients = Vec::new();
    for index in 0..4u64 {
        let addr = addrs[index as usize % addrs.len()];
        clients.push(Client::new(addr, rate, index + 1, index * 250, start).await);
    }
    clients
}

fn reports(domain: &str, usages: Vec<envoy::Usage>) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: usages,
    }
}
