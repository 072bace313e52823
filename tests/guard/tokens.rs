//! API tokens: with tokens set, the API needs one and health stays open;
//! forward-auth by path needs one too; every route of the table is walked
//! without one; tokens from the environment or a file, for the metrics
//! too; and how long a token may be.

use slidegate::server::{self, Access, Methods, RoutePath};

use super::{CHECK, OTHER_TOKEN, POLICY, TOKEN, bearer, call, sample, start};
use crate::common::http;
use crate::common::process;
use crate::common::service::Slidegate;

#[tokio::test]
async fn with_tokens_set_the_api_needs_one_and_health_stays_open() {
    let service = start(
        "tokens",
        &format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\", \"{OTHER_TOKEN}\"]\n"),
        |_, _| {},
    );
    let protected = [
        ("POST", "/v1/check"),
        ("POST", "/v1/peek"),
        ("POST", "/v1/report"),
        ("GET", "/v1/auth?policy=api"),
    ];
    let mut refused = 0;
    for (method, path) in protected {
        for auth in [None, Some("wrong-token-0123456789abcdef"), Some("")] {
            let response = call(&service, method, path, auth).await;
            assert_eq!(response.status, 401, "{method} {path} with {auth:?}");
            assert_eq!(response.header("content-type"), Some("application/json"));
            assert_eq!(
                response.header("www-authenticate"),
                Some("Bearer realm=\"slidegate\"")
            );
            assert!(
                response.error().starts_with("authorization: "),
                "{}",
                response.body
            );
            refused += 1;
        }
        for token in [TOKEN, OTHER_TOKEN] {
            let response = call(&service, method, path, Some(token)).await;
            assert_eq!(response.status, 200, "{method} {path}: {}", response.body);
        }
    }
    // Another scheme, or the token without one, is no bearer token.
    let basic = http::send(
        service.addr,
        "POST",
        "/v1/check",
        &[("authorization", &format!("Basic {TOKEN}"))],
        CHECK.to_owned(),
    )
    .await;
    assert_eq!(basic.status, 401);
    let lower = http::send(
        service.addr,
        "POST",
        "/v1/check",
        &[("authorization", &format!("bearer {TOKEN}"))],
        CHECK.to_owned(),
    )
    .await;
    assert_eq!(lower.status, 200, "the scheme is case-insensitive");

    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            call(&service, "GET", path, None).await.status,
            200,
            "{path}"
        );
    }
    let metrics = call(&service, "GET", "/metrics", None).await.body;
    assert_eq!(
        sample(&metrics, "slidegate_unauthorized_total"),
        refused + 1
    );

    let log = service.log();
    assert!(log.contains("listening on"), "{log}");
    assert!(!log.contains(TOKEN) && !log.contains(OTHER_TOKEN), "{log}");
    println!(
        "401 for {} requests without a valid token; 200 with either token",
        refused + 1
    );
}

/// The path form of forward-auth counts as the query form does: without a
/// token it must not spend anyone's quota.
#[tokio::test]
async fn forward_auth_by_path_needs_a_token_too() {
    let service = start(
        "auth-path",
        &format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\n"),
        |_, _| {},
    );
    let victim = [("x-ratelimit-key", "victim")];
    let response = http::send(service.addr, "GET", "/v1/auth/api/x", &victim, "").await;
    assert_eq!(response.status, 401, "{}", response.body);
    assert_eq!(
        response.header("www-authenticate"),
        Some("Bearer realm=\"slidegate\"")
    );
    let token = bearer(TOKEN);
    let with_token = [victim[0], ("authorization", token.as_str())];
    let response = http::send(service.addr, "GET", "/v1/auth/api/x", &with_token, "").await;
    assert_eq!(response.status, 200, "{}", response.body);
}

/// Every route of the service's own table, called without a token: 401
/// wherever tokens apply, never 401 where they do not. The list comes from
/// the table, so a route added later is walked too.
#[tokio::test]
async fn every_route_without_a_token_is_refused_where_tokens_apply() {
    for metrics_need_token in [false, true] {
        let service = start(
            &format!("walk-{metrics_need_token}"),
            &format!(
                "{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\nmetrics_need_token = {metrics_need_token}\n"
            ),
            |_, _| {},
        );
        let mut open = Vec::new();
        for route in server::ROUTES {
            let path = match route.path {
                RoutePath::Exact(path) => path.to_owned(),
                RoutePath::Prefix(prefix) => format!("{prefix}api/x"),
            };
            let method = match route.methods {
                Methods::Post => "POST",
                Methods::Get | Methods::Any => "GET",
            };
            let guarded = match route.access {
                Access::Token => true,
                Access::TokenIfMetricsNeedIt => metrics_need_token,
                Access::Open => false,
            };
            let response = call(&service, method, &path, None).await;
            if guarded {
                assert_eq!(response.status, 401, "{method} {path}: {}", response.body);
            } else {
                assert_ne!(response.status, 401, "{method} {path}: {}", response.body);
                open.push(path);
            }
        }
        let mut expected = vec!["/healthz", "/readyz"];
        if !metrics_need_token {
            expected.push("/metrics");
        }
        // The contract and the status page hold no data.
        expected.extend(["/openapi.json", "/"]);
        assert_eq!(open, expected, "metrics_need_token = {metrics_need_token}");
    }
}

#[tokio::test]
async fn metrics_can_need_a_token_from_the_environment_or_a_file() {
    let service = start(
        "metrics-token",
        &format!("{POLICY}[server]\napi_tokens_file = \"tokens\"\nmetrics_need_token = true\n"),
        |command, _| {
            command.env("SLIDEGATE_API_TOKENS", format!("{OTHER_TOKEN},{TOKEN}"));
        },
    );
    // The environment wins over the file (which does not even exist).
    assert_eq!(call(&service, "GET", "/metrics", None).await.status, 401);
    assert_eq!(
        call(&service, "GET", "/metrics", Some(TOKEN)).await.status,
        200
    );
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(OTHER_TOKEN))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "GET", "/healthz", None).await.status, 200);
    drop(service);

    let service = start(
        "tokens-file",
        &format!("{POLICY}[server]\napi_tokens_file = \"tokens\"\n"),
        |_, dir| {
            std::fs::write(dir.join("tokens"), format!("# rotated weekly\n{TOKEN}\n")).unwrap();
        },
    );
    assert_eq!(call(&service, "POST", "/v1/check", None).await.status, 401);
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(TOKEN))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "GET", "/metrics", None).await.status, 200);
}

/// Tokens are 16 to 4096 bytes: a 4096-byte token opens the API, a
/// 4097-byte one stops the start, naming where it came from.
#[tokio::test]
async fn a_token_of_4096_bytes_works_and_a_longer_one_is_refused() {
    let longest = "t".repeat(4096);
    let service = start("longest-token", POLICY, |command, _| {
        command.env("SLIDEGATE_API_TOKENS", &longest);
    });
    assert_eq!(
        call(&service, "POST", "/v1/check", Some(&longest))
            .await
            .status,
        200
    );
    assert_eq!(call(&service, "POST", "/v1/check", None).await.status, 401);
    drop(service);

    let mut command = Slidegate::command();
    command
        .args(["--listen", &process::free_addr().to_string()])
        .env("SLIDEGATE_API_TOKENS", "t".repeat(4097));
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success(), "started with a 4097-byte token");
    assert!(
        output.contains("SLIDEGATE_API_TOKENS") && output.contains("4097"),
        "{output}"
    );
}
