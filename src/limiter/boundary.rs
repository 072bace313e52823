//! Checks that cross a bucket boundary while their counters are in flight.
//!
//! A check reads the clock, then its batch reaches the store some time
//! later. If the clock read falls just before a sub-bucket boundary and the
//! increment lands after another check, already past the boundary, read
//! that sub-bucket as an older one, the other check decided without it: at
//! the other check's instant the window holds more than the formula allows.
//! Found by the accuracy concurrency test (8 instances on one memcached,
//! issue 9): 2.88 requests beyond the formula in a 1 s bucket of 40.
//!
//! The cure costs one clock read per admitted check. After the counters
//! answer, the clock is read again; if it is still in the sub-bucket the
//! check counted in (for every limit), no check past the boundary can have
//! read that sub-bucket before the increment landed: such a check read the
//! clock (already past the boundary) before its read reached the store,
//! which was before our increment landed, which was before we read the
//! clock again. So the admission stands. Otherwise the increment is taken
//! back and the check decided again at the new instant, in the new bucket.
//!
//! This needs one clock for all instances, or clocks that agree (the
//! `memcached` clock source); a skew between instances is a window for the
//! same race. A check that crosses a boundary on every attempt meets
//! sub-buckets shorter than the store's round trip, where no retry makes
//! the decision exact; it is not retried without end but left to the
//! failure mode, and counted among the store's errors so the operator sees
//! it. `deny` refuses it (and takes its increment back), as for a store
//! that timed out. `allow` and `local` let its last admission stand,
//! counted ([`stands`]): the formula admitted it at its instant, and only
//! its increment may have come too late for a check past the boundary.
//! Admitting it uncounted instead, as for a store that failed, would make
//! such short sub-buckets limit nothing at all.

use super::{Decision, FailureMode, Source};
use crate::policy::Limit;
use crate::store::StoreError;

/// Attempts per check: the first, and two more for boundaries crossed.
const MOST_ATTEMPTS: u32 = 3;

/// What an admission that crossed a boundary calls for.
#[derive(Debug)]
pub(super) enum Crossing {
    /// Take its increments back and decide again at the clock's reading
    /// after the take-back, whose round trip moved time on too.
    Retry,
    /// Its last attempt, under `allow` or `local`: the admission stands,
    /// counted ([`stands`]). The error is the store's, for the metrics.
    Stands(StoreError),
    /// Its last attempt, under `deny`: take its increments back and let
    /// the failure mode refuse it with this error.
    Refused(StoreError),
}

/// Whether the admission of attempt number `attempt` (from 1), decided at
/// `decided_at_ms` under `limits`, stands now that the clock reads
/// `now_ms`: `None` if it does, otherwise what the crossing calls for
/// under `failure_mode`.
pub(super) fn recheck<'a>(
    limits: impl IntoIterator<Item = &'a Limit>,
    decided_at_ms: u64,
    now_ms: u64,
    attempt: u32,
    failure_mode: FailureMode,
) -> Option<Crossing> {
    if !crossed(limits, decided_at_ms, now_ms) {
        return None;
    }
    if attempt < MOST_ATTEMPTS {
        return Some(Crossing::Retry);
    }
    let error = StoreError::Overloaded(format!(
        "each of {MOST_ATTEMPTS} attempts took the store longer than a bucket boundary allowed"
    ));
    Some(match failure_mode {
        FailureMode::Deny => Crossing::Refused(error),
        FailureMode::Allow | FailureMode::Local => Crossing::Stands(error),
    })
}

/// An admission given up on after its last attempt, which the failure
/// mode lets stand: admitted and counted as the store decided it, marked as
/// the failure mode's.
pub(super) fn stands(decision: Decision) -> Decision {
    Decision {
        source: Source::Fallback,
        ..decision
    }
}

/// Whether, for any of `limits`, `now_ms` is no longer in the sub-bucket
/// that a decision at `decided_at_ms` counted in.
fn crossed<'a>(
    limits: impl IntoIterator<Item = &'a Limit>,
    decided_at_ms: u64,
    now_ms: u64,
) -> bool {
    limits.into_iter().any(|limit| {
        let window = limit.window();
        window.bucket_of(now_ms) != window.bucket_of(decided_at_ms)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_new_sub_bucket_of_some_limit_is_a_crossing() {
        let second = Limit::new(10, 1_000, 1).unwrap();
        let minute_by_tenths = Limit::new(100, 60_000, 10).unwrap();
        // Within the same second and the same 6 s sub-bucket.
        assert!(!crossed([&second, &minute_by_tenths], 12_000, 12_999));
        // A new second: the first limit's bucket changed.
        assert!(crossed([&second, &minute_by_tenths], 12_999, 13_000));
        // A new 6 s sub-bucket of the second limit only.
        assert!(crossed([&minute_by_tenths], 11_999, 12_000));
        assert!(!crossed([&minute_by_tenths], 12_000, 17_999));
        // A clock set back is a crossing too: the bucket differs.
        assert!(crossed([&second], 13_000, 12_999));
    }

    #[test]
    fn a_crossing_is_decided_again_until_the_last_attempt() {
        let second = Limit::new(10, 1_000, 1).unwrap();
        let deny = FailureMode::Deny;
        assert!(recheck([&second], 12_000, 12_999, 1, deny).is_none());
        assert!(matches!(
            recheck([&second], 12_999, 13_000, 1, deny),
            Some(Crossing::Retry)
        ));
        assert!(matches!(
            recheck([&second], 13_999, 14_000, 2, deny),
            Some(Crossing::Retry)
        ));
        let Some(Crossing::Refused(error)) = recheck([&second], 14_999, 15_000, 3, deny) else {
            panic!("deny refuses a check that crossed on every attempt");
        };
        assert!(error.to_string().contains("3 attempts"), "{error}");
        for mode in [FailureMode::Allow, FailureMode::Local] {
            assert!(
                matches!(
                    recheck([&second], 14_999, 15_000, 3, mode),
                    Some(Crossing::Stands(_))
                ),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn an_admission_let_stand_is_marked_as_the_failure_modes() {
        let second = Limit::new(10, 1_000, 1).unwrap();
        let verdict = crate::window::decide(
            &[second],
            &[[0, 3]],
            12_500,
            1,
            crate::window::Counting::IfAdmitted,
        );
        let decided = Decision::new(verdict, Source::Store);
        let stood = stands(decided.clone());
        // Counted and admitted as the store decided, but told apart in the
        // answer and the metrics: the store did not decide in time.
        assert_eq!(stood.source, Source::Fallback);
        assert_eq!(
            Decision {
                source: Source::Store,
                ..stood
            },
            decided
        );
    }
}
