//! Many callers at once: 10,000 that give up at random leave memcached
//! counting exactly what they were told was counted, and 64 that check
//! while memcached is killed all come back, the store deciding again once
//! it returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use slidegate::{Limiter, ManualClock, MemcachedStore, Source};

use super::{per_minute, settled_value, store};
use crate::common;
use crate::common::Memcached;
use crate::common::wait::{PATIENCE, until_the_store_decides, wait_for};

/// 10,000 concurrent checks of one key, each given up by its caller after a
/// random 0-4 ms (on top of the limiter's own timeout of 1-5 ms): some are
/// abandoned before they are written, some after, some answer. memcached's
/// count must then be exactly the number of checks that answered "admitted
/// by the store": an abandoned increment is never sent, or is taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_timeouts_leave_exact_counts() {
    const CHECKS: u64 = 10_000;
    let memcached = Memcached::start();
    let now = common::today_ms() + 30_000;
    let store = store(memcached.addr(), Duration::from_millis(5)).await;
    // Limiters differing only in their timeout, sharing the connections.
    let limiters: Vec<Arc<Limiter<Arc<MemcachedStore>>>> = (1..=5)
        .map(|ms| {
            Arc::new(
                Limiter::builder(store.clone())
                    .clock(ManualClock::new(now))
                    .timeout(Duration::from_millis(ms))
                    .build(),
            )
        })
        .collect();
    let policy = per_minute(6_000);
    let admitted_by_store = Arc::new(AtomicU64::new(0));
    let outcomes = Arc::new([
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ]);
    let tasks: Vec<_> = (0..CHECKS)
        .map(|index| {
            let limiter = limiters[(index % 5) as usize].clone();
            let (policy, admitted, outcomes) =
                (policy.clone(), admitted_by_store.clone(), outcomes.clone());
            // A cheap deterministic spread of the callers' own deadlines.
            let patience = Duration::from_micros((index * 7_919) % 4_000);
            tokio::spawn(async move {
                let check = limiter.check("hot", &policy, 1);
                match tokio::time::timeout(patience, check).await {
                    Ok(Ok(decision)) if decision.source == Source::Store => {
                        if decision.allowed {
                            admitted.fetch_add(1, Ordering::SeqCst);
                            outcomes[0].fetch_add(1, Ordering::Relaxed);
                        } else {
                            outcomes[1].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(Ok(_)) => {
                        outcomes[2].fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(error)) => panic!("{error}"),
                    Err(_) => {
                        outcomes[3].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let counted = settled_value(&memcached, &store, "hot", now).await;
    let admitted = admitted_by_store.load(Ordering::SeqCst);
    let [store_admitted, store_rejected, fallback, abandoned] =
        outcomes.each_ref().map(|n| n.load(Ordering::Relaxed));
    let rollback_failures: u64 = limiters.iter().map(|l| l.metrics().rollback_failures).sum();
    let redials = store.topology().nodes[0].redials.clone();
    println!(
        "{CHECKS} checks: {store_admitted} admitted and {store_rejected} rejected by the store, \
         {fallback} decided by the failure mode after the limiter's timeout, {abandoned} abandoned \
         by their callers; memcached counts {counted}; rollback failures {rollback_failures}; \
         redials {redials:?}"
    );
    assert_eq!(counted, admitted);
    assert!(
        store_admitted > 0 && fallback + abandoned > 0,
        "the test must mix answered and abandoned checks to mean anything"
    );
    // The connection is still in step: a fresh check counts from there.
    let limiter = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    let decision = limiter.check("hot", &policy, 1).await.unwrap();
    assert_eq!(decision.source, Source::Store);
    assert_eq!(decision.limits[0].estimate.as_f64(), (counted + 1) as f64);
}

/// memcached killed while 64 callers check: every call comes back (store
/// or failure mode), none hangs, and once memcached is back the store
/// decides again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_stream_then_back() {
    let mut memcached = Memcached::start();
    let store = store(memcached.addr(), Duration::from_millis(200)).await;
    let limiter = Arc::new(common::patient_limiter(store).build());
    let policy = per_minute(1_000_000);
    let sources = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let started = Instant::now();
    let callers: Vec<_> = (0..64)
        .map(|caller| {
            let (limiter, policy, sources) = (limiter.clone(), policy.clone(), sources.clone());
            tokio::spawn(async move {
                for round in 0..200 {
                    let key = format!("k{caller}-{}", round % 10);
                    let decision = limiter.check(&key, &policy, 1).await.unwrap();
                    assert!(decision.allowed);
                    let index = usize::from(decision.source != Source::Store);
                    sources[index].fetch_add(1, Ordering::Relaxed);
                    if started.elapsed() > Duration::from_secs(20) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            })
        })
        .collect();
    wait_for("checks decided by the store", PATIENCE, || {
        std::future::ready(sources[0].load(Ordering::Relaxed) > 0)
    })
    .await;
    let before_kill = sources[0].load(Ordering::Relaxed);
    memcached.kill();
    for caller in callers {
        tokio::time::timeout(Duration::from_secs(30), caller)
            .await
            .expect("a caller hung")
            .unwrap();
    }
    let [by_store, by_failure_mode] = sources.each_ref().map(|n| n.load(Ordering::Relaxed));
    println!(
        "{by_store} decided by the store ({before_kill} before the kill), {by_failure_mode} by the failure mode"
    );
    assert!(before_kill > 0 && by_failure_mode > 0);

    memcached.restart();
    let (_, took) = until_the_store_decides(&limiter, "after", &policy).await;
    println!("the store decided again {took:?} after the restart");
    assert!(limiter.ready().await.is_ok());
}
