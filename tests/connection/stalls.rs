//! Replies that never come or come late: a silent node is dropped and
//! dialled again, and late replies are read and dropped in order, their
//! increments taken back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use slidegate::store::Store;
use slidegate::{Limiter, ManualClock, Source};
use tokio::net::TcpListener;

use super::{per_minute, settled_value, store};
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;
use crate::common::wait::{PATIENCE, wait_for};

/// A listener that accepts and never answers: calls end at the limiter's
/// timeout, and the connection is dropped once a reply is overdue beyond
/// the stall bound (1 s here), then dialled again.
#[tokio::test]
async fn a_silent_node_is_dropped_and_redialled() {
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let listener = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    let store = store(addr, Duration::from_millis(50)).await;
    let limiter = Limiter::new(store);
    let policy = per_minute(5);
    let started = Instant::now();
    // The default two connections, then at least one more after a stall.
    while accepted.load(Ordering::SeqCst) < 3 {
        let call = Instant::now();
        let decision = limiter.check("k", &policy, 1).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        assert!(call.elapsed() < Duration::from_secs(1), "a call hung");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the stalled connection was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("stalled connection redialled after {:?}", started.elapsed());
    listener.abort();
}

/// A proxy that holds every reply for a while. With the limiter's timeout
/// below the delay, every call gives up after writing; the late replies must
/// be read and dropped in order, their increments taken back, and once the
/// delay is lifted the same connection answers each call with its own
/// reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_replies_are_dropped_in_order() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let now = common::today_ms() + 30_000;
    let store = store(proxy.addr.clone(), Duration::from_millis(20)).await;
    let impatient = Limiter::builder(store.clone())
        .clock(ManualClock::new(now))
        .build();
    let policy = per_minute(1_000);
    // Wait until the connections are up, so calls are written, not dropped
    // unsent.
    wait_for("the connections up", PATIENCE, || async {
        store.ping().await.is_ok()
    })
    .await;
    proxy.delay_replies(100);
    for index in 0..20 {
        let decision = impatient
            .check(&format!("k{}", index % 4), &policy, 1)
            .await
            .unwrap();
        assert_eq!(decision.source, Source::Fallback);
    }
    proxy.delay_replies(0);
    let patient = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    for key in ["k0", "k1", "k2", "k3"] {
        assert_eq!(
            settled_value(&memcached, &store, key, now).await,
            0,
            "{key}: an abandoned increment was left counted"
        );
    }
    for round in 1..=3 {
        for key in ["k0", "k1", "k2", "k3"] {
            let decision = patient.check(key, &policy, 1).await.unwrap();
            assert_eq!(decision.source, Source::Store);
            assert_eq!(
                decision.limits[0].estimate.as_f64(),
                f64::from(round),
                "{key}: got another call's reply"
            );
        }
    }
}
