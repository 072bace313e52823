//! A store that stops answering, over HTTP: each failure mode's answers,
//! readiness and metrics while it is down, and decisions from the store
//! again once it is back.

use serde_json::json;
use slidegate::FailureMode;

use super::{assert_json, memcached_app};
use crate::common::wait::{PATIENCE, wait_for};
use crate::common::{self, http, metrics};

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
