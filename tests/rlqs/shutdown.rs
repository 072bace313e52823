//! The binary stopping with an RLQS stream open. Envoy keeps its stream for
//! as long as the server does and reports every few seconds, so a drain
//! that waits for every stream to end would wait for ever: SIGTERM must end
//! the process within a bounded drain all the same.

use std::time::Duration;

use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;

use super::envoy::{self, labels};
use crate::common::process;
use crate::common::service::Slidegate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_binary_while_a_stream_keeps_reporting() {
    let rlqs = process::free_addr();
    let config = format!(
        "[rlqs]\nlisten = \"{rlqs}\"\n\n[[rlqs.buckets]]\ndomain = \"envoy\"\n\
         match = {{ name = \"api\" }}\nlimit = 100\nwindow = \"10s\"\n"
    );
    let service = Slidegate::start_with_file("rlqs-shutdown", &config, &[], &[rlqs]);

    let (reports, mut answers) = envoy::open(rlqs, None).await.unwrap();
    let reporting = tokio::spawn(async move {
        // Bounded: a minute at most, far past the stop's bound.
        for _ in 0..120 {
            let report = RateLimitQuotaUsageReports {
                domain: "envoy".into(),
                bucket_quota_usages: vec![envoy::usage(&labels(&[("name", "api")]), 1, 0, 1)],
            };
            if reports.send(report).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    envoy::next(&mut answers).await.unwrap().unwrap();
    let draining = tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });

    // `stop` requires a clean exit within its bound (15 s).
    let log = tokio::task::spawn_blocking(move || service.stop())
        .await
        .unwrap();
    reporting.abort();
    draining.abort();
    assert!(log.contains("SIGTERM"), "{log}");
}
