//! The most limited keys (`GET /v1/limited`): the order they come in, the
//! queries refused, and the sketch behind them, which keeps the heavy
//! hitters in bounded memory under a flood of one-shot keys.

use slidegate::server::ops::TopRefused;

use super::{Service, check, live_bytes, on_memcached};
use crate::common::{self, http};

#[tokio::test]
async fn the_most_limited_keys_come_first() {
    let text = on_memcached(
        &common::unique_namespace(),
        "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n\
         [policies.login]\nlimits = [{ limit = 1, window = \"1h\" }]\n",
    );
    let service = Service::start(&text).await;
    for (key, policy, refusals) in [
        ("heavy", "api", 6),
        ("medium", "login", 4),
        ("light", "api", 2),
    ] {
        for _ in 0..=refusals {
            service.post("/v1/check", check(key, policy)).await;
        }
    }
    let limited = service.get("/v1/limited?top=2").await;
    assert_eq!(limited.status, 200, "{}", limited.body);
    let keys = limited.json()["keys"].as_array().unwrap().clone();
    let found: Vec<(String, String, u64)> = keys
        .iter()
        .map(|entry| {
            (
                entry["key"].as_str().unwrap().to_owned(),
                entry["policy"].as_str().unwrap().to_owned(),
                entry["refused"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("heavy".to_owned(), "api".to_owned(), 6),
            ("medium".to_owned(), "login".to_owned(), 4)
        ]
    );
    assert!(keys[0]["last_refused_ms_ago"].as_u64().unwrap() < 60_000);
    assert_eq!(
        service.get("/v1/limited").await.json()["keys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    for bad in ["top=0", "top=1001", "top=x", "count=3"] {
        let answer = service.get(&format!("/v1/limited?{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}");
        let field = bad.split('=').next().unwrap();
        assert!(
            answer.error().starts_with(&format!("{field}: ")),
            "{}",
            answer.body
        );
    }
    let no_token = http::get(service.addr, "/v1/limited").await;
    assert_eq!(no_token.status, 401);

    // Forward-auth's refusals are listed as checks' are; the answer holds
    // 20 keys unless asked for more, up to 1,000.
    for index in 0..22 {
        let key = format!("proxied-{index}");
        for _ in 0..2 {
            service
                .get_with("/v1/auth?policy=api", &[("x-ratelimit-key", key.as_str())])
                .await;
        }
    }
    let listed = |answer: http::Response| answer.json()["keys"].as_array().unwrap().clone();
    let default = listed(service.get("/v1/limited").await);
    assert_eq!(default.len(), 20);
    let all = listed(service.get("/v1/limited?top=1000").await);
    assert_eq!(all.len(), 3 + 22, "{all:?}");
    assert!(
        all.iter()
            .any(|entry| entry["key"] == "proxied-21" && entry["refused"] == 1),
        "{all:?}"
    );
}

/// A shadow policy admits every request; what its limits would refuse is
/// what an operator trying it wants to see: counted apart on the status
/// page (`shadow`, not `allowed`) and listed among the most limited keys,
/// marked `shadow`, beside the keys really refused.
#[tokio::test]
async fn a_shadow_policys_would_be_refusals_are_shown_apart() {
    let text = on_memcached(
        &common::unique_namespace(),
        "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n\
         [policies.trial]\nlimits = [{ limit = 1, window = \"1h\" }]\nshadow = true\n",
    );
    let service = Service::start(&text).await;
    for _ in 0..4 {
        let answer = service.post("/v1/check", check("tried", "trial")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    for _ in 0..2 {
        service.post("/v1/check", check("refused", "api")).await;
    }
    let status = service.get("/v1/status").await.json();
    let minute = |name: &str| {
        status["policies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|policy| policy["name"] == name)
            .unwrap()["last_minute"]
            .clone()
    };
    assert_eq!(
        minute("trial"),
        serde_json::json!({"allowed": 1, "refused": 0, "exempt": 0, "shadow": 3})
    );
    assert_eq!(
        minute("api"),
        serde_json::json!({"allowed": 1, "refused": 1, "exempt": 0, "shadow": 0})
    );
    let limited = service.get("/v1/limited").await.json();
    let found: Vec<(String, u64, bool)> = limited["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["key"].as_str().unwrap().to_owned(),
                entry["refused"].as_u64().unwrap(),
                entry["shadow"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("tried".to_owned(), 3, true),
            ("refused".to_owned(), 1, false)
        ],
        "{limited}"
    );
}

#[test]
fn the_sketch_keeps_the_heavy_hitters_in_bounded_memory_under_a_flood() {
    let now = 1_700_000_000_000u64;
    let flood = |distinct: u64| {
        let before = live_bytes();
        let mut top = TopRefused::new(1024);
        // Over 50 s: heavy hitters among `distinct` one-shot keys.
        for index in 0..distinct {
            let at = now + index * 50_000 / distinct;
            top.record("api", &format!("flood-{index}"), at);
            if index % 100 == 0 {
                top.record("api", "heavy-1", at);
                top.record("api", "heavy-1", at);
                top.record("login", "heavy-2", at);
            }
        }
        let bytes = live_bytes() - before;
        (top, bytes)
    };
    let (top, bytes) = flood(100_000);
    let (_, bytes_10k) = flood(10_000);
    let found = top.top(2, now + 50_000);
    assert_eq!(
        (found[0].key.as_str(), found[1].key.as_str()),
        ("heavy-1", "heavy-2"),
        "{found:?}"
    );
    // Every refusal of the heavy hitters is counted (over-estimates only).
    assert!(
        found[0].refused >= 2_000 && found[1].refused >= 1_000,
        "{found:?}"
    );
    assert!(top.held() <= 6 * 1024);
    println!(
        "FIGURE top-k memory: {:.2} MiB after 100,000 distinct refused keys ({:.2} MiB after 10,000); {} keys held",
        bytes as f64 / 1048576.0,
        bytes_10k as f64 / 1048576.0,
        top.held()
    );
    assert!(bytes < 4 * 1024 * 1024, "{bytes} bytes");
    assert!(
        (bytes as f64) < 1.5 * bytes_10k as f64,
        "memory grows with the keys: {bytes} vs {bytes_10k}"
    );
}
