//! Forward-auth (`GET /v1/auth`) as a proxy calls it: the key it counts
//! under, the statuses and headers it answers with, and which
//! X-Forwarded-For hop it believes.

use serde_json::json;
use slidegate::config::{AuthConfig, IpNet};
use slidegate::{AnyStore, FailureMode, MemoryStore};

use super::{TestApp, spawn_app};
use crate::common::http;

/// An app on the memory store whose forward-auth trusts these proxies.
async fn forward_auth_app(trusted_proxies: &[&str]) -> TestApp {
    let auth = AuthConfig {
        trusted_proxies: trusted_proxies
            .iter()
            .map(|network| IpNet::parse(network).unwrap())
            .collect(),
        deny_status: 429,
    };
    spawn_app(
        AnyStore::Memory(MemoryStore::new()),
        FailureMode::Allow,
        auth,
    )
    .await
}

#[tokio::test]
async fn forward_auth_keys_statuses_and_headers() {
    let app = forward_auth_app(&["127.0.0.1"]).await;
    let auth_get = |path: &'static str, headers: &'static [(&'static str, &'static str)]| {
        http::send(app.addr, "GET", path, headers, Vec::new())
    };
    let admitted = auth_get("/v1/auth?policy=api", &[("x-ratelimit-key", "token-1")]).await;
    assert_eq!((admitted.status, admitted.body.as_str()), (200, ""));
    assert_eq!(
        admitted.header("content-type"),
        None,
        "an empty body has no content type"
    );
    assert_eq!(admitted.header("ratelimit"), Some("\"api\";r=2;t=90"));
    auth_get(
        "/v1/auth?policy=api&cost=2",
        &[("x-ratelimit-key", "token-1")],
    )
    .await;
    let refused = auth_get("/v1/auth?policy=api", &[("x-ratelimit-key", "token-1")]).await;
    assert_eq!(
        (refused.status, refused.header("retry-after")),
        (429, Some("50"))
    );
    let for_nginx = auth_get(
        "/v1/auth?policy=api&deny_status=403",
        &[("x-ratelimit-key", "token-1")],
    )
    .await;
    assert_eq!(for_nginx.status, 403);

    // Without the header: the rightmost X-Forwarded-For hop that is not a
    // trusted proxy (10.0.0.1), since 127.0.0.1 (this test) is one.
    let forwarded: &[(&str, &str)] = &[("x-forwarded-for", "203.0.113.9, 10.0.0.1")];
    for _ in 0..3 {
        assert_eq!(auth_get("/v1/auth?policy=api", forwarded).await.status, 200);
    }
    assert_eq!(auth_get("/v1/auth?policy=api", forwarded).await.status, 429);
    assert_eq!(
        auth_get(
            "/v1/auth?policy=api",
            &[("x-forwarded-for", "198.51.100.1")]
        )
        .await
        .status,
        200,
        "another client is another key"
    );

    for (path, expected) in [
        ("/v1/auth", "policy: is required"),
        ("/v1/auth?policy=nope", "policy: no policy named"),
        (
            "/v1/auth?policy=api&cost=x",
            "cost: \"x\" is not a whole number",
        ),
        (
            "/v1/auth?policy=api&cost=0",
            "cost: must be an integer from 1",
        ),
        ("/v1/auth?policy=api&deny_status=200", "deny_status:"),
        (
            "/v1/auth?policy=api&colour=red",
            "colour: unknown query parameter",
        ),
    ] {
        let response = auth_get(path, &[]).await;
        assert_eq!(response.status, 400, "{path}");
        assert!(
            response.error().starts_with(expected),
            "{path}: {}",
            response.error()
        );
    }
}

/// The key is the rightmost X-Forwarded-For hop that is not a trusted
/// proxy: the hops on its left are the client's to write. The two keys
/// start with different counts, so a wrong choice changes the status.
#[tokio::test]
async fn forward_auth_keys_on_the_rightmost_untrusted_hop() {
    let app = forward_auth_app(&["127.0.0.1", "10.0.0.0/8"]).await;
    let (victim, client) = ("203.0.113.66", "198.51.100.7");
    // The victim's quota is spent; the client's is whole.
    let spent = app
        .post(
            "/v1/check",
            json!({"key": victim, "policy": "api", "cost": 3}),
        )
        .await;
    assert_eq!(spent.status, 200);
    let auth_get = |forwarded: String| async move {
        http::send(
            app.addr,
            "GET",
            "/v1/auth?policy=api",
            &[("x-forwarded-for", forwarded.as_str())],
            Vec::new(),
        )
        .await
    };
    for forwarded in [
        // The client wrote the victim's address; the proxy appended the
        // client's.
        format!("{victim}, {client}"),
        // Through a chain of trusted proxies.
        format!("{victim}, {client}, 10.0.0.2, 10.0.0.3"),
        format!("{victim},{client} ,10.1.2.3"),
    ] {
        let response = auth_get(forwarded.clone()).await;
        assert_eq!(response.status, 200, "{forwarded}: keyed on the victim");
    }
    let peek = app
        .post("/v1/peek", json!({"key": client, "policy": "api"}))
        .await;
    assert_eq!(peek.json()["limits"][0]["estimate"], 3.0, "{}", peek.body);
    // Now the client's quota is spent and not the other's: refused.
    let response = auth_get(format!("198.51.100.200, {client}, 10.0.0.2")).await;
    assert_eq!(
        response.status, 429,
        "keyed on the address the client wrote"
    );
}
