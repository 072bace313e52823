//! The server's guard on RLQS streams: a stream needs a token when tokens
//! are set, a quiet one is closed, and a token revoked by a reload ends the
//! streams already open with it.

use std::path::Path;
use std::time::Duration;

use slidegate::FailureMode;
use slidegate::config::{Config, Overrides, ServerGuard};

use super::envoy;
use super::{RLQS, api, clock, instance, memcached, reports};

#[tokio::test]
async fn a_stream_needs_a_token_when_tokens_are_set_and_a_quiet_one_is_closed() {
    let clock = clock();
    let token = "rlqs-test-token-0123456789";
    let guard = ServerGuard {
        api_tokens: slidegate::config::ApiTokens::new([token]).unwrap(),
        quiet_timeout: Duration::from_secs(1),
        ..ServerGuard::default()
    };
    let server = instance(memcached().await, &clock, FailureMode::Allow, guard).await;
    let refused = match envoy::open(server.addr, None).await {
        Ok((_sender, mut answers)) => envoy::next(&mut answers).await.unwrap_err(),
        Err(status) => status,
    };
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    let (sender, mut answers) = envoy::open(server.addr, Some(token)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
    // Nothing more: closed after the quiet timeout (1 s here), within 10 s.
    let closed = envoy::next(&mut answers).await.unwrap_err();
    assert_eq!(closed.code(), tonic::Code::Unavailable, "{closed:?}");
    assert!(closed.message().contains("no usage report"), "{closed:?}");
}

/// A client that stops reading its answers is closed at the quiet timeout,
/// like one that stops reporting. The stream used to wait for room to
/// answer it, and so held its place among the streams, and its buckets'
/// places, for good: past the quiet timeout, and past a revoked token.
#[tokio::test]
async fn a_client_that_reads_no_answers_is_closed_at_the_quiet_timeout() {
    let clock = clock();
    let guard = ServerGuard {
        quiet_timeout: Duration::from_secs(1),
        ..ServerGuard::default()
    };
    let server = instance(memcached().await, &clock, FailureMode::Allow, guard).await;
    let (sender, _answers_never_read) = envoy::open(server.addr, None).await.unwrap();
    // Buckets no rule matches, answered at once, with long labels: their
    // answers fill the client's window and the stream's queue.
    let long = "v".repeat(500);
    let usages: Vec<envoy::Usage> = (0..1_000)
        .map(|index| {
            let value = format!("{long}{index}");
            envoy::usage(
                &envoy::labels(&[("name", "unmatched"), ("v", &value)]),
                1,
                0,
                1,
            )
        })
        .collect();
    for _ in 0..60 {
        let report = reports("envoy", usages.clone());
        // Once nothing reads, the client's own sends stop going out.
        if !matches!(
            tokio::time::timeout(Duration::from_secs(2), sender.send(report)).await,
            Ok(Ok(()))
        ) {
            break;
        }
    }
    let started = std::time::Instant::now();
    loop {
        let page = super::streams::metrics_page(&server.app).await;
        if page.contains("slidegate_rlqs_streams 0") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the stream is still open 10 s after its client stopped reading (quiet timeout 1 s)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A token revoked by a reload is refused on a stream opened with it, at
/// its next report: the reload reaches streams already open, not only the
/// next ones, as it reaches RLS and HTTP calls.
#[tokio::test]
async fn a_revoked_token_ends_an_open_stream_at_its_next_report() {
    let clock = clock();
    let (kept, revoked) = ("rlqs-kept-token-0123456789", "rlqs-revoked-token-0123456");
    let guard = ServerGuard {
        api_tokens: slidegate::config::ApiTokens::new([kept, revoked]).unwrap(),
        ..ServerGuard::default()
    };
    let server = instance(memcached().await, &clock, FailureMode::Allow, guard).await;
    let (sender, mut answers) = envoy::open(server.addr, Some(revoked)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());

    let reloaded = Config::resolve(
        Some((
            Path::new("slidegate.toml"),
            &format!("[server]\napi_tokens = [\"{kept}\"]\n{RLQS}"),
        )),
        &Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    server.app.apply_live(&reloaded);
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 1)]))
        .await
        .unwrap();
    let refused = envoy::next(&mut answers).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // The kept token still opens and is answered.
    let (sender, mut answers) = envoy::open(server.addr, Some(kept)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
}

/// One connection carries at most 100 calls or streams at once (the
/// README's bound, HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS): a 101st
/// stream on it waits, and opens as soon as one of the others ends.
#[tokio::test]
async fn a_connection_carries_at_most_one_hundred_streams() {
    use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;

    let clock = clock();
    let server = instance(
        memcached().await,
        &clock,
        FailureMode::Allow,
        ServerGuard::default(),
    )
    .await;
    let client = RateLimitQuotaServiceClient::new(envoy::channel(server.addr).await);
    let first = |index: usize| {
        let name = format!("s{index}");
        reports(
            "envoy",
            vec![envoy::usage(&envoy::labels(&[("name", &name)]), 1, 0, 0)],
        )
    };
    let mut open = Vec::new();
    for index in 0..100 {
        let stream = envoy::open_on(&client, first(index), Duration::from_secs(10)).await;
        open.push(stream.unwrap_or_else(|| panic!("stream {index} opened")));
    }
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { envoy::open_on(&client, first(100), Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the 101st stream opened beside 100");
    drop(open.pop());
    let opened = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("opened once one ended")
        .unwrap();
    assert!(opened.is_some(), "the 101st stream was answered");
}
