//! Outages: memcached killed under each failure mode (allow, deny, local),
//! the store deciding again by itself once it is back, and a server that
//! accepts connections and never answers.

use std::time::{Duration, Instant};

use slidegate::store::Store;
use slidegate::{CheckError, FailureMode, Limiter, MemcachedStore, Source};

use super::{MINUTE, policy};
use crate::common;
use crate::common::Memcached;
use crate::common::wait::until_the_store_decides;

fn limiter_on(
    memcached: &Memcached,
    mode: FailureMode,
) -> impl Future<Output = Limiter<MemcachedStore>> {
    let mut options = common::memcached_options(vec![memcached.addr()]);
    options.timeout = Duration::from_millis(50);
    async move {
        Limiter::builder(MemcachedStore::connect(&options).await.unwrap())
            .failure_mode(mode)
            .build()
    }
}

#[tokio::test]
async fn fail_open_then_recover_by_itself() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Allow).await;
    let api = policy(&[(1, MINUTE, 1)]);
    assert_eq!(
        limiter.check("k", &api, 1).await.unwrap().source,
        Source::Store
    );
    assert!(limiter.ready().await.is_ok());

    memcached.kill();
    for _ in 0..3 {
        let decision = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.source),
            (true, Source::Fallback)
        );
    }
    let refused = limiter.check("k", &api, 2).await.unwrap();
    assert!(
        !refused.allowed,
        "a cost above the limit is refused even when failing open"
    );
    assert!(limiter.ready().await.is_err());
    assert!(limiter.metrics().store_errors >= 4);

    // The connections redial by themselves, with a backoff of at most half
    // a second: the store decides again within a second or so.
    memcached.restart();
    let (decision, took) = until_the_store_decides(&limiter, "k", &api).await;
    assert!(decision.allowed);
    println!("the store decided again {took:?} after the restart");
    assert!(limiter.ready().await.is_ok());
}

#[tokio::test]
async fn fail_closed() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Deny).await;
    let api = policy(&[(5, MINUTE, 1)]);
    memcached.kill();
    assert!(matches!(
        limiter.check("k", &api, 1).await,
        Err(CheckError::StoreUnavailable(error)) if error.is_transient()
    ));
}

#[tokio::test]
async fn local_counters_while_the_store_is_down() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Local).await;
    let api = policy(&[(3, MINUTE, 1)]);
    memcached.kill();
    let mut allowed = 0;
    for _ in 0..5 {
        let decision = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        allowed += usize::from(decision.allowed);
    }
    assert_eq!(allowed, 3, "the local counters enforce the limit");
}

/// A server that accepts connections and never answers: every call must
/// come back at the timeout (50 ms), not hang. The bound checked is loose
/// (a second) so a busy machine cannot make it flaky; a hang would take the
/// crate's own default of seconds, or forever.
#[tokio::test]
async fn a_silent_store_times_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let _accepting = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().take(64) {
            held.push(stream);
        }
    });
    let mut options = common::memcached_options(vec![addr]);
    options.timeout = Duration::from_millis(50);
    let store = MemcachedStore::connect(&options).await.unwrap();
    let limiter = Limiter::new(store);
    let api = policy(&[(5, MINUTE, 1)]);
    let started = Instant::now();
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert!(limiter.store().ping().await.is_err());
}

/// A reset the store cannot carry out answers that nothing was reset (a
/// 503 over HTTP): so nothing is, the local counters of failure mode
/// `local` included, and the key stays refused here as everywhere else.
#[tokio::test]
async fn a_reset_that_fails_leaves_the_local_counters_too() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Local).await;
    let api = policy(&[(1, MINUTE, 1)]);
    memcached.kill();
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
    assert!(matches!(
        limiter.reset("k", &api).await,
        Err(CheckError::StoreUnavailable(_))
    ));
    let after = limiter.check("k", &api, 1).await.unwrap();
    assert_eq!(after.source, Source::Fallback);
    assert!(!after.allowed, "a failed reset unblocked the key here");
}

/// A store call whose connection ends under it (memcached killed while
/// the call's reply was due) fails with an error that names the node: the
/// status page's "last store error" and the logs tell an operator which
/// of several nodes went. It used to say only "memcached closed the
/// connection", and the node was named only once a redial failed.
#[tokio::test]
async fn a_call_whose_connection_ends_names_the_node() {
    let mut memcached = Memcached::start();
    let mut options = common::memcached_options(vec![memcached.addr()]);
    options.timeout = Duration::from_secs(5);
    let store = std::sync::Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let batch = slidegate::store::CounterBatch {
        reads: Default::default(),
        adds: [slidegate::store::CounterKey {
            digest: slidegate::store::KeyDigest::of("t", "named"),
            window: slidegate::policy::Window::new(60_000, 1).unwrap(),
            bucket: 1,
        }]
        .into_iter()
        .collect(),
        amount: 1,
        now_ms: common::today_ms(),
        deadline: None,
    };
    store.read_and_add(&batch).await.unwrap();

    // Frozen, the request is written and its reply is due; killed, the
    // connection ends with it still waiting.
    memcached.pause();
    let call = tokio::spawn({
        let store = store.clone();
        async move { store.read_and_add(&batch).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    memcached.kill();
    let error = call.await.unwrap().unwrap_err();
    assert!(
        error.to_string().contains(&memcached.addr()),
        "the error names the node: {error}"
    );
}
