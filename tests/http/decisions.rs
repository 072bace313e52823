//! Decisions as the API documents them: every field and header of check,
//! peek and report, on both stores, and how `Retry-After` and the RateLimit
//! `r` and `t` are worked out.

use std::time::Duration;

use serde_json::json;
use slidegate::FailureMode;

use super::{TestApp, assert_json, memcached_app, memory_app};
use crate::common;

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
