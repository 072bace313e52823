//! One behaviour suite, run against every store: the in-memory store and a
//! real memcached started by the harness. Each behaviour is an `async fn`
//! generic over the store; `behaviour_suite!` makes a test of it per store.
//!
//! Time is a manual clock placed at known offsets from the start of today
//! (UTC), so bucket boundaries fall where the numbers below expect.

mod common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slidegate::{
    CheckError, Clock, FailureMode, Item, Limit, Limiter, ManualClock, Policy, Source, Store,
};

macro_rules! behaviour_suite {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(slidegate::MemoryStore::new()).await;
                }
            )*
        }
        mod memcached {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::common::memcached_store().await).await;
                }
            )*
        }
    };
}

behaviour_suite!(
    admits_up_to_the_limit_then_rejects,
    rejected_requests_are_not_counted,
    previous_bucket_is_weighted,
    sub_buckets_and_reports_follow_the_worked_example,
    several_limits_count_only_if_all_admit,
    peek_counts_nothing,
    report_counts_even_over_the_limit,
    smaller_cost_passes_where_a_larger_one_was_refused,
    cost_above_every_chance_is_refused_and_not_counted,
    counter_identity_is_scope_key_window_precision,
    any_key_maps_to_its_own_counters,
    invalid_keys_and_costs_are_errors,
    near_cache_answers_hot_rejects_without_the_store,
    concurrent_checks_admit_exactly_the_limit,
    windows_over_thirty_days_keep_their_counts,
    a_check_whose_bucket_ends_in_flight_is_decided_again,
    a_request_that_counted_nothing_is_not_decided_again_at_a_boundary,
    a_client_that_keeps_asking_gets_one_less_than_the_limit_after_its_first_window,
);

const MINUTE: u64 = 60_000;

fn limit(limit: u64, window_ms: u64, precision: u32) -> Limit {
    Limit::new(limit, window_ms, precision).unwrap()
}

fn policy(name: &str, limits: &[Limit]) -> Policy {
    Policy::new(name, limits.to_vec()).unwrap()
}

/// A limiter on `store` with a manual clock `offset_ms` into today.
fn limiter<S: Store>(store: S, offset_ms: u64) -> (Limiter<S>, ManualClock) {
    let clock = ManualClock::new(common::today_ms() + offset_ms);
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .build();
    (limiter, clock)
}

fn estimates(decision: &slidegate::Decision) -> Vec<f64> {
    decision
        .limits
        .iter()
        .map(|state| state.estimate.as_f64())
        .collect()
}

async fn admits_up_to_the_limit_then_rejects<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 30_000);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for expected_remaining in (0..5).rev() {
        let decision = limiter.check("client-42", &api, 1).await.unwrap();
        assert!(decision.allowed && decision.counted);
        assert_eq!(decision.source, Source::Store);
        assert_eq!(decision.remaining(), expected_remaining);
        assert_eq!(decision.retry_after_ms, Some(0));
    }
    let rejected = limiter.check("client-42", &api, 1).await.unwrap();
    assert!(!rejected.allowed && !rejected.counted);
    assert_eq!(rejected.source, Source::Store);
    assert_eq!(estimates(&rejected), [5.0]);
    // Half a minute in: the 5 become the previous bucket in 30 s and must
    // decay to 4, 12 s into that minute.
    assert_eq!(rejected.retry_after_ms, Some(42_000));
}

async fn rejected_requests_are_not_counted<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 30_000);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for _ in 0..5 {
        assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    }
    for _ in 0..20 {
        assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
    }
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [5.0]);

    clock.advance(Duration::from_millis(42_000 - 1));
    assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
    clock.advance(Duration::from_millis(1));
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert!(decision.allowed, "waiting exactly retry_after_ms admits");
    assert_eq!(decision.source, Source::Store);
    assert_eq!(estimates(&decision), [5.0]);
}

async fn previous_bucket_is_weighted<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 0);
    let api = policy("api", &[limit(10, MINUTE, 1)]);
    for _ in 0..4 {
        limiter.check("k", &api, 1).await.unwrap();
    }
    // A quarter into the next minute, the 4 weigh 3.
    clock.advance(Duration::from_millis(MINUTE + 15_000));
    let decision = limiter.peek("k", &api, 1).await.unwrap();
    assert_eq!(estimates(&decision), [3.0]);
    assert_eq!(decision.remaining(), 7);
    let decision = limiter.check("k", &api, 7).await.unwrap();
    assert!(decision.allowed);
    assert_eq!(estimates(&decision), [10.0]);
    // Two windows on, nothing is left.
    clock.advance(Duration::from_millis(2 * MINUTE));
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [0.0]);
}

async fn sub_buckets_and_reports_follow_the_worked_example<S: Store>(store: S) {
    // 100 per 10 s in 5 sub-buckets of 2 s: counts 20, 10, 10, 10, 10, 30.
    let (limiter, clock) = limiter(store, 0);
    let api = policy("api", &[limit(100, 10_000, 5)]);
    for cost in [20, 10, 10, 10, 10] {
        let report = limiter.report("k", &api, cost).await.unwrap();
        assert!(report.allowed && report.counted);
        clock.advance(Duration::from_millis(2_000));
    }
    limiter.report("k", &api, 30).await.unwrap();
    // 30% into the current sub-bucket: 20 * 0.7 + 40 + 30 = 84.
    clock.advance(Duration::from_millis(600));
    assert_eq!(
        estimates(&limiter.peek("k", &api, 1).await.unwrap()),
        [84.0]
    );
    let refused = limiter.check("k", &api, 17).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_ms, Some(100));
    let admitted = limiter.check("k", &api, 16).await.unwrap();
    assert!(admitted.allowed);
    assert_eq!(estimates(&admitted), [100.0]);
}

async fn several_limits_count_only_if_all_admit<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 500);
    let api = policy("api", &[limit(2, 1_000, 1), limit(3, MINUTE, 1)]);
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(
        estimates(&refused),
        [2.0, 2.0],
        "the minute limit did not count it"
    );

    clock.advance(Duration::from_millis(2_000));
    let third = limiter.check("k", &api, 1).await.unwrap();
    assert!(third.allowed);
    assert_eq!(estimates(&third), [1.0, 3.0]);
    clock.advance(Duration::from_millis(2_000));
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed, "now the minute limit refuses");
    assert_eq!(estimates(&refused), [0.0, 3.0]);
}

async fn peek_counts_nothing<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(3, MINUTE, 1)]);
    for _ in 0..10 {
        let peek = limiter.peek("k", &api, 1).await.unwrap();
        assert!(peek.allowed && !peek.counted);
        assert_eq!(estimates(&peek), [0.0]);
    }
    assert_eq!(
        estimates(&limiter.check("k", &api, 3).await.unwrap()),
        [3.0]
    );
    let peek = limiter.peek("k", &api, 1).await.unwrap();
    assert!(!peek.allowed, "a peek gives the check's verdict");
    assert_eq!(peek.retry_after_ms, Some(MINUTE + MINUTE / 3));
}

async fn report_counts_even_over_the_limit<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(3, MINUTE, 1)]);
    let report = limiter.report("k", &api, 2).await.unwrap();
    assert!(report.allowed && report.counted);
    let report = limiter.report("k", &api, 5).await.unwrap();
    assert!(
        !report.allowed && report.counted,
        "counted, and says the counts are over"
    );
    assert_eq!(estimates(&report), [7.0]);
    assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
}

async fn smaller_cost_passes_where_a_larger_one_was_refused<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(10, MINUTE, 1)]);
    assert!(limiter.check("k", &api, 8).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 5).await.unwrap();
    assert_eq!((refused.allowed, refused.source), (false, Source::Store));
    let refused = limiter.check("k", &api, 5).await.unwrap();
    assert_eq!(
        (refused.allowed, refused.source),
        (false, Source::NearCache)
    );
    let admitted = limiter.check("k", &api, 2).await.unwrap();
    assert_eq!((admitted.allowed, admitted.source), (true, Source::Store));
    assert_eq!(estimates(&admitted), [10.0]);
}

async fn cost_above_every_chance_is_refused_and_not_counted<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(10, MINUTE, 1), limit(3, 1_000, 1)]);
    let refused = limiter.check("k", &api, 4).await.unwrap();
    assert!(!refused.allowed && !refused.counted);
    assert_eq!(refused.retry_after_ms, None);
    assert_eq!(
        estimates(&limiter.peek("k", &api, 1).await.unwrap()),
        [0.0, 0.0]
    );
}

async fn counter_identity_is_scope_key_window_precision<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let five = limit(5, MINUTE, 1);
    limiter
        .check("k", &policy("api", &[five]), 3)
        .await
        .unwrap();
    let seen = |policy: Policy, key: &'static str| {
        let limiter = &limiter;
        async move { estimates(&limiter.peek(key, &policy, 1).await.unwrap())[0] }
    };
    // Raising the limit keeps the counts.
    assert_eq!(seen(policy("api", &[limit(50, MINUTE, 1)]), "k").await, 3.0);
    // Another key, scope, window or precision is another counter.
    assert_eq!(seen(policy("api", &[five]), "k2").await, 0.0);
    assert_eq!(seen(policy("other", &[five]), "k").await, 0.0);
    assert_eq!(seen(Policy::inline(vec![five]).unwrap(), "k").await, 0.0);
    assert_eq!(
        seen(policy("api", &[limit(5, 2 * MINUTE, 1)]), "k").await,
        0.0
    );
    assert_eq!(seen(policy("api", &[limit(5, MINUTE, 2)]), "k").await, 0.0);
    // Inline limits share the `inline` scope across requests.
    limiter
        .check("k", &Policy::inline(vec![limit(9, MINUTE, 1)]).unwrap(), 2)
        .await
        .unwrap();
    assert_eq!(seen(Policy::inline(vec![five]).unwrap(), "k").await, 2.0);
}

async fn any_key_maps_to_its_own_counters<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let once = policy("api", &[limit(1, MINUTE, 1)]);
    limiter.check("victim", &once, 1).await.unwrap();
    let long = "x".repeat(1024);
    let keys = [
        "a b",
        "a\r\nb",
        "a\nb",
        "flush_all",
        "k\r\nflush_all\r\n",
        "mg victim v\r\n",
        "ключ 🔑",
        "\0",
        "a:b:c",
        "*",
        long.as_str(),
    ];
    for key in keys {
        assert!(
            limiter.check(key, &once, 1).await.unwrap().allowed,
            "{key:?}"
        );
    }
    for key in keys {
        assert!(
            !limiter.check(key, &once, 1).await.unwrap().allowed,
            "{key:?}"
        );
    }
    assert_eq!(
        estimates(&limiter.peek("victim", &once, 1).await.unwrap()),
        [1.0]
    );
    assert_eq!(
        estimates(&limiter.peek("a b ", &once, 1).await.unwrap()),
        [0.0]
    );
}

async fn invalid_keys_and_costs_are_errors<S: Store>(store: S) {
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    let too_long = "x".repeat(1025);
    for key in ["", too_long.as_str()] {
        assert!(matches!(
            limiter.check(key, &api, 1).await,
            Err(CheckError::InvalidKey(_))
        ));
    }
    for cost in [0, slidegate::policy::MAX_AMOUNT + 1] {
        assert!(matches!(
            limiter.check("k", &api, cost).await,
            Err(CheckError::InvalidCost(_))
        ));
    }
}

async fn near_cache_answers_hot_rejects_without_the_store<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 30_000);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for _ in 0..6 {
        limiter.check("hot", &api, 1).await.unwrap();
    }
    let calls = limiter.metrics().store_calls;
    for _ in 0..100 {
        let decision = limiter.check("hot", &api, 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.source),
            (false, Source::NearCache)
        );
        assert_eq!(decision.retry_after_ms, Some(42_000));
    }
    assert_eq!(
        limiter.metrics().store_calls,
        calls,
        "hot rejects touched the store"
    );
    assert_eq!(limiter.metrics().near_cache_hits(), 100);
    // Other keys and peeks of other policies are not affected.
    assert!(limiter.check("cold", &api, 1).await.unwrap().allowed);
    // When the remembered counts no longer reject, the store decides again.
    clock.advance(Duration::from_millis(42_000));
    let decision = limiter.check("hot", &api, 1).await.unwrap();
    assert_eq!((decision.allowed, decision.source), (true, Source::Store));
}

async fn concurrent_checks_admit_exactly_the_limit<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 30_000);
    let limiter = std::sync::Arc::new(limiter);
    let api = std::sync::Arc::new(policy("api", &[limit(5, MINUTE, 1)]));
    let tasks = common::spawn_checks(&limiter, "k", &api, 100);
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap().allowed);
    }
    assert_eq!(admitted, 5);
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [5.0]);
    // The 95 rejects each saw the others' increments before their rollbacks;
    // the near-cache must still hold no more than the 5 that count, or it
    // would refuse this request, which is exactly on time.
    clock.advance(Duration::from_millis(42_000));
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert_eq!((decision.allowed, decision.source), (true, Source::Store));
}

async fn windows_over_thirty_days_keep_their_counts<S: Store>(store: S) {
    // A bucket of a 40-day window must live 80 days: Memcached takes such a
    // TTL only as an absolute time, and a relative one would expire at once.
    let (limiter, _) = limiter(store, 0);
    let api = policy("api", &[limit(2, 40 * 86_400_000, 1)]);
    assert!(limiter.check("k", &api, 2).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed, "the counter vanished");
    assert_eq!(refused.source, Source::Store);
}

/// A clock that answers the given instants in turn, then its last one for
/// ever: it scripts where each of a check's clock reads falls.
#[derive(Clone)]
struct Scripted(Arc<Mutex<VecDeque<u64>>>);

impl Scripted {
    fn new(instants: &[u64]) -> Scripted {
        Scripted(Arc::new(Mutex::new(instants.iter().copied().collect())))
    }
}

impl Clock for Scripted {
    fn now_ms(&self) -> u64 {
        let mut instants = self.0.lock().unwrap();
        if instants.len() > 1 {
            instants.pop_front().unwrap()
        } else {
            instants[0]
        }
    }
}

/// A check reads the clock before its counters go out and again when they
/// answer. If the second read is in a later bucket, another instance may
/// have read the first bucket without this check's increment: the
/// increment is taken back and the check decided again in the new bucket.
/// A check that crosses a boundary on each of its 3 attempts is left to the
/// failure mode: refused with nothing left counted under deny, admitted
/// and counted under allow and local.
async fn a_check_whose_bucket_ends_in_flight_is_decided_again<S: Store>(store: S) {
    let store = Arc::new(store);
    let start = common::today_ms() + 10_000;
    let one_per_second = policy("edge", &[limit(1, 1_000, 1)]);
    let limiter_in = |mode: FailureMode, instants: &[u64]| {
        Limiter::builder(store.clone())
            .clock(Scripted::new(instants))
            .failure_mode(mode)
            .timeout(Duration::from_secs(2))
            .build()
    };
    let limiter_at = |instants: &[u64]| limiter_in(FailureMode::Deny, instants);
    // Every attempt's answer comes in a later second than its read (the
    // clock is read once for each attempt and once for each answer).
    let slow = [
        start + 2_999,
        start + 3_000,
        start + 3_000,
        start + 4_000,
        start + 4_000,
        start + 5_000,
    ];
    let check_or_check_all = async |limiter: &Limiter<Arc<S>>, key: &str, together: bool| {
        if together {
            let item = Item {
                key,
                policy: &one_per_second,
                cost: 1,
            };
            limiter
                .check_all(&[item])
                .await
                .map(|mut all| all.remove(0))
        } else {
            limiter.check(key, &one_per_second, 1).await
        }
    };

    for together in [false, true] {
        let key = if together { "all" } else { "one" };
        // Read at the last ms of a second; answered in the next one, and
        // the increment taken back by 1,001.
        let limiter = limiter_at(&[start + 999, start + 1_000, start + 1_001]);
        let decision = if together {
            let item = Item {
                key,
                policy: &one_per_second,
                cost: 1,
            };
            limiter.check_all(&[item]).await.unwrap().remove(0)
        } else {
            limiter.check(key, &one_per_second, 1).await.unwrap()
        };
        assert!(decision.allowed && decision.counted, "{key}");
        // Decided again at the clock's reading after the take-back, not at
        // the crossing's, which that round trip left behind.
        assert_eq!(decision.decided_at_ms, start + 1_001, "{key}");
        // Counted once, in the new second only: had the first increment
        // stayed, the older second would weigh it in full (1 + 1).
        let now = limiter.peek(key, &one_per_second, 1).await.unwrap();
        assert_eq!(estimates(&now), vec![1.0], "{key}");
    }

    // Under deny: refused as for a timeout, nothing left counted.
    for together in [false, true] {
        let key = if together { "slow-all" } else { "slow-one" };
        let limiter = limiter_at(&slow);
        match check_or_check_all(&limiter, key, together).await {
            Err(CheckError::StoreUnavailable(error)) => {
                assert!(error.to_string().contains("3 attempts"), "{key}: {error}")
            }
            other => panic!("{key}: the failure mode (deny) decides: {other:?}"),
        }
        // The operator sees a store too slow to decide with, as for a
        // timeout: one failure among the store's errors, though each of its
        // 6 calls (3 checks, 3 rollbacks) was answered.
        let metrics = limiter.metrics();
        assert_eq!((metrics.store_errors, metrics.store_calls), (1, 6), "{key}");
        // Nothing stayed counted: at 5,000 the second before (the third
        // attempt's) and this one are empty, so a check is admitted alone.
        let after = limiter.check(key, &one_per_second, 1).await.unwrap();
        assert!(after.allowed, "{key}");
        assert_eq!(estimates(&after), vec![1.0], "{key}");
    }

    // Under allow and local, the last attempt's admission stands, counted:
    // the formula admitted it at its instant and only its increment came
    // late. Admitting it uncounted, as for a store that failed, would let
    // sub-buckets shorter than the store's round trip limit nothing.
    for mode in [FailureMode::Allow, FailureMode::Local] {
        for together in [false, true] {
            let key = format!("slow-{mode:?}-{together}");
            let limiter = limiter_in(mode, &slow);
            let decision = check_or_check_all(&limiter, &key, together).await.unwrap();
            assert!(decision.allowed && decision.counted, "{key}: {decision:?}");
            assert_eq!(decision.source, Source::Fallback, "{key}");
            assert_eq!(decision.decided_at_ms, start + 4_000, "{key}");
            // One failure, and 5 calls: 3 checks, the 2 take-backs before
            // the last attempt.
            let metrics = limiter.metrics();
            assert_eq!((metrics.store_errors, metrics.store_calls), (1, 5), "{key}");
            // At 5,000 the second before holds it in full: the next is over.
            let after = limiter.check(&key, &one_per_second, 1).await.unwrap();
            assert!(!after.allowed, "{key}");
            assert_eq!(after.source, Source::Store, "{key}");
            assert_eq!(estimates(&after), vec![1.0], "{key}");
        }
    }
}

/// Only a request that counted something can have raced a boundary. A
/// `check_all` whose items the near-cache refused counted nothing: however
/// the clock moves while it is answered, the near-cache's refusal stands.
async fn a_request_that_counted_nothing_is_not_decided_again_at_a_boundary<S: Store>(store: S) {
    let minute = common::today_ms() / MINUTE * MINUTE + MINUTE;
    let half = minute + 30_000;
    // Three checks read the clock at `half` (admitted: two reads; refused:
    // one). Then every later read finds a new minute.
    let clock = Scripted::new(&[
        half,
        half,
        half,
        half,
        minute + MINUTE,
        minute + MINUTE,
        minute + 2 * MINUTE,
        minute + 2 * MINUTE,
        minute + 3 * MINUTE,
    ]);
    let limiter = Limiter::builder(store)
        .clock(clock)
        .failure_mode(FailureMode::Deny)
        .timeout(Duration::from_secs(2))
        .build();
    let once = policy("once", &[limit(1, MINUTE, 1)]);
    assert!(limiter.check("k", &once, 1).await.unwrap().allowed);
    let refused = limiter.check("k", &once, 1).await.unwrap();
    assert_eq!((refused.allowed, refused.source), (false, Source::Store));

    let item = Item {
        key: "k",
        policy: &once,
        cost: 1,
    };
    let decisions = limiter.check_all(&[item]).await.unwrap();
    assert_eq!(decisions.len(), 1);
    assert!(!decisions[0].allowed && !decisions[0].counted);
    assert_eq!(decisions[0].source, Source::NearCache);
    assert_eq!(limiter.metrics().store_errors, 0);
}

/// The README's word to a client that keeps asking: at precision 1 it gets
/// the limit in its first window and `limit - 1` in each one after it. The
/// current bucket's count reaches the limit only once the previous bucket
/// weighs nothing, and with `1 - f` (DESIGN.md) that is never inside the
/// bucket. At higher precisions the oldest sub-bucket is sometimes empty
/// when the last unit is asked for: `limit - 1` or the limit.
async fn a_client_that_keeps_asking_gets_one_less_than_the_limit_after_its_first_window<
    S: Store,
>(
    store: S,
) {
    let store = Arc::new(store);
    for (per_second, precision) in [(5, 1), (120, 1), (10, 5), (120, 10)] {
        let (limiter, clock) = limiter(store.clone(), 20_000);
        let start = clock.now_ms();
        let every_second = policy("keeps-asking", &[limit(per_second, 1_000, precision)]);
        let key = format!("{per_second}-{precision}");
        let mut admitted = [0u64; 5];
        for ms in (0..5_000).step_by(2) {
            clock.set(start + ms);
            if limiter.check(&key, &every_second, 1).await.unwrap().allowed {
                admitted[(ms / 1_000) as usize] += 1;
            }
        }
        let what = format!("{per_second} per second at precision {precision}: {admitted:?}");
        assert_eq!(admitted[0], per_second, "{what}");
        for later in &admitted[1..] {
            if precision == 1 {
                assert_eq!(*later, per_second - 1, "{what}");
            } else {
                assert!((per_second - 1..=per_second).contains(later), "{what}");
            }
        }
    }
}
