//! The HTTP API end to end: the real server on a port-0 listener, a real
//! client, both stores; and the real binary for configuration and signals.
//!
//! This file starts the app the tests talk to; the tests are in the modules
//! below, one for each part of the API.

#[path = "../common/mod.rs"]
mod common;

mod binary;
mod bodies_and_statuses;
mod connections;
mod decisions;
mod forward_auth;
mod readiness;
mod store_outage;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::http::{self, Response};
use common::in_process;
// Here for `binary`, which names it `super::PATIENCE`.
use common::wait::PATIENCE;
use slidegate::config::AuthConfig;
use slidegate::server::{self, App};
use slidegate::{
    AnyStore, FailureMode, Limit, Limiter, ManualClock, MemcachedStore, MemoryStore, Policy,
};
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
