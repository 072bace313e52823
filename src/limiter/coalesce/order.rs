//! Deciding a batch: each check in arrival order, as if it had come
//! alone after the ones before it. Pure: counts, costs and time in,
//! verdicts out.

use smallvec::SmallVec;

use super::super::counters::Counts;
use crate::policy::Limit;
use crate::window::{self, Counting, Verdict};

/// A batch's verdicts in arrival order; most batches are one check, whose
/// verdict needs no allocation of its own.
pub(super) type Verdicts = SmallVec<[Verdict; 1]>;

/// Decide checks of `costs`, in that order, against each limit's counts
/// before all of them (`counts`, oldest bucket first), at `now_ms`: each
/// exactly as if it had come alone after the ones before it. A counted
/// check adds its cost to the current bucket of every limit for the next.
/// Returns each verdict, and the sum of the costs counted.
pub(super) fn decide_in_order(
    limits: &[Limit],
    counts: &[Counts],
    now_ms: u64,
    costs: impl IntoIterator<Item = u64>,
    counting: Counting,
) -> (Verdicts, u64) {
    let mut costs = costs.into_iter().peekable();
    let mut verdicts = Verdicts::new();
    let mut counted = 0u64;
    // The first check sees the counts as they are: a lone check (most
    // batches) is decided without copying them, which cost more than its
    // decision (callgrind: 780 instructions of cloning a batch of one).
    let Some(first) = costs.next() else {
        return (verdicts, counted);
    };
    let verdict = window::decide(limits, counts, now_ms, first, counting);
    if verdict.counted {
        counted = first;
    }
    verdicts.push(verdict);
    if costs.peek().is_none() {
        return (verdicts, counted);
    }
    let mut running: SmallVec<[Counts; 2]> = counts.iter().cloned().collect();
    add_to_current(&mut running, counted);
    for cost in costs {
        let verdict = window::decide(limits, &running, now_ms, cost, counting);
        if verdict.counted {
            counted = counted.saturating_add(cost);
            add_to_current(&mut running, cost);
        }
        verdicts.push(verdict);
    }
    (verdicts, counted)
}

/// A counted check's cost, in the current bucket of every limit.
fn add_to_current(running: &mut [Counts], cost: u64) {
    for counts in running {
        if let Some(current) = counts.last_mut() {
            *current = current.saturating_add(cost);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn counts(values: &[u64]) -> Counts {
        values.iter().copied().collect()
    }

    #[test]
    fn in_order_each_check_sees_the_ones_admitted_before_it() {
        let limits = [Limit::new(5, 60_000, 1).unwrap()];
        let now = 1_000_000 * 60_000 + 30_000;
        // Nothing before; 7 checks of cost 1: the first 5 admitted.
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 0])],
            now,
            [1; 7],
            Counting::IfAdmitted,
        );
        let allowed: Vec<bool> = verdicts.iter().map(|verdict| verdict.allowed).collect();
        assert_eq!(allowed, [true, true, true, true, true, false, false]);
        assert_eq!(counted, 5);
        // A refused check's wait counts only what was admitted (5), not
        // the 7 added together.
        let alone = window::decide(&limits, &[counts(&[0, 5])], now, 1, Counting::IfAdmitted);
        assert_eq!(verdicts[5].retry_after_ms, alone.retry_after_ms);
        assert_eq!(verdicts[6].retry_after_ms, alone.retry_after_ms);
    }

    #[test]
    fn a_refused_big_cost_leaves_room_for_a_small_one_after_it() {
        let limits = [Limit::new(10, 60_000, 1).unwrap()];
        let now = 60_000 * 7;
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 6])],
            now,
            [5, 4, 1],
            Counting::IfAdmitted,
        );
        let allowed: Vec<bool> = verdicts.iter().map(|verdict| verdict.allowed).collect();
        assert_eq!(allowed, [false, true, false]);
        assert_eq!(counted, 4);
    }

    #[test]
    fn reports_count_everything_and_peeks_nothing() {
        let limits = [Limit::new(2, 1_000, 1).unwrap()];
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 0])],
            5_000,
            [1, 1, 1],
            Counting::Always,
        );
        assert_eq!(counted, 3);
        assert!(
            !verdicts[2].allowed,
            "a report says the counts are past the limit"
        );
        let (verdicts, counted) =
            decide_in_order(&limits, &[counts(&[0, 1])], 5_000, [1, 1], Counting::Never);
        assert_eq!(counted, 0);
        assert!(verdicts.iter().all(|verdict| verdict.allowed));
    }

    proptest! {
        /// Deciding a batch in order is deciding each check alone, one
        /// after the other, each seeing the counts the ones before it left:
        /// several limits, precision k, costs above 1.
        #[test]
        fn a_batch_decides_as_its_checks_one_by_one(
            costs in proptest::collection::vec(1u64..6, 1..40),
            short in 1u64..30,
            long in 1u64..80,
            older in proptest::collection::vec(0u64..20, 4),
            current in 0u64..20,
            offset in 0u64..10_000,
        ) {
            let limits = [
                Limit::new(short, 10_000, 1).unwrap(),
                Limit::new(long, 60_000, 3).unwrap(),
            ];
            let now = 600_000 * 10 + offset;
            let start = [counts(&[older[0], current]), counts(&[older[1], older[2], older[3], current])];
            let (verdicts, counted) =
                decide_in_order(&limits, &start, now, costs.iter().copied(), Counting::IfAdmitted);
            let mut state = start.clone();
            let mut total = 0;
            for (cost, batched) in costs.iter().zip(&verdicts) {
                let alone = window::decide(&limits, &state, now, *cost, Counting::IfAdmitted);
                prop_assert_eq!(&alone, batched);
                if alone.counted {
                    total += cost;
                    for counts in &mut state {
                        *counts.last_mut().unwrap() += cost;
                    }
                }
            }
            prop_assert_eq!(counted, total);
        }
    }
}
