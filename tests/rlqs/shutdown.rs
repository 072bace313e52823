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

/// With a shutdown delay the RLQS face keeps answering through it, a
/// stream opened after the signal included; when the delay ends every
/// stream ends with UNAVAILABLE and the binary exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_delay_streams_are_answered_through_it_then_end_unavailable() {
    let rlqs = process::free_addr();
    let config = format!(
        "[server]\nshutdown_delay_ms = 3000\n\n[rlqs]\nlisten = \"{rlqs}\"\n\n\
         [[rlqs.buckets]]\ndomain = \"envoy\"\nmatch = {{ name = \"api\" }}\nlimit = 100\n\
         window = \"10s\"\n"
    );
    let service = Slidegate::start_with_file("rlqs-shutdown-delay", &config, &[], &[rlqs]);
    let report = || RateLimitQuotaUsageReports {
        domain: "envoy".into(),
        bucket_quota_usages: vec![envoy::usage(&labels(&[("name", "api")]), 1, 0, 1)],
    };
    let (before, mut before_answers) = envoy::open(rlqs, None).await.unwrap();
    before.send(report()).await.unwrap();
    envoy::next(&mut before_answers).await.unwrap().unwrap();

    service.signal(libc::SIGTERM);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !service.log().contains("SIGTERM received") {
        assert!(std::time::Instant::now() < deadline, "{}", service.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Inside the delay: the open stream is answered, and a new one too.
    before.send(report()).await.unwrap();
    envoy::next(&mut before_answers).await.unwrap().unwrap();
    let (after, mut after_answers) = envoy::open(rlqs, None).await.unwrap();
    after.send(report()).await.unwrap();
    envoy::next(&mut after_answers).await.unwrap().unwrap();
    assert!(
        !service.log().contains("shutdown delay over"),
        "the delay ended before the streams were answered: too loaded a machine?"
    );

    for answers in [&mut before_answers, &mut after_answers] {
        // Bounded: no report is sent now, so an answer or two at most.
        let mut ended = None;
        for _ in 0..10 {
            match envoy::next(answers).await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the stream ended without a status"),
                Err(status) => {
                    ended = Some(status);
                    break;
                }
            }
        }
        let ended = ended.expect("the stream ended");
        assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    }
    let log = tokio::task::spawn_blocking(move || service.stop())
        .await
        .unwrap();
    assert!(log.contains("shutdown delay over"), "{log}");
}
