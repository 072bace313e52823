//! Exempt keys and addresses: they pass uncounted, only a trusted proxy can
//! claim an exempt address for its client, and a reload takes them away.

use std::path::Path;

use slidegate::config::reload::Reloader;
use slidegate::config::{Config, Overrides};
use slidegate::server;

use super::{Service, TOKEN, check, on_memcached, overrides};
use crate::common::{self, http};

#[tokio::test]
async fn exempt_keys_and_addresses_pass_uncounted_and_follow_reloads() {
    let exempting = "[auth]\ntrusted_proxies = [\"127.0.0.1\"]\nexempt_addresses = [\"127.0.0.2\"]\n\
         [policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n\
         exempt_keys = [\"health-checker\", \"internal-*\"]\n";
    let namespace = common::unique_namespace();
    let service = Service::start(&on_memcached(&namespace, exempting)).await;
    for key in ["health-checker", "internal-batch", "health-checker"] {
        let answer = service.post("/v1/check", check(key, "api")).await;
        assert_eq!(answer.status, 200, "{key}: {}", answer.body);
        assert_eq!(answer.json()["allowed"], true);
        assert_eq!(answer.json()["source"], "exempt");
        assert!(answer.header("ratelimit").is_none());
    }
    assert_eq!(
        service
            .post("/v1/check", check("client", "api"))
            .await
            .status,
        200
    );
    assert_eq!(
        service
            .post("/v1/check", check("client", "api"))
            .await
            .status,
        429
    );
    // The status page counts decisions of checks only: peeks of an exempt
    // key no more than peeks of any other.
    for _ in 0..3 {
        let peeked = service
            .post("/v1/peek", check("health-checker", "api"))
            .await;
        assert_eq!(peeked.json()["source"], "exempt");
    }
    // A report of an exempt key counts nothing either (seen after the
    // reload below, when the key is limited and starts from zero).
    let reported = service
        .post(
            "/v1/report",
            serde_json::json!({"key": "internal-batch", "policy": "api", "cost": 5}),
        )
        .await;
    assert_eq!(reported.json()["source"], "exempt", "{}", reported.body);
    let status = service.get("/v1/status").await.json();
    let api = status["policies"]
        .as_array()
        .and_then(|policies| policies.iter().find(|policy| policy["name"] == "api"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(api["last_minute"]["exempt"], 3, "{status}");
    assert_eq!(api["last_minute"]["allowed"], 1, "{status}");
    assert_eq!(api["last_minute"]["refused"], 1, "{status}");

    let auth = format!("Bearer {TOKEN}");
    let through = |from: &'static str, forwarded: Option<&'static str>| {
        let auth = auth.clone();
        let addr = service.addr;
        async move {
            let mut headers = vec![("authorization", auth.as_str())];
            if let Some(forwarded) = forwarded {
                headers.push(("x-forwarded-for", forwarded));
            }
            http::get_from(from.parse().unwrap(), addr, "/v1/auth?policy=api", &headers)
                .await
                .status
        }
    };
    for _ in 0..3 {
        assert_eq!(through("127.0.0.2", None).await, 200, "an exempt client");
        assert_eq!(
            through("127.0.0.1", Some("127.0.0.2")).await,
            200,
            "behind a proxy"
        );
    }
    assert_eq!(through("127.0.0.3", None).await, 200);
    assert_eq!(through("127.0.0.3", None).await, 429);
    // A client cannot claim an exempt address: 127.0.0.3 is no proxy.
    assert_eq!(through("127.0.0.3", Some("127.0.0.2")).await, 429);

    let metrics = http::get(service.addr, "/metrics").await.body;
    let exempt = metrics
        .lines()
        .find(|line| {
            line.starts_with("slidegate_decisions_total{")
                && line.contains("policy=\"api\"")
                && line.contains("outcome=\"exempt\"")
        })
        .unwrap_or_else(|| panic!("no exempt series in {metrics}"));
    // /metrics counts peeks and reports as it counts checks, for every
    // key: 9 exempt checks, the 3 peeks and the report above.
    assert!(exempt.ends_with(" 13"), "{exempt}");

    // Live on reload: without the exemptions, the same key is limited.
    let mut reloader = Reloader::new(
        overrides(&service.file),
        Config::load(&overrides(&service.file)).unwrap(),
    );
    let plain = exempting.replace("exempt_keys = [\"health-checker\", \"internal-*\"]\n", "");
    let plain = plain.replace("exempt_addresses = [\"127.0.0.2\"]\n", "");
    std::fs::write(&service.file, on_memcached(&namespace, &plain)).unwrap();
    server::reload::reload_once(&service.app, &mut reloader, "test");
    assert_eq!(
        service
            .post("/v1/check", check("health-checker", "api"))
            .await
            .status,
        200
    );
    assert_eq!(
        service
            .post("/v1/check", check("health-checker", "api"))
            .await
            .status,
        429
    );
    assert_eq!(through("127.0.0.2", None).await, 200);
    assert_eq!(through("127.0.0.2", None).await, 429);
    // The exempt report of 5 was not counted: the key's first check passes.
    assert_eq!(
        service
            .post("/v1/check", check("internal-batch", "api"))
            .await
            .status,
        200
    );

    // A bad pattern names its field.
    let bad = Config::resolve(
        Some((
            Path::new("s.toml"),
            "[policies.api]\nlimits = [{ limit = 1, window = \"1s\" }]\nexempt_keys = [\"a*b\"]",
        )),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.starts_with("s.toml: policies.api.exempt_keys[0]: "),
        "{bad}"
    );
}

/// An exempt key or client is held to the same checks of key and cost as
/// any other: bad input is a 400 naming the field, whoever sends it. The
/// exemption used to answer before they ran: 200 for a key of 2,000 bytes,
/// or a cost of 0, from an exempt key or address.
#[tokio::test]
async fn an_exemption_does_not_pass_bad_input() {
    let exempting = "[auth]\nexempt_addresses = [\"127.0.0.2\"]\n\
         [policies.api]\nlimits = [{ limit = 3, window = \"1h\" }]\n\
         exempt_keys = [\"health-checker\", \"internal-*\"]\n";
    let service = Service::start(&on_memcached(&common::unique_namespace(), exempting)).await;
    let long = format!("internal-{}", "x".repeat(2_000));
    let bad = [
        (
            "/v1/check",
            serde_json::json!({ "key": long, "policy": "api" }),
            "key: ",
        ),
        (
            "/v1/check",
            serde_json::json!({ "key": "health-checker", "policy": "api", "cost": 0 }),
            "cost: ",
        ),
        (
            "/v1/peek",
            serde_json::json!({ "key": "health-checker", "policy": "api", "cost": 0 }),
            "cost: ",
        ),
        (
            "/v1/report",
            serde_json::json!({ "key": "internal-1", "policy": "api", "cost": u64::MAX }),
            "cost: ",
        ),
    ];
    for (path, body, field) in bad {
        let answer = service.post(path, body).await;
        assert_eq!(answer.status, 400, "{path}, bad {field}: {}", answer.body);
        let error = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(error.starts_with(field), "{path}: {error}");
    }
    let auth = format!("Bearer {TOKEN}");
    for (from, key) in [("127.0.0.1", "health-checker"), ("127.0.0.2", "anyone")] {
        let answer = http::get_from(
            from.parse().unwrap(),
            service.addr,
            "/v1/auth?policy=api&cost=0",
            &[("authorization", &auth), ("x-ratelimit-key", key)],
        )
        .await;
        assert_eq!(answer.status, 400, "{from} {key}: {}", answer.body);
        assert!(answer.body.contains("cost: "), "{}", answer.body);
    }
}
