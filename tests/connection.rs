//! The multiplexed connection under faults, against real memcached
//! processes: killed mid-stream, a listener that never answers, a proxy
//! that delays replies, and thousands of callers that give up at random.
//! Whatever happens, calls come back, the stream stays in step, and
//! memcached ends up counting exactly what callers were told was counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Memcached;
use common::proxy::CountingProxy;
use common::wait::{PATIENCE, until_the_store_decides, wait_for};
use slidegate::store::{CounterKey, KeyDigest, Store};
use slidegate::{Limit, Limiter, ManualClock, MemcachedStore, Policy, Source};
use tokio::net::TcpListener;

const MINUTE: u64 = 60_000;

fn per_minute(limit: u64) -> Arc<Policy> {
    Arc::new(Policy::new("api", vec![Limit::new(limit, MINUTE, 1).unwrap()]).unwrap())
}

async fn store(addr: String, timeout: Duration) -> Arc<MemcachedStore> {
    let mut options = common::memcached_options(vec![addr]);
    options.timeout = timeout;
    Arc::new(MemcachedStore::connect(&options).await.unwrap())
}

/// The value memcached holds for the current bucket of `key`.
fn counter_value(memcached: &Memcached, store: &MemcachedStore, key: &str, now: u64) -> u64 {
    let limit = per_minute(1).limits()[0];
    let wire_key = store.wire_key(&CounterKey {
        digest: KeyDigest::of("api", key),
        window: limit.window(),
        bucket: limit.window().bucket_of(now),
    });
    let answer = memcached.raw(&format!("mg {wire_key} v\r\nmn\r\n"), "MN\r\n");
    let mut lines = answer.lines();
    match lines.next() {
        Some("EN") => 0,
        Some(header) if header.starts_with("VA") => lines
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected answer {answer:?}")),
        _ => panic!("unexpected answer {answer:?}"),
    }
}

/// Wait until memcached's count stops moving (rollbacks and take-backs of
/// abandoned requests are still in flight when the callers return).
async fn settled_value(memcached: &Memcached, store: &MemcachedStore, key: &str, now: u64) -> u64 {
    let mut last = counter_value(memcached, store, key, now);
    let mut stable = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while stable < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let value = counter_value(memcached, store, key, now);
        stable = if value == last { stable + 1 } else { 0 };
        last = value;
    }
    last
}

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
    let store = store(proxy.addr.clone(), Duration::from_secs(2)).await;
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
    scenario.run(Order::RepliesAfter).await;
    scenario.run(Order::RepliesBefore).await;
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
        }
    }
}
