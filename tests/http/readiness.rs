//! `/readyz` needs no token, and asks the store: what a flood of probes
//! costs Memcached is bounded (counted from outside, by a proxy that
//! counts the no-ops it relays), checks beside it are decided by the store,
//! and the answer still follows the node down and back up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::config::AuthConfig;
use slidegate::server::{self, App};
use slidegate::store::memcached::READINESS_REUSE;
use slidegate::{AnyStore, FailureMode, Limiter, MemcachedStore};

use crate::common::proxy::CountingProxy;
use crate::common::wait::{PATIENCE, until, wait_for};
use crate::common::{self, http, in_process};

const PROBES: usize = 500;
const CHECKS: usize = 50;
const CHECK: &str = r#"{"key": "k", "limits": [{"limit": 1000000, "window": "1h"}]}"#;

/// `/readyz`'s status and the state it names for `node`.
async fn readyz(addr: std::net::SocketAddr, node: &str) -> (u16, String) {
    let response = http::get(addr, "/readyz").await;
    let body = response.json();
    let state = body["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|entry| entry["node"] == node))
        .and_then(|entry| entry["state"].as_str())
        .unwrap_or_default()
        .to_owned();
    (response.status, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_readiness_probes_costs_memcached_a_bounded_number_of_no_ops() {
    let mut memcached = common::Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let store = MemcachedStore::connect(&common::memcached_options(vec![proxy.addr.clone()]))
        .await
        .unwrap();
    // Fail closed, so a check the store did not decide is a 503, and
    // patient: on a loaded machine only the probes may make a check late.
    let limiter = Limiter::builder(AnyStore::Memcached(store))
        .failure_mode(FailureMode::Deny)
        .timeout(Duration::from_secs(2))
        .build();
    let app = Arc::new(App::new(limiter, Vec::new(), AuthConfig::default()));
    let addr = in_process::serve_forever(server::serve, app).await;
    let node = proxy.addr.clone();
    wait_for("ready", PATIENCE, || async {
        readyz(addr, &node).await == (200, "up".to_owned())
    })
    .await;

    let before = proxy.noops();
    let started = Instant::now();
    let probes: Vec<_> = (0..PROBES)
        .map(|_| tokio::spawn(async move { http::get(addr, "/readyz").await.status }))
        .collect();
    let checks = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..CHECKS {
            let response = http::post(addr, "/v1/check", CHECK).await;
            statuses.push((response.status, response.json()["source"].clone()));
        }
        statuses
    });
    let mut ready = 0;
    for probe in probes {
        ready += usize::from(probe.await.unwrap() == 200);
    }
    let checked = checks.await.unwrap();
    let took = started.elapsed();
    let sent = proxy.noops() - before;
    println!("{PROBES} concurrent /readyz in {took:?}: {sent} no-ops reached memcached");
    assert_eq!(ready, PROBES, "every probe answered ready");
    assert!(
        checked
            .iter()
            .all(|(status, source)| *status == 200 && source == "store"),
        "checks beside the probes fell to the failure mode: {checked:?}"
    );
    // One node: at most one answer from memcached per reuse period, and
    // one more for the period the flood began in.
    let periods = took.as_millis() / READINESS_REUSE.as_millis() + 2;
    assert!(
        u128::from(sent) <= periods,
        "{PROBES} probes sent {sent} no-ops in {took:?} (at most {periods})"
    );

    // Still truthful: the node down is named down, and 503, then up again.
    memcached.kill();
    let down_at = Instant::now();
    until("the node named down", PATIENCE, || async {
        (readyz(addr, &node).await == (503, "down".to_owned())).then_some(())
    })
    .await;
    println!("named down {:?} after the kill", down_at.elapsed());
    memcached.restart();
    wait_for("the node back up", PATIENCE, || async {
        readyz(addr, &node).await == (200, "up".to_owned())
    })
    .await;
}
