//! Envoy RLS end to end with tonic's client: the real gRPC server on a port-0
//! listener over the shared limiter, on the in-memory store and on a real
//! memcached. The semantics are envoyproxy/ratelimit's (src/service/ratelimit.go,
//! src/config/config_impl.go); where slidegate differs on purpose, the test
//! says so.
//!
//! This file holds the rules the tests load, the server they start and the
//! calls they make; the tests are in the modules below, by what they test.

#[path = "../common/mod.rs"]
mod common;

mod bad_requests;
mod counting;
mod guard;
mod hot;
mod refusal_log;
mod replicas;
mod rules;
mod several;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::in_process;
use slidegate::config::{AuthConfig, ServerGuard};
use slidegate::server::App;
use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response::Code,
    rate_limit_service_client::RateLimitServiceClient,
};
use slidegate::server::rls::{self, Rls, RuleSet};
use slidegate::{AnyStore, FailureMode, Limiter, ManualClock, MemoryStore};
use tokio::sync::oneshot;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domain: test
descriptors:
  # key + value before key alone
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 10, name: vip}
  # a value without rate_limit whitelists it
  - key: client
    value: trusted
  - key: path
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned_rule}
  - key: unban
    rate_limit:
      unit: minute
      requests_per_unit: 2
      replaces: [{name: banned_rule}]
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: prefix
    value: "files*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: every
    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 30, precision: 3}
"#;

struct TestRls {
    addr: SocketAddr,
    app: Arc<App>,
    clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestRls {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestRls {
    async fn start(store: AnyStore, config: &str) -> TestRls {
        TestRls::start_guarded(store, config, ServerGuard::default()).await
    }

    async fn start_guarded(store: AnyStore, config: &str, guard: ServerGuard) -> TestRls {
        let timeout = Duration::from_millis(500);
        TestRls::start_deciding(store, config, guard, timeout, FailureMode::Allow).await
    }

    /// For tests that count what a load admitted: the store may take
    /// seconds on a loaded machine, and a store that does not answer
    /// refuses (never an admission the counters did not see).
    async fn start_patient(store: AnyStore, config: &str) -> TestRls {
        let timeout = Duration::from_secs(5);
        let guard = ServerGuard::default();
        TestRls::start_deciding(store, config, guard, timeout, FailureMode::Deny).await
    }

    async fn start_deciding(
        store: AnyStore,
        config: &str,
        guard: ServerGuard,
        timeout: Duration,
        failure_mode: FailureMode,
    ) -> TestRls {
        // Mid-minute, so no window boundary falls inside a test.
        let clock = ManualClock::new(common::today_ms() + 30_000);
        let limiter = Limiter::builder(store)
            .clock(clock.clone())
            .timeout(timeout)
            .failure_mode(failure_mode)
            .build();
        let mut rules = RuleSet::default();
        rules.add_file("test.yaml", config).unwrap();
        let app = Arc::new(
            App::new(limiter, [], AuthConfig::default())
                .with_guard(guard)
                .with_rls(Rls::new(rules)),
        );
        let served = in_process::serve(rls::serve, app.clone()).await;
        TestRls {
            addr: served.addr,
            app,
            clock,
            stop: Some(served.stop),
        }
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        client(self.addr).await
    }
}

/// A tonic client on its own HTTP/2 connection.
pub async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    RateLimitServiceClient::new(channel)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// The codes of one request: overall, then per descriptor.
async fn codes(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> (Code, Vec<Code>) {
    let response = ask(client, request).await;
    (
        response.overall_code(),
        response
            .statuses
            .iter()
            .map(|status| status.code())
            .collect(),
    )
}

fn memory() -> AnyStore {
    AnyStore::Memory(MemoryStore::new())
}

async fn memcached() -> AnyStore {
    AnyStore::Memcached(common::memcached_store().await)
}
