//! Same-key coalescing against a real memcached: concurrent checks of one
//! key share exchanges, stay exact across instances, and answer more
//! exactly than separate exchanges would (each refused check's wait comes
//! from the checks admitted before it, not from every concurrent addition).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Memcached;
use common::proxy::CountingProxy;
use slidegate::window::{self, Counting};
use slidegate::{Clock, Decision, Limit, Limiter, ManualClock, MemcachedStore, Policy, Source};

const HOUR: u64 = 3_600_000;

async fn store(addr: String) -> Arc<MemcachedStore> {
    Arc::new(
        MemcachedStore::connect(&common::memcached_options(vec![addr]))
            .await
            .unwrap(),
    )
}

/// A store through `proxy`, once it answers.
async fn answering_store(proxy: &CountingProxy) -> Arc<MemcachedStore> {
    let store = store(proxy.addr.clone()).await;
    common::wait::wait_for("the store to answer", common::wait::PATIENCE, || async {
        slidegate::store::Store::ping(&*store).await.is_ok()
    })
    .await;
    store
}

/// `limit` an hour.
fn hourly(limit: u64) -> Arc<Policy> {
    Arc::new(Policy::new("hourly", vec![Limit::new(limit, HOUR, 1).unwrap()]).unwrap())
}

fn limiter(
    store: Arc<MemcachedStore>,
    clock: &ManualClock,
    coalesce: bool,
) -> Arc<Limiter<Arc<MemcachedStore>>> {
    Arc::new(
        Limiter::builder(store)
            .clock(clock.clone())
            .timeout(Duration::from_secs(5))
            .coalesce(coalesce)
            .build(),
    )
}

/// 256 tasks check one key whose limit (10 an hour) is already reached.
/// Every refusal's `retry_after_ms` is the exact wait from what the store
/// holds (10), whatever else was in flight. Without coalescing, each check
/// reads the counter with the other concurrent additions in it and most
/// answer a longer wait.
async fn refused_waits_are_exact(coalesce: bool) -> (usize, usize) {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 5 * 60_000);
    let limiter = limiter(store(proxy.addr.clone()).await, &clock, coalesce);
    let policy = hourly(10);
    for _ in 0..10 {
        assert!(limiter.check("tenant", &policy, 1).await.unwrap().allowed);
    }
    let exact = window::decide(
        policy.limits(),
        &[[0, 10]],
        clock.now_ms(),
        1,
        Counting::IfAdmitted,
    )
    .retry_after_ms
    .unwrap();
    // The first exchange is held until every task has arrived, so all 256
    // are in flight together, whatever the machine's scheduling.
    proxy.hold();
    let tasks = common::spawn_checks(&limiter, "tenant", &policy, 256);
    proxy.holding_a_request().await;
    let all_arrived = std::time::Instant::now();
    while coalesce && limiter.metrics().coalesced_checks < 255 {
        assert!(
            all_arrived.elapsed() < Duration::from_secs(10),
            "the checks never gathered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.release();
    let mut inexact = 0;
    let mut by_store = 0;
    for task in tasks {
        let decision = task.await.unwrap();
        assert!(!decision.allowed);
        by_store += usize::from(decision.source == Source::Store);
        if decision.retry_after_ms != Some(exact) {
            inexact += 1;
        }
    }
    println!(
        "coalesce {coalesce}: {inexact} of 256 refusals with a wait other than the exact {exact} ms; \
         {by_store} decided by the store, coalesced {}",
        limiter.metrics().coalesced_checks
    );
    (inexact, by_store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_of_a_hot_key_waits_exactly() {
    let (inexact, _) = refused_waits_are_exact(true).await;
    assert_eq!(inexact, 0);
}

/// The same without coalescing shows what the test guards: the checks in
/// flight together each read the others' additions, and overstate the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coalescing_concurrent_refusals_overstate_the_wait() {
    let (inexact, by_store) = refused_waits_are_exact(false).await;
    assert!(inexact > 200, "{inexact} of {by_store}");
}

/// Checks of one key under limits of other values over one window (inline
/// limits of 1,000 and of 1 an hour, which count in the same counters)
/// gather apart, and each is decided by its own limits. They used to share
/// the batch of the first one in flight and be decided by its limits: the
/// 1-an-hour checks were all admitted, their answers saying 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_under_other_limits_are_decided_by_their_own() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 5 * 60_000);
    let limiter = limiter(store(proxy.addr.clone()).await, &clock, true);
    let roomy = Arc::new(Policy::inline(vec![Limit::new(1_000, HOUR, 1).unwrap()]).unwrap());
    let tight = Arc::new(Policy::inline(vec![Limit::new(1, HOUR, 1).unwrap()]).unwrap());
    // The first exchange is held: what follows gathers behind it.
    proxy.hold();
    let mut roomy_checks = common::spawn_checks(&limiter, "user-1", &roomy, 1);
    proxy.holding_a_request().await;
    roomy_checks.extend(common::spawn_checks(&limiter, "user-1", &roomy, 1));
    let gathered = |count| {
        let limiter = limiter.clone();
        async move {
            let started = std::time::Instant::now();
            while limiter.metrics().coalesced_checks < count {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "never gathered"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    gathered(1).await;
    let tight_checks = common::spawn_checks(&limiter, "user-1", &tight, 5);
    // Four behind the first of their own limits (or, as before, all five
    // behind the roomy one).
    gathered(5).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.release();
    for check in roomy_checks {
        let decision = check.await.unwrap();
        assert!(decision.allowed);
        assert_eq!(decision.limits[0].limit.limit(), 1_000);
    }
    let mut admitted = 0;
    for check in tight_checks {
        let decision = check.await.unwrap();
        assert_eq!(decision.limits[0].limit.limit(), 1, "{decision:?}");
        admitted += usize::from(decision.allowed);
    }
    // The first of them to reach the store may find the roomy ones not yet
    // counted, and pass: never more.
    assert!(
        admitted <= 1,
        "{admitted} checks admitted past a limit of 1"
    );
}

/// A two-limit policy (3 a second, 100 an hour) on a hot key: once the
/// short limit frees up (the next second), a check is admitted when the
/// store would admit it: the near-cache must not remember counts inflated
/// by refused checks that were being taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_short_limit_admits_at_once() {
    let memcached = Memcached::start();
    let clock = ManualClock::new(common::today_ms() + 7 * 60_000 + 999);
    let limiter = limiter(store(memcached.addr()).await, &clock, true);
    let policy = Arc::new(
        Policy::new(
            "tiered",
            vec![
                Limit::new(3, 1_000, 1).unwrap(),
                Limit::new(100, HOUR, 1).unwrap(),
            ],
        )
        .unwrap(),
    );
    let tasks = common::spawn_checks(&limiter, "tenant", &policy, 64);
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap().allowed);
    }
    assert_eq!(admitted, 3);
    // The short limit's second ends; the 3 counted weigh (1 - f) in the
    // next one: at f = 0.5, 1.5 + 1 <= 3 admits.
    clock.advance(Duration::from_millis(501));
    let decision = limiter.check("tenant", &policy, 1).await.unwrap();
    assert!(decision.allowed, "{decision:?}");
    assert_eq!(decision.source, Source::Store);
}

/// 8 limiters, each with its own connections, 256 tasks on ONE key with
/// mixed costs under two limits, at one instant: the admitted costs are
/// exactly what the formula allows, checked against a replay of the same
/// arrivals in the order the store applied them, and hot admitted checks
/// cost a fraction of a memcached command each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_instances_on_one_hot_key_admit_exactly_the_formula() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 11 * 60_000 + 250);
    let limits = vec![
        Limit::new(300, 1_000, 1).unwrap(),
        Limit::new(400, 60_000, 10).unwrap(),
    ];
    let policy = Arc::new(Policy::new("mixed", limits).unwrap());
    // One namespace: 8 instances sharing the counters, each with its own
    // connections.
    let options = common::memcached_options(vec![proxy.addr.clone()]);
    let mut limiters = Vec::new();
    for _ in 0..8 {
        let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
        limiters.push(limiter(store, &clock, true));
    }
    let commands_before = memcached.item_commands();
    let tasks: Vec<_> = (0..256)
        .map(|index| {
            let (limiter, policy) = (limiters[index % 8].clone(), policy.clone());
            let cost = 1 + (index as u64 * 7) % 4;
            tokio::spawn(async move { (cost, limiter.check("hot", &policy, cost).await.unwrap()) })
        })
        .collect();
    let mut decisions = Vec::new();
    for task in tasks {
        decisions.push(task.await.unwrap());
    }
    let commands = memcached.item_commands() - commands_before;
    // What each check saw before itself, under each limit: its estimate
    // less its own cost when counted (one instant, nothing in older
    // buckets: the estimate is the current count). The two limits count
    // in two counters, each added to atomically but not together: another
    // instance's addition can land between a check's two, so the two
    // counts a check saw may differ. Each limit is replayed on its own.
    let caps = [300u64, 400];
    let before_under = |limit: usize, cost: u64, decision: &Decision| {
        let estimate = decision.limits[limit].estimate.as_f64() as u64;
        if decision.counted {
            estimate - cost
        } else {
            estimate
        }
    };
    for (cost, decision) in &decisions {
        if !decision.allowed {
            assert!(
                (0..2).any(|limit| before_under(limit, *cost, decision) + cost > caps[limit]),
                "refused with cost {cost} though every limit had room in what it saw: {decision:?}"
            );
        }
    }
    // The short limit is the one that refuses: replayed in the order the
    // store applied its counter's additions (the order of what the checks
    // saw; at the same count, refused ones first: they left it as it was).
    let mut seen: Vec<(u64, u64, bool)> = decisions
        .iter()
        .map(|(cost, decision)| (before_under(0, *cost, decision), *cost, decision.allowed))
        .collect();
    seen.sort_by_key(|&(before, _, allowed)| (before, allowed));
    let mut running = 0;
    for &(before, cost, allowed) in &seen {
        if allowed {
            assert_eq!(
                before, running,
                "an admitted check saw another count than the replay"
            );
            assert!(running + cost <= 300);
            running += cost;
        } else {
            assert!(
                before >= running,
                "a refused check saw fewer than were admitted"
            );
        }
    }
    let admitted: u64 = decisions
        .iter()
        .filter(|(_, d)| d.allowed)
        .map(|(cost, _)| cost)
        .sum();
    let total: u64 = decisions.iter().map(|(cost, _)| cost).sum();
    let coalesced: u64 = limiters
        .iter()
        .map(|limiter| limiter.metrics().coalesced_checks)
        .sum();
    println!(
        "256 checks (costs 1-4, {total} in all) on one key from 8 instances: {admitted} admitted \
         of a limit of 300; {commands} memcached commands ({:.2} per check), {} round trips, \
         {coalesced} checks coalesced",
        commands as f64 / 256.0,
        proxy.round_trips()
    );
    assert!(admitted <= 300 && admitted > 300 - 4, "{admitted}");
}

/// A store that stops answering while 64 checks of one key are in flight:
/// the checks gathered behind the exchange have no timer of their own, and
/// are answered within the timeout all the same, by the failure mode. The
/// exchange they wait behind ends at its leader's deadline, which comes
/// first (the leader arrived first), and the next leader's within its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_checks_are_answered_within_the_timeout_when_the_store_stalls() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    /// Scheduling on a busy 2-core machine; a check that waited for the
    /// stalled replies would take the whole stall, 5 s.
    const SLACK: Duration = Duration::from_millis(300);
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 5 * 60_000);
    let store = answering_store(&proxy).await;
    let limiter = Arc::new(
        Limiter::builder(store)
            .clock(clock)
            .timeout(TIMEOUT)
            .failure_mode(slidegate::FailureMode::Allow)
            .build(),
    );
    let policy = hourly(1_000);
    proxy.delay_replies(5_000);
    let checks: Vec<_> = (0..64)
        .map(|_| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let decision = limiter.check("stalled", &policy, 1).await.unwrap();
                (decision, started.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for check in checks {
        let (decision, took) = check.await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        slowest = slowest.max(took);
    }
    println!(
        "slowest of 64 checks on a stalled store: {slowest:?}, {} gathered",
        limiter.metrics().coalesced_checks
    );
    assert!(
        limiter.metrics().coalesced_checks > 0,
        "the checks must gather to mean anything"
    );
    assert!(
        slowest <= TIMEOUT + SLACK,
        "a check took {slowest:?}, past its {TIMEOUT:?} timeout"
    );
}

/// A store slower than half the timeout (replies 200 ms late, a 300 ms
/// timeout): a check that gathered behind an exchange is never handed to
/// the failure mode before its own deadline, and the batch's exchange has
/// the time of its latest check. It used to be run by the batch's first
/// check, which had waited longest, within that check's deadline: the
/// exchange ran out, and every check of the batch fell back, the last one
/// after half of its time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_on_its_latest_deadline_and_no_check_falls_back_early() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let store = answering_store(&proxy).await;
    let limiter = Arc::new(
        Limiter::builder(store)
            .timeout(TIMEOUT)
            .failure_mode(slidegate::FailureMode::Deny)
            .build(),
    );
    let policy = hourly(1_000);
    proxy.delay_replies(200);
    let started = std::time::Instant::now();
    // The first leads at once; the second and third gather behind its
    // exchange, which ends at about 200 ms.
    let checks: Vec<_> = [0, 20, 150]
        .into_iter()
        .map(|at_ms| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until((started + Duration::from_millis(at_ms)).into()).await;
                let began = std::time::Instant::now();
                let outcome = limiter.check("slow", &policy, 1).await;
                (
                    at_ms,
                    outcome.map(|decision| decision.source),
                    began.elapsed(),
                )
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for check in checks {
        outcomes.push(check.await.unwrap());
    }
    println!(
        "{outcomes:?}; {} gathered",
        limiter.metrics().coalesced_checks
    );
    for (at_ms, outcome, took) in &outcomes {
        assert!(
            outcome.is_ok() || *took >= TIMEOUT - Duration::from_millis(5),
            "the check of {at_ms} ms fell back after {took:?}, before its {TIMEOUT:?}"
        );
    }
    let (_, last, _) = &outcomes[2];
    assert!(
        matches!(last, Ok(Source::Store)),
        "the latest check, with time for an exchange after the first, fell back: {outcomes:?}"
    );
}
