//! Take-backs cut off or left to others: a rollback that never reaches
//! memcached leaves the refused cost counted, and an addition whose caller
//! gave up is taken back whoever holds its replies.

use std::sync::Arc;
use std::time::Duration;

use slidegate::store::{CallDeadline, CounterKey, KeyDigest, Store, StoreError};
use slidegate::{ManualClock, MemcachedStore, Source};

use super::{counter_value, per_minute, store};
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;
use crate::common::wait::{PATIENCE, wait_for};

/// A refused check whose take-back never reaches memcached leaves its cost
/// counted, as the README says ("a rollback that fails leaves the refused
/// request's cost counted until its bucket expires"): the limiter neither
/// retries an undo whose outcome it cannot know nor pretends it happened.
/// It counts the failure, and the count errs towards refusing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollback_leaves_the_cost_counted() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let now = common::today_ms() + 30_000;
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    options.connections = 1;
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = Arc::new(
        common::patient_limiter(store.clone())
            .clock(ManualClock::new(now))
            .build(),
    );
    let policy = per_minute(1);
    let first = limiter.check("undone", &policy, 1).await.unwrap();
    assert!(first.allowed && first.source == Source::Store);

    // The second check's addition passes; the take-back its refusal sends
    // (the round trip after) is held, and the connection cut under it.
    proxy.hold_from_round_trip(proxy.round_trips() + 2);
    let check = tokio::spawn({
        let (limiter, policy) = (limiter.clone(), policy.clone());
        async move { limiter.check("undone", &policy, 1).await }
    });
    tokio::time::timeout(PATIENCE, proxy.holding_a_request())
        .await
        .expect("the take-back never came");
    proxy.cut();
    let refused = check.await.unwrap().unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.source, Source::Store);
    assert_eq!(limiter.metrics().rollback_failures, 1);
    assert_eq!(
        counter_value(&memcached, &store, "undone", now),
        2,
        "the refused check's cost stays counted"
    );
}

/// A counted request whose caller gives up after it was written, in each
/// of the two orders that can happen: its replies come after (the reader
/// finds nobody waiting, and takes the addition back), or they reached the
/// caller's channel just before it gave up (the caller's wait takes the
/// addition back as it is dropped). Either way memcached ends up counting
/// nothing: nobody was told the addition counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addition_whose_caller_gave_up_is_taken_back_whoever_holds_its_replies() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let store = answering_store(&proxy).await;
    let scenario = GiveUp {
        memcached: &memcached,
        proxy: &proxy,
        store: &store,
        now: common::today_ms() + 30_000,
    };
    scenario.run(Order::RepliesAfter).await;
    scenario.run(Order::RepliesBefore).await;
}

/// A counted call given a deadline is answered with the timeout error by
/// its connection's sweep when the deadline passes, with no timer of its
/// caller's around it; its replies, late, are read and dropped, and what
/// they report added is taken back: memcached counts nothing, as the
/// caller was told. Without the sweep the call would wait for its late
/// replies (and count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counted_call_is_answered_at_its_deadline_and_its_addition_taken_back() {
    const DEADLINE: Duration = Duration::from_millis(100);
    const REPLIES_LATE_MS: u64 = 600;
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    // The call timeout (the overdue bound) and its stall bound far off:
    // only the call's own deadline is under test.
    let store = answering_store(&proxy).await;
    let scenario = GiveUp {
        memcached: &memcached,
        proxy: &proxy,
        store: &store,
        now: common::today_ms() + 30_000,
    };
    proxy.delay_replies(REPLIES_LATE_MS);
    let mut batch = scenario.batch_of("swept");
    let started = std::time::Instant::now();
    batch.deadline = Some(CallDeadline {
        at: started + DEADLINE,
        timeout: DEADLINE,
    });
    let answer = store.read_and_add(&batch).await;
    let waited = started.elapsed();
    assert!(
        matches!(answer, Err(StoreError::Timeout(100))),
        "{answer:?}"
    );
    // A bound on correctness, not speed: answered at its deadline, not
    // when its replies came.
    assert!(
        waited >= DEADLINE && waited < Duration::from_millis(REPLIES_LATE_MS),
        "answered after {waited:?}"
    );
    wait_for("the addition to be counted", PATIENCE, || async {
        counter_value(&memcached, &store, "swept", scenario.now) == 1
    })
    .await;
    wait_for("the addition to be taken back", PATIENCE, || async {
        counter_value(&memcached, &store, "swept", scenario.now) == 0
    })
    .await;
    proxy.delay_replies(0);
}

/// What a late answer owes goes out with the very next write, ahead of
/// the callers queued meanwhile, so a connection lost while that write is
/// out loses no take-back. It used to be queued last: behind more than one
/// write holds, it was still queued when the connection was lost, and was
/// dropped with the callers' requests, leaving counted what the caller was
/// told was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_back_goes_out_with_the_next_write_ahead_of_a_full_queue() {
    const DEADLINE: Duration = Duration::from_millis(100);
    /// More one-command requests than one write holds (1,024 commands).
    const QUEUED: usize = 1_100;
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    // One connection: every request below queues on it.
    options.connections = 1;
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    wait_for("the store to answer", PATIENCE, || async {
        store.ping().await.is_ok()
    })
    .await;
    let scenario = GiveUp {
        memcached: &memcached,
        proxy: &proxy,
        store: &store,
        now: common::today_ms() + 30_000,
    };
    proxy.delay_replies(400);
    let mut swept = scenario.batch_of("swept");
    swept.deadline = Some(CallDeadline {
        at: std::time::Instant::now() + DEADLINE,
        timeout: DEADLINE,
    });
    let answer = store.read_and_add(&swept).await;
    assert!(matches!(answer, Err(StoreError::Timeout(_))), "{answer:?}");
    // Its write is still out (its replies are late): these queue behind it.
    let callers: Vec<_> = (0..QUEUED)
        .map(|index| {
            let (store, batch) = (store.clone(), scenario.batch_of(&format!("queued-{index}")));
            tokio::spawn(async move { store.read_and_add(&batch).await })
        })
        .collect();
    // The late replies come; the next write goes out, and reaches memcached.
    wait_for("the next write to reach memcached", PATIENCE, || async {
        counter_value(&memcached, &store, "queued-0", scenario.now) == 1
    })
    .await;
    proxy.cut();
    for caller in callers {
        let _ = caller.await.unwrap();
    }
    proxy.open();
    proxy.delay_replies(0);
    wait_for(
        "the addition to be taken back",
        Duration::from_secs(5),
        || async { counter_value(&memcached, &store, "swept", scenario.now) == 0 },
    )
    .await;
}

/// A store through `proxy` (a call timeout of 2 s), once it answers.
async fn answering_store(proxy: &CountingProxy) -> Arc<MemcachedStore> {
    let store = store(proxy.addr.clone(), Duration::from_secs(2)).await;
    wait_for("the store to answer", PATIENCE, || async {
        store.ping().await.is_ok()
    })
    .await;
    store
}

/// When a caller gives up: before its replies come, or after they reached
/// its channel.
#[derive(Clone, Copy, Debug)]
enum Order {
    RepliesAfter,
    RepliesBefore,
}

struct GiveUp<'a> {
    memcached: &'a Memcached,
    proxy: &'a CountingProxy,
    store: &'a MemcachedStore,
    now: u64,
}

impl GiveUp<'_> {
    /// One addition given up in `order`, on a fresh key, then memcached's
    /// count of it must come back to 0. The replies are held back (1 s, or
    /// 300 ms when the caller waits for them), so the caller's first poll
    /// finds no answer; a machine busy enough to hold the test's thread
    /// that long makes the attempt moot (the answer was read, and counts),
    /// and it is tried again on a new key, at most 5 times.
    async fn run(&self, order: Order) {
        use std::task::{Context, Wake, Waker};

        /// A waker that says when the answer reached the caller's channel.
        struct Answered(tokio::sync::Notify);
        impl Wake for Answered {
            fn wake(self: Arc<Self>) {
                self.0.notify_one();
            }
        }

        let (memcached, store, now) = (self.memcached, self.store, self.now);
        for attempt in 0..5 {
            let key = format!("{order:?}-{attempt}");
            let batch = self.batch_of(&key);
            let answered = Arc::new(Answered(tokio::sync::Notify::new()));
            let waker = Waker::from(answered.clone());
            self.proxy.delay_replies(match order {
                Order::RepliesAfter => 1_000,
                Order::RepliesBefore => 300,
            });
            let mut call = Box::pin(store.read_and_add(&batch));
            let first = call.as_mut().poll(&mut Context::from_waker(&waker));
            if first.is_ready() {
                println!("{order:?}, attempt {attempt}: answered at the first poll ({first:?})");
                continue;
            }
            match order {
                Order::RepliesAfter => {
                    wait_for("the addition to reach memcached", PATIENCE, || async {
                        counter_value(memcached, store, &key, now) == 1
                    })
                    .await;
                }
                Order::RepliesBefore => {
                    tokio::time::timeout(PATIENCE, answered.0.notified())
                        .await
                        .expect("the answer never came");
                    assert_eq!(counter_value(memcached, store, &key, now), 1);
                }
            }
            drop(call);
            wait_for(
                &format!("the addition to be taken back ({order:?})"),
                PATIENCE,
                || async { counter_value(memcached, store, &key, now) == 0 },
            )
            .await;
            self.proxy.delay_replies(0);
            return;
        }
        panic!("{order:?}: every attempt was answered at its first poll");
    }

    fn batch_of(&self, key: &str) -> slidegate::store::CounterBatch {
        let limit = per_minute(1).limits()[0];
        slidegate::store::CounterBatch {
            reads: slidegate::store::Counters::new(),
            adds: slidegate::store::Counters::from_slice(&[CounterKey {
                digest: KeyDigest::of("api", key),
                window: limit.window(),
                bucket: limit.window().bucket_of(self.now),
            }]),
            amount: 1,
            now_ms: self.now,
            deadline: None,
        }
    }
}
