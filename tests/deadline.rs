//! A check has one deadline: every store call it makes (the counters, the
//! take-back of a boundary crossing, the attempt after it) gets the time
//! left, and when none is left the failure mode decides. Before, each call
//! had a timeout of its own, so a check that crossed a bucket boundary on
//! each of its 3 attempts waited up to 5 or 6 timeouts.
//!
//! The store is a real memcached behind a proxy that sends each reply on
//! `REPLY_DELAY` late, 0.6 of the timeout: any one call answers in time,
//! two in a row do not. The clock moves on one window at every reading, so
//! every attempt crosses a boundary.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::proxy::CountingProxy;
use slidegate::store::Store;
use slidegate::{
    CheckError, Clock, Decision, FailureMode, Item, Limit, Limiter, ManualClock, MemcachedOptions,
    MemcachedStore, Policy, Source,
};

const TIMEOUT: Duration = Duration::from_millis(200);
const REPLY_DELAY_MS: u64 = 120;
/// Generous for a busy machine; one timeout per call would take at least
/// 3 x (read + take-back) = 600 ms under `allow`, 720 ms under `deny`.
const WITHIN: Duration = Duration::from_millis(400);
const WINDOW_MS: u64 = 1_000;

/// A clock a window later at every reading: a check's answer always comes
/// in a later bucket than the one it counted in.
struct AWindowPerReading {
    next_ms: AtomicU64,
}

impl Clock for AWindowPerReading {
    fn now_ms(&self) -> u64 {
        self.next_ms.fetch_add(WINDOW_MS, Ordering::SeqCst)
    }
}

struct Scenario {
    /// Held: the proxy stops when dropped.
    _proxy: CountingProxy,
    slow: Limiter<MemcachedStore>,
    /// On the same counters, straight to memcached, at the first reading.
    direct: Limiter<MemcachedStore>,
    policy: Policy,
}

async fn scenario(mode: FailureMode) -> Scenario {
    let memcached = common::shared_memcached();
    let proxy = CountingProxy::start(memcached.addr()).await;
    // The store's own bound (2 s) is far off: only the check's deadline
    // is under test.
    let through_proxy = common::memcached_options(vec![proxy.addr.clone()]);
    let direct_to_memcached = MemcachedOptions {
        servers: vec![memcached.addr()],
        ..through_proxy.clone()
    };
    let store = MemcachedStore::connect(&through_proxy).await.unwrap();
    // Connected before the delay, or the check would fail fast, unsent.
    let connected = tokio::time::timeout(Duration::from_secs(10), async {
        while store.ping().await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert!(connected.await.is_ok(), "never connected through the proxy");
    let first_reading_ms = common::today_ms() + 30_000;
    let slow = Limiter::builder(store)
        .clock(AWindowPerReading {
            next_ms: AtomicU64::new(first_reading_ms),
        })
        .timeout(TIMEOUT)
        .failure_mode(mode)
        .near_cache_capacity(0)
        .build();
    let direct = Limiter::builder(MemcachedStore::connect(&direct_to_memcached).await.unwrap())
        .clock(ManualClock::new(first_reading_ms))
        .timeout(Duration::from_secs(2))
        .near_cache_capacity(0)
        .build();
    proxy.delay_replies(REPLY_DELAY_MS);
    Scenario {
        _proxy: proxy,
        slow,
        direct,
        policy: Policy::new("api", vec![Limit::new(100, WINDOW_MS, 1).unwrap()]).unwrap(),
    }
}

impl Scenario {
    /// The first attempt's increment was taken back although the deadline
    /// passed while its take-back was in flight: it was sent anyway.
    async fn first_increment_taken_back(&self, key: &str) {
        let started = Instant::now();
        loop {
            let now = self.direct.peek(key, &self.policy, 1).await.unwrap();
            if now.limits[0].estimate.as_f64() == 0.0 {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the first attempt's increment stayed counted: {}",
                now.limits[0].estimate.as_f64()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn timed<T>(deciding: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let outcome = deciding.await;
    (outcome, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_crossing_a_boundary_on_every_attempt_ends_at_its_deadline_allow() {
    let scenario = scenario(FailureMode::Allow).await;
    let (decision, took) = timed(scenario.slow.check("k", &scenario.policy, 1)).await;
    let decision = decision.unwrap();
    println!("allow: the check took {took:?} (timeout {TIMEOUT:?})");
    assert!(took < WITHIN, "the check took {took:?}");
    assert_eq!(
        (decision.allowed, decision.source),
        (true, Source::Fallback)
    );
    scenario.first_increment_taken_back("k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_crossing_a_boundary_on_every_attempt_ends_at_its_deadline_deny() {
    let scenario = scenario(FailureMode::Deny).await;
    let (outcome, took) = timed(scenario.slow.check("k", &scenario.policy, 1)).await;
    println!("deny: the check took {took:?} (timeout {TIMEOUT:?})");
    assert!(took < WITHIN, "the check took {took:?}");
    assert!(
        matches!(outcome, Err(CheckError::StoreUnavailable(_))),
        "{outcome:?}"
    );
    scenario.first_increment_taken_back("k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_several_items_crossing_a_boundary_ends_at_its_deadline() {
    let scenario = scenario(FailureMode::Allow).await;
    let items = ["a", "b"].map(|key| Item {
        key,
        policy: &scenario.policy,
        cost: 1,
    });
    let (decisions, took) = timed(scenario.slow.check_all(&items)).await;
    let decisions: Vec<Decision> = decisions.unwrap();
    println!("check_all: the request took {took:?} (timeout {TIMEOUT:?})");
    assert!(took < WITHIN, "the request took {took:?}");
    for decision in &decisions {
        assert_eq!(
            (decision.allowed, decision.source),
            (true, Source::Fallback)
        );
    }
    for key in ["a", "b"] {
        scenario.first_increment_taken_back(key).await;
    }
}

/// A gathered check is answered by its own deadline even when it reached
/// its batch late. M's near-cache entry is due to be read again, which
/// spends most of its time; meanwhile L, a cheaper check of the same key
/// that the entry does not refuse, leads an exchange of its own. M, its
/// counts read, joins behind L's exchange, which is bounded only by L's
/// later deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_read_its_entry_again_is_answered_by_its_own_deadline() {
    let memcached = common::shared_memcached();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let options = MemcachedOptions {
        connections: 1,
        ..common::memcached_options(vec![proxy.addr.clone()])
    };
    let store = MemcachedStore::connect(&options).await.unwrap();
    let now = common::today_ms() + 1_000;
    let clock = ManualClock::new(now);
    let timeout = Duration::from_millis(1_000);
    let window = Limit::new(10, 3_600_000, 1).unwrap().window();
    let counter = store.wire_key(&slidegate::store::CounterKey {
        digest: slidegate::store::KeyDigest::of("late", "k"),
        window,
        bucket: window.bucket_of(now),
    });
    let limiter = std::sync::Arc::new(
        Limiter::builder(store)
            .clock(clock.clone())
            .timeout(timeout)
            .near_cache_revalidate(Duration::from_millis(100))
            .failure_mode(FailureMode::Allow)
            .build(),
    );
    let policy = std::sync::Arc::new(
        Policy::new("late", vec![Limit::new(10, 3_600_000, 1).unwrap()]).unwrap(),
    );
    // 8 counted, then a refusal of 5 leaves the key in the near-cache.
    assert!(limiter.check("k", &policy, 8).await.unwrap().allowed);
    let refused = limiter.check("k", &policy, 5).await.unwrap();
    assert!(
        !refused.allowed && refused.source == Source::Store,
        "{refused:?}"
    );
    // The counts go (a reset on another instance), and the entry is due
    // to be read again.
    assert_eq!(
        memcached.raw(&format!("md {counter}\r\n"), "\r\n"),
        "HD\r\n"
    );
    clock.advance(Duration::from_millis(200));

    proxy.delay_replies(800);
    let started = Instant::now();
    let late = tokio::spawn({
        let (limiter, policy) = (limiter.clone(), policy.clone());
        async move {
            let decision = limiter.check("k", &policy, 5).await;
            (decision, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let leader = tokio::spawn({
        let (limiter, policy) = (limiter.clone(), policy.clone());
        async move { limiter.check("k", &policy, 1).await }
    });
    let (decision, elapsed) = late.await.unwrap();
    let decision = decision.unwrap();
    // Read again, M's counts admit it, and it joins behind L's exchange:
    // answered by the failure mode when its time runs out there.
    assert!(
        elapsed < timeout + Duration::from_millis(300),
        "answered after {elapsed:?}: {decision:?}"
    );
    leader.await.unwrap().unwrap();
}

/// A timeout past any use (a library caller's `Duration::MAX`) is held to
/// an hour, and a check still decides by the store: no overflow panics in
/// the deadline, the stall bound or the calm period an extra connection
/// waits out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_timeout_is_held_to_an_hour() {
    let memcached = common::Memcached::start();
    let mut options = common::memcached_options(vec![memcached.addr()]);
    options.timeout = Duration::MAX;
    let store = MemcachedStore::connect(&options).await.unwrap();
    let limiter = Limiter::builder(store).timeout(Duration::MAX).build();
    let policy = Policy::new("api", vec![Limit::new(10, 60_000, 1).unwrap()]).unwrap();
    for _ in 0..3 {
        let decision = limiter.check("endless", &policy, 1).await.unwrap();
        assert_eq!(decision.source, Source::Store);
    }
}
