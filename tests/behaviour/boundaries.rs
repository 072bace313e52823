//! Bucket boundaries crossed while a request is answered, on a scripted
//! clock: a check whose bucket ends in flight is decided again, and a
//! request that counted nothing is not.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use slidegate::{CheckError, Clock, FailureMode, Item, Limiter, Source, Store};

use super::{MINUTE, Through, estimates, limit, policy};
use crate::common;

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
pub(super) async fn a_check_whose_bucket_ends_in_flight_is_decided_again<S: Store>(
    store: S,
    through: Through,
) {
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

    for together in [matches!(through, Through::CheckAll)] {
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
    for together in [matches!(through, Through::CheckAll)] {
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
        for together in [matches!(through, Through::CheckAll)] {
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
/// (A `check_all` by name: run for both entry points all the same.)
pub(super) async fn a_request_that_counted_nothing_is_not_decided_again_at_a_boundary<S: Store>(
    store: S,
    _: Through,
) {
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
