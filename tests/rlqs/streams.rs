//! One stream's reports and the answers to them: a bucket left unreported
//! is abandoned, bad input ends only its own stream and names the field,
//! unmatched buckets get the blanket rule, and first answers carry a TTL.

use std::net::SocketAddr;
use std::sync::Arc;

use slidegate::Clock;
use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use slidegate::server::{self, App};

use super::envoy::{self, Enforced, FakeEnvoy, Labels, labels};
use super::{api, clock, plain_instance, reports};
use crate::common::{self, in_process};

#[tokio::test]
async fn a_bucket_left_unreported_is_abandoned() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let now = clock.now_ms();
    let other = labels(&[("name", "api"), ("tenant", "t2")]);
    // Both reported first; then only `api`: `other` goes quiet on the stream.
    let (reports, mut answers) = envoy::open(server.addr, None).await.unwrap();
    let mut abandoned = false;
    for second in 0..8u64 {
        let at = now + second * 1_000;
        clock.set(at);
        let usages = vec![envoy::usage(&api(), 1, 0, 1)];
        let usages = if second == 0 {
            vec![envoy::usage(&api(), 1, 0, 0), envoy::usage(&other, 1, 0, 0)]
        } else {
            usages
        };
        reports
            .send(RateLimitQuotaUsageReports {
                domain: "envoy".into(),
                bucket_quota_usages: usages,
            })
            .await
            .unwrap();
        let answer = envoy::next(&mut answers).await.unwrap().unwrap();
        abandoned |= answer.bucket_action.iter().any(|action| {
            let is_other = action
                .bucket_id
                .as_ref()
                .map(|id| id.bucket.get("tenant").map(String::as_str))
                == Some(Some("t2"));
            is_other && matches!(action.bucket_action, Some(envoy::Action::AbandonAction(_)))
        });
        if abandoned {
            assert!(
                second >= 5,
                "abandoned after {second} s, before abandon_after (5 s)"
            );
            break;
        }
    }
    assert!(abandoned, "the unreported bucket is abandoned");
    let page = metrics_page(&server.app).await;
    assert!(page.contains("slidegate_rlqs_abandons_total 1"), "{page}");
    assert!(page.contains("slidegate_rlqs_streams 1"), "{page}");
    assert!(
        page.contains("slidegate_rlqs_assignments_total{strategy=\"token_bucket\"}"),
        "{page}"
    );
}

/// A bucket that a reload leaves matching no rule is answered by the
/// unmatched rule while its Envoy reports it, and is never abandoned: the
/// stream stops tracking it. It used to stay tracked with its last report
/// frozen, and be abandoned after `abandon_after` though still reported.
#[tokio::test]
async fn a_bucket_a_reload_leaves_unmatched_is_not_abandoned() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let now = clock.now_ms();
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(super::reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
    let without_api = super::RLQS.replace(
        "[[rlqs.buckets]]\ndomain = \"envoy\"\nmatch = { name = \"api\", tenant = \"*\" }\nlimit = 600\nwindow = \"10s\"\nprecision = 10\n",
        "",
    );
    assert_ne!(without_api, super::RLQS, "the api rule is taken out");
    let reloaded = slidegate::config::Config::resolve(
        Some((std::path::Path::new("slidegate.toml"), &without_api)),
        &slidegate::config::Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    server.app.apply_live(&reloaded);
    let abandoned = |answer: &RateLimitQuotaResponse| {
        answer
            .bucket_action
            .iter()
            .any(|action| matches!(action.bucket_action, Some(envoy::Action::AbandonAction(_))))
    };
    // Past abandon_after (5 s), reporting every second, and a sweep after.
    for second in 1..=8u64 {
        clock.set(now + second * 1_000);
        sender
            .send(super::reports("envoy", vec![envoy::usage(&api(), 1, 0, 1)]))
            .await
            .unwrap();
        let answer = envoy::next(&mut answers).await.unwrap().unwrap();
        assert!(!abandoned(&answer), "second {second}: {answer:?}");
    }
    if let Ok(Ok(Some(answer))) =
        tokio::time::timeout(std::time::Duration::from_millis(1_500), answers.message()).await
    {
        assert!(!abandoned(&answer), "{answer:?}");
    }
}

pub(super) async fn metrics_page(app: &Arc<App>) -> String {
    let addr = in_process::serve_forever(server::serve, app.clone()).await;
    common::http::get(addr, "/metrics").await.body
}

/// The error a stream ends with after `sent`.
async fn error_after(addr: SocketAddr, sent: Vec<RateLimitQuotaUsageReports>) -> tonic::Status {
    let (sender, mut answers) = envoy::open(addr, None).await.unwrap();
    for message in sent {
        sender.send(message).await.unwrap();
    }
    loop {
        match envoy::next(&mut answers).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => return status,
        }
    }
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field_and_other_streams_go_on() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let mut good = FakeEnvoy::connect(server.addr, "envoy").await;
    let now = clock.now_ms();
    assert!(good.request(&api(), now).await);

    let mut no_elapsed = envoy::usage(&api(), 1, 0, 0);
    no_elapsed.time_elapsed = None;
    // What one bucket id may weigh is bounded: a stream keeps its buckets,
    // and an instance its streams.
    let long_value = "v".repeat(64 * 1024);
    let long_name = "k".repeat(1024);
    let many: Vec<(String, String)> = (0..100)
        .map(|i| (format!("l{i}"), "v".to_owned()))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut no_id = envoy::usage(&api(), 1, 0, 0);
    no_id.bucket_id = None;
    let cases = [
        (
            vec![reports("", vec![envoy::usage(&api(), 1, 0, 0)])],
            "domain:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&Labels::new(), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&labels(&[("name", "")]), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&labels(&[("name", &long_value)]), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&labels(&[(&long_name, "api")]), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&labels(&many), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports("envoy", vec![no_elapsed])],
            "bucket_quota_usages[0].time_elapsed:",
        ),
        (
            vec![reports("envoy", vec![no_id])],
            "bucket_quota_usages[0].bucket_id:",
        ),
        (vec![reports("envoy", vec![])], "bucket_quota_usages:"),
        (
            vec![
                reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]),
                reports("other", vec![envoy::usage(&api(), 1, 0, 0)]),
            ],
            "domain:",
        ),
    ];
    for (sent, field) in cases {
        let status = error_after(server.addr, sent).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with(field), "{field}: {status:?}");
    }
    // The good stream is still served, and a later message may leave the
    // domain empty.
    clock.set(now + 1_000);
    good.report_all(now + 1_000).await;
    assert!(matches!(
        good.enforced(&api()),
        Some(Enforced::TokenBucket(..))
    ));
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    sender
        .send(reports("", vec![envoy::usage(&api(), 1, 0, 1)]))
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(envoy::next(&mut answers).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn unmatched_buckets_get_the_blanket_rule_and_first_answers_always_carry_a_ttl() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let mut envoy = FakeEnvoy::connect(server.addr, "envoy").await;
    let now = clock.now_ms();
    let web = labels(&[("name", "web")]);
    assert!(envoy.request(&web, now).await);
    assert_eq!(envoy.enforced(&web), Some(Enforced::AllowAll));
    // A first report (time_elapsed 0) of a matched bucket: a token bucket
    // with tokens_per_fill and a TTL of whole seconds, at least 1.
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    let answer = envoy::next(&mut answers).await.unwrap().unwrap();
    let Some(envoy::Action::QuotaAssignmentAction(assignment)) =
        &answer.bucket_action[0].bucket_action
    else {
        panic!("{answer:?}");
    };
    let ttl = assignment.assignment_time_to_live.unwrap();
    assert!(ttl.seconds >= 1 && ttl.nanos == 0, "{ttl:?}");
    let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
    let Some(envoy::Strategy::TokenBucket(bucket)) = strategy else {
        panic!("{answer:?}");
    };
    assert!(
        bucket.tokens_per_fill.unwrap_or(0) >= 1 && bucket.max_tokens >= 1,
        "{bucket:?}"
    );
    assert_eq!(bucket.fill_interval.unwrap().seconds, 1);
}
