//! The stores' bounds: the embedded store evicts at its capacity and counts
//! it; a saturated path to memcached answers by the failure mode at once
//! instead of queueing.

use std::sync::Arc;
use std::time::Duration;

use super::{POLICY, sample, start};
use crate::common;
use crate::common::http;

#[tokio::test]
async fn the_embedded_store_evicts_at_capacity_and_counts_it() {
    let service = start("capacity", POLICY, |command, _| {
        command.args(["--memory-capacity", "16"]);
    });
    for index in 0..100 {
        let body = format!(r#"{{"key": "key-{index}", "policy": "api"}}"#);
        let response = http::post(service.addr, "/v1/check", &body).await;
        assert_eq!(response.status, 200, "{}", response.body);
    }
    let metrics = http::get(service.addr, "/metrics").await.body;
    assert_eq!(sample(&metrics, "slidegate_memory_capacity"), 16);
    assert_eq!(
        sample(&metrics, "slidegate_memory_evictions_total"),
        100 - 16
    );
}

/// When the store path is saturated (the connection's queue is full),
/// checks are answered by the failure mode at once instead of queueing:
/// here behind a node that takes a few kilobytes and then reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_store_path_answers_by_the_failure_mode_at_once() {
    use slidegate::{
        FailureMode, Limit, Limiter, MemcachedOptions, MemcachedStore, Policy, Source,
    };

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    // A tiny receive window, so the writer blocks after a few checks.
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let node = listener.local_addr().unwrap().to_string();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let store = MemcachedStore::connect(&MemcachedOptions {
        servers: vec![node],
        namespace: common::unique_namespace(),
        // Queued checks wait this long: anything answered sooner was shed.
        timeout: Duration::from_secs(60),
        connections: 1,
        queue_depth: 8,
        ..MemcachedOptions::default()
    })
    .await
    .unwrap();
    let limiter = Arc::new(
        Limiter::builder(store)
            .timeout(Duration::from_secs(60))
            .failure_mode(FailureMode::Allow)
            .build(),
    );
    let policy = Arc::new(Policy::new("api", vec![Limit::new(10, 60_000, 1).unwrap()]).unwrap());
    const CHECKS: usize = 3_000;
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..CHECKS)
        .map(|index| {
            let (limiter, policy, answers) = (limiter.clone(), policy.clone(), answers.clone());
            tokio::spawn(async move {
                let key = format!("key-{index}");
                let _ = answers.send(limiter.check(&key, &policy, 1).await.unwrap());
            })
        })
        .collect();
    // Collect what is answered while the rest still wait for the node
    // (bounded: the queued checks would wait 60 s).
    let mut shed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    // (The shed answers come at once; two quiet seconds end the wait.)
    while let Ok(Some(decision)) =
        tokio::time::timeout(Duration::from_secs(2), answered.recv()).await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "answers kept coming"
        );
        assert_eq!(decision.source, Source::Fallback);
        assert!(decision.allowed, "failure mode allow");
        shed += 1;
        if shed == CHECKS {
            break;
        }
    }
    println!("{shed} of {CHECKS} checks answered by the failure mode at once, the rest queued");
    assert!(shed > CHECKS / 2, "only {shed} shed");
    assert!(limiter.metrics().store_errors >= shed as u64);
    for task in tasks {
        task.abort();
    }
    silent.abort();
}
