//! A node frozen past the stall bound: memcached stopped (SIGSTOP) while a
//! key keeps asking. The writes it buffered meanwhile are applied when it
//! runs again, after their connections were given up as stalled; each one
//! nobody was told was counted must be taken back all the same. The
//! report's scenario: a limit of 5 a minute, a 50 ms timeout (so a 1 s
//! stall bound), a check every 100 ms through a 2.5 s freeze; afterwards
//! memcached must hold nothing for the key, and the next checks admit
//! exactly 5. And the other way round: a connection given up that ends
//! before its replies come (cut, or past the drain bound) cannot know what
//! its writes did, and subtracts nothing.

use std::time::{Duration, Instant};

use slidegate::store::Store;
use slidegate::{CheckError, FailureMode, Limiter, ManualClock, MemcachedStore, Source};

use super::{counter_value, per_minute, settled_value, store};
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;
use crate::common::wait::{PATIENCE, until, wait_for};

/// The call timeout of the report; the stall bound is 20 of them, at
/// least 1 s.
const TIMEOUT: Duration = Duration::from_millis(50);
/// Past the stall bound by more than half of it again: the connections
/// first given up are replaced, and the replacements stall too.
const FROZEN_FOR: Duration = Duration::from_millis(2_500);
const ASK_EVERY: Duration = Duration::from_millis(100);
const LIMIT: u64 = 5;
const KEY: &str = "frozen";

/// Connections of the store's node given up as stalled so far.
fn given_up(store: &MemcachedStore) -> u64 {
    store.topology().nodes[0]
        .redials
        .iter()
        .find(|(reason, _)| *reason == "stalled")
        .map_or(0, |&(_, count)| count)
}

/// The scenario under `mode`, coalescing on or off; the counts left in
/// memcached and the checks admitted after the freeze must be those of a
/// store that counts only what callers were told was counted.
async fn frozen_past_the_stall_bound(mode: FailureMode, coalesce: bool) {
    let memcached = Memcached::start();
    let now = common::today_ms() + 30_000;
    let store = store(memcached.addr(), TIMEOUT).await;
    wait_for("both connections up", PATIENCE, || async {
        store.topology().nodes[0].states.ready == 2 && store.ping().await.is_ok()
    })
    .await;
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(now))
        .timeout(TIMEOUT)
        .failure_mode(mode)
        .coalesce(coalesce)
        .build();
    let policy = per_minute(LIMIT);

    memcached.pause();
    let frozen = Instant::now();
    let (mut asked, mut told_counted, mut most_open) = (0, 0, 0);
    // The freeze lasts its time, and at least both configured connections
    // have been given up; a machine too busy to get there fails the test
    // rather than hanging it.
    while frozen.elapsed() < FROZEN_FOR || given_up(&store) < 2 {
        assert!(
            frozen.elapsed() < PATIENCE,
            "no connection was given up in {PATIENCE:?}"
        );
        // The signal may take a moment to stop memcached: a check it
        // answers is counted, and told so.
        match limiter.check(KEY, &policy, 1).await {
            Ok(decision) => {
                told_counted += u64::from(decision.allowed && decision.source == Source::Store)
            }
            Err(CheckError::StoreUnavailable(_)) => {}
            Err(error) => panic!("{error}"),
        }
        asked += 1;
        most_open = most_open.max(store.topology().nodes[0].live());
        tokio::time::sleep(ASK_EVERY).await;
    }
    let stalls = given_up(&store);
    let frozen_for = frozen.elapsed();
    memcached.resume();

    // The connections given up read their late replies, and what those
    // report added for nobody is taken back.
    wait_for("the late replies drained", PATIENCE, || async {
        store.topology().nodes[0].states.draining == 0
    })
    .await;
    let left = settled_value(&memcached, &store, KEY, now).await;
    let node = &store.topology().nodes[0];
    let (late_take_backs, lost) = (node.late_take_backs, node.lost_replies);
    // Decided by the store, each: a check the failure mode decides (a
    // loaded machine's reply later than the timeout) counted nothing, and
    // is asked again.
    let patient = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .failure_mode(FailureMode::Deny)
        .coalesce(coalesce)
        .build();
    let mut admitted = 0;
    for _ in 0..10 {
        let decision = until("a check decided by the store", PATIENCE, || async {
            match patient.check(KEY, &policy, 1).await {
                Ok(decision) => Some(decision),
                Err(CheckError::StoreUnavailable(_)) => None,
                Err(error) => panic!("{error}"),
            }
        })
        .await;
        admitted += u64::from(decision.allowed);
    }
    println!(
        "{mode:?}, coalescing {coalesce}: {asked} checks over a {frozen_for:?} freeze \
         ({stalls} connections given up), {told_counted} told counted; memcached then held \
         {left} for the key, and 10 checks after admitted {admitted} (limit {LIMIT}); \
         {late_take_backs} late take-backs, {lost} replies lost"
    );
    // Two slots a configured connection (2 here) and its extra, each
    // with at most one connection draining beside the one it serves with.
    assert!(most_open <= 4 * 2, "{most_open} connections open at once");
    assert_eq!(
        left, told_counted,
        "{mode:?}, coalescing {coalesce}: memcached holds counts nobody was told of"
    );
    assert_eq!(
        admitted,
        LIMIT - told_counted,
        "{mode:?}, coalescing {coalesce}: checks admitted after the freeze"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_past_the_stall_bound_leaves_no_count_deny() {
    frozen_past_the_stall_bound(FailureMode::Deny, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_past_the_stall_bound_leaves_no_count_deny_without_coalescing() {
    frozen_past_the_stall_bound(FailureMode::Deny, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_past_the_stall_bound_leaves_no_count_local() {
    frozen_past_the_stall_bound(FailureMode::Local, true).await;
}

/// How a drain ends before its replies come.
#[derive(Clone, Copy, Debug)]
enum CutShort {
    /// The connection is closed under it, as a node that restarts would.
    Closed,
    /// Its bound passes first.
    OutOfTime,
}

/// One check's write reaches memcached and is applied; its reply is held
/// (a proxy delays replies far past the 1 s stall bound), so the check
/// falls back, its connection is given up and drains, and the drain ends
/// before the reply comes. Nothing then knows whether the addition was
/// applied: it is not subtracted, and stays counted (erring towards
/// refusing), and the store counts the reply as lost.
async fn a_drain_cut_short_subtracts_nothing(how: CutShort) {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let now = common::today_ms() + 30_000;
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    options.timeout = TIMEOUT;
    if let CutShort::OutOfTime = how {
        options.drain_timeout = Duration::from_millis(300);
    }
    let store = std::sync::Arc::new(MemcachedStore::connect(&options).await.unwrap());
    wait_for("the store to answer", PATIENCE, || async {
        store.ping().await.is_ok()
    })
    .await;
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(now))
        .timeout(TIMEOUT)
        .failure_mode(FailureMode::Deny)
        .build();
    proxy.delay_replies(60_000);
    let outcome = limiter.check(KEY, &per_minute(LIMIT), 1).await;
    assert!(
        matches!(outcome, Err(CheckError::StoreUnavailable(_))),
        "{outcome:?}"
    );
    wait_for("the addition applied", PATIENCE, || async {
        counter_value(&memcached, &store, KEY, now) == 1
    })
    .await;
    wait_for("its connection draining", PATIENCE, || async {
        store.topology().nodes[0].states.draining == 1
    })
    .await;
    if let CutShort::Closed = how {
        proxy.cut();
    }
    wait_for("the drain over", PATIENCE, || async {
        store.topology().nodes[0].states.draining == 0
    })
    .await;
    let node = &store.topology().nodes[0];
    assert_eq!(
        (node.lost_replies, node.late_take_backs),
        (1, 0),
        "{how:?}: one reply lost, nothing taken back"
    );
    proxy.open();
    proxy.delay_replies(0);
    assert_eq!(
        settled_value(&memcached, &store, KEY, now).await,
        1,
        "{how:?}: an addition not known to be applied was subtracted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_closed_under_it_subtracts_nothing() {
    a_drain_cut_short_subtracts_nothing(CutShort::Closed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_past_its_bound_subtracts_nothing() {
    a_drain_cut_short_subtracts_nothing(CutShort::OutOfTime).await;
}
