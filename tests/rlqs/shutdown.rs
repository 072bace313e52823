//! The binary stopping with an RLQS stream open. Envoy keeps its stream for
//! as long as the server does and reports every few seconds, so a drain
//! that waits for every stream to end would wait for ever: SIGTERM must end
//! the process within a bounded drain all the same, and the stream end with
//! UNAVAILABLE, which Envoy retries on another instance.

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
    // How the stream ends: its status and message, or `None` when it just
    // stops.
    let draining = tokio::spawn(async move {
        loop {
            match answers.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(status) => return Some((status.code(), status.message().to_owned())),
            }
        }
    });

    // Once SIGTERM is received, the RLQS face takes no new call: a new
    // connection is refused, or its stream is (the README's "take no new
    // call, give what is in flight 5 s").
    service.signal(libc::SIGTERM);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !service.log().contains("SIGTERM received") {
        assert!(std::time::Instant::now() < deadline, "{}", service.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{rlqs}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .ok()?;
        let mut client = slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient::new(channel);
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        sender
            .send(RateLimitQuotaUsageReports {
                domain: "envoy".into(),
                bucket_quota_usages: vec![envoy::usage(&labels(&[("name", "late")]), 1, 0, 0)],
            })
            .await
            .unwrap();
        let mut answers = client
            .stream_rate_limit_quotas(tokio_stream::wrappers::ReceiverStream::new(receiver))
            .await
            .ok()?
            .into_inner();
        answers.message().await.ok().flatten()
    };
    let answered = tokio::time::timeout(Duration::from_secs(10), late).await;
    assert!(
        matches!(answered, Ok(None)),
        "a stream opened after SIGTERM was answered: {answered:?}"
    );

    let ended = tokio::time::timeout(Duration::from_secs(10), draining)
        .await
        .expect("the open stream ended")
        .unwrap();
    // Ended by the drain, not cut with its connection at the bound.
    let (code, message) = ended.expect("the stream ended with a status");
    assert_eq!(code, tonic::Code::Unavailable, "{message}");
    assert!(message.contains("shutting down"), "{message}");

    // `stop` requires a clean exit within its bound (15 s).
    let log = tokio::task::spawn_blocking(move || service.stop())
        .await
        .unwrap();
    reporting.abort();
    assert!(log.contains("SIGTERM"), "{log}");
}
