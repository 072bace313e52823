//! What one RLQS report may carry, in bytes: the report itself, its domain
//! and its labels. Past a bound the stream ends with an error naming the
//! bound (never with OK and no message), and other streams go on.

use slidegate::Clock;
use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;

use super::envoy::{self, FakeEnvoy, Labels, labels};
use super::{api, clock, plain_instance, reports};

/// A bucket id with 8 labels, names of 64 bytes and values of 512: the
/// largest the label bounds allow, about 4.6 KB on the wire.
pub(super) fn largest_id(tag: &str) -> Labels {
    let pairs: Vec<(String, String)> = (0..8)
        .map(|index| {
            let name = format!("{index}{}", "k".repeat(63));
            let value = format!("{tag}-{index}-");
            let value = format!("{value}{}", "v".repeat(512 - value.len()));
            (name, value)
        })
        .collect();
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    labels(&pairs)
}

/// One bucket named `times` times: the report of 3.7 MB is 800.
fn one_bucket_named(times: usize) -> RateLimitQuotaUsageReports {
    let id = largest_id("one");
    reports(
        "envoy",
        (0..times).map(|_| envoy::usage(&id, 1, 0, 1)).collect(),
    )
}

/// How a stream ends after `sent`: its error, or `None` when it ended OK.
async fn ending(
    addr: std::net::SocketAddr,
    sent: RateLimitQuotaUsageReports,
) -> Option<tonic::Status> {
    let (sender, mut answers) = envoy::open(addr, None).await.unwrap();
    // The server may end the stream before it has read the whole report.
    let _ = sender.send(sent).await;
    match envoy::next(&mut answers).await {
        Ok(Some(answer)) => panic!(
            "an answer to a report over the bound: {} actions",
            answer.bucket_action.len()
        ),
        Ok(None) => None,
        Err(status) => Some(status),
    }
}

/// A report over `rlqs.max_report_bytes` ends its stream with
/// RESOURCE_EXHAUSTED naming the bound. A report over tonic's own 4 MiB
/// used to end the stream with OK and no message; one of 3.7 MB was read
/// whole, and its stream kept a buffer of its size until it ended.
#[tokio::test]
async fn a_report_over_the_bound_ends_its_stream_with_resource_exhausted_naming_it() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let mut good = FakeEnvoy::connect(server.addr, "envoy").await;
    assert!(good.request(&api(), clock.now_ms()).await);
    for (times, what) in [(1_000, "4.6 MB"), (800, "3.7 MB")] {
        let status = ending(server.addr, one_bucket_named(times)).await;
        let Some(status) = status else {
            panic!("a report of {what} ended its stream with OK and no message");
        };
        assert_eq!(
            status.code(),
            tonic::Code::ResourceExhausted,
            "{what}: {status:?}"
        );
        assert!(
            status.message().contains("rlqs.max_report_bytes"),
            "{what}: {status:?}"
        );
    }
    // The other stream is still answered.
    let now = clock.now_ms() + 1_000;
    clock.set(now);
    good.report_all(now).await;
    assert!(good.enforced(&api()).is_some());
}

/// A domain is bounded in bytes: one past `rlqs.max_domain_bytes` is
/// INVALID_ARGUMENT naming `domain` and the bound. A 3.9 MB domain used to
/// be accepted, and hashed once per bucket of every report.
#[tokio::test]
async fn a_domain_past_its_bound_is_invalid_argument_naming_it() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let long = "d".repeat(4_096);
    let status = ending(
        server.addr,
        reports(&long, vec![envoy::usage(&api(), 1, 0, 0)]),
    )
    .await
    .expect("a domain of 4 KiB is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with("domain:"), "{status:?}");
    assert!(
        status.message().contains("rlqs.max_domain_bytes"),
        "{status:?}"
    );
    // A domain of Envoy's kind is served.
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(reports(
            "envoy-ingress.prod.example.com",
            vec![envoy::usage(&api(), 1, 0, 0)],
        ))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
}

/// The bounds apply live: a reload that lowers `rlqs.max_report_bytes`
/// holds the next report of a stream already open to it.
#[tokio::test]
async fn a_reload_lowers_the_report_bound_for_streams_already_open() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    // Two buckets of the largest ids: about 9 KB.
    sender.send(one_bucket_named(2)).await.unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());

    let lowered = super::RLQS.replacen("[rlqs]\n", "[rlqs]\nmax_report_bytes = 4096\n", 1);
    assert_ne!(lowered, super::RLQS);
    let reloaded = slidegate::config::Config::resolve(
        Some((std::path::Path::new("slidegate.toml"), &lowered)),
        &slidegate::config::Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    server.app.apply_live(&reloaded);
    sender.send(one_bucket_named(2)).await.unwrap();
    let refused = envoy::next(&mut answers).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("rlqs.max_report_bytes (4096)"),
        "{refused:?}"
    );
}
