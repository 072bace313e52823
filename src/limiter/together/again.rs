//! One more try for a refused request whose take-back left room for every
//! item.
//!
//! Each item's counter is added to atomically, but not together with the
//! others', so concurrent requests of several items read each other's
//! additions before those are taken back: in a burst, the requests that
//! drew the first places of one limit can be refused by another's, and
//! the burst admits fewer than its smallest limit. The values a take-back
//! returns are the counters just after it. If those would admit the
//! request, what refused it were additions that have since gone, and it
//! goes once more. Sound: the new try is decided by its own atomic
//! additions, as any request is. Once: the tries of one burst still race
//! each other, and erring towards refusing is the documented trade-off.

use super::group::Group;
use super::{Counts, Item};
use crate::limiter::counters::CountsByLimit;
use crate::policy::Limit;
use crate::window::{self, Counting};

/// Whether the counts a refused request's take-back left would admit every
/// item. `after`, per group: each current counter's value after the
/// take-back, when known (a group whose take-back failed: no).
pub(super) fn room_after_take_back(
    items: &[Item<'_>],
    groups: &[Group],
    counts_by_group: &[CountsByLimit],
    after: &[Option<Vec<Option<u64>>>],
    now_ms: u64,
) -> bool {
    groups.len() == after.len()
        && groups
            .iter()
            .zip(counts_by_group)
            .zip(after)
            .all(|((group, counts), after)| {
                let Some(after) = after else {
                    return false;
                };
                let mut currents = after.iter().copied();
                group.split(items, counts).all(|(index, counts)| {
                    let item = items[index];
                    let limits = item.policy.limits();
                    let currents: Vec<Option<u64>> = currents.by_ref().take(limits.len()).collect();
                    admits_with(limits, counts, &currents, now_ms, item.cost)
                })
            })
}

/// Whether `limits` admit `cost` with each limit's current count replaced
/// by the one in `currents` (all known, one per limit).
fn admits_with(
    limits: &[Limit],
    counts: &[Counts],
    currents: &[Option<u64>],
    now_ms: u64,
    cost: u64,
) -> bool {
    if counts.len() != limits.len() || currents.len() != limits.len() {
        return false;
    }
    let mut now: Vec<Counts> = Vec::with_capacity(limits.len());
    for (counts, current) in counts.iter().zip(currents) {
        let (Some(current), Some(_)) = (current, counts.last()) else {
            return false;
        };
        let mut counts = counts.clone();
        if let Some(last) = counts.last_mut() {
            *last = *current;
        }
        now.push(counts);
    }
    window::decide(limits, &now, now_ms, cost, Counting::IfAdmitted).allowed
}

#[cfg(test)]
mod tests {
    use smallvec::smallvec;

    use super::*;
    use crate::limiter::together::group::groups;
    use crate::policy::Policy;

    const MID_MINUTE: u64 = 1_700_000_040_000 + 30_000;

    fn counts(values: &[u64]) -> Counts {
        values.iter().copied().collect()
    }

    /// 5 a minute, nothing before this minute: 4 counted leaves room for
    /// one, 5 for none; an unknown value (a take-back that failed) or a
    /// missing one never gives room.
    #[test]
    fn the_counts_after_a_take_back_decide_the_room() {
        let limits = [Limit::new(5, 60_000, 1).unwrap()];
        let before = [counts(&[0, 9])];
        let at = |current: Option<u64>| admits_with(&limits, &before, &[current], MID_MINUTE, 1);
        assert!(at(Some(4)));
        assert!(!at(Some(5)));
        assert!(!at(None));
        assert!(!admits_with(&limits, &before, &[], MID_MINUTE, 1));
        // The older bucket still weighs: 6 in the last minute, half gone.
        let weighed = [counts(&[6, 9])];
        assert!(admits_with(&limits, &weighed, &[Some(1)], MID_MINUTE, 1));
        assert!(!admits_with(&limits, &weighed, &[Some(2)], MID_MINUTE, 1));
    }

    /// A request of `a` (5 a minute) and `b` (3): tried again only when
    /// both would admit it after the take-back.
    #[test]
    fn every_item_must_have_room() {
        let a = Policy::new("a", vec![Limit::new(5, 60_000, 1).unwrap()]).unwrap();
        let b = Policy::new("b", vec![Limit::new(3, 60_000, 1).unwrap()]).unwrap();
        let items = [
            Item {
                key: "k",
                policy: &a,
                cost: 1,
            },
            Item {
                key: "k",
                policy: &b,
                cost: 1,
            },
        ];
        let groups = groups(
            &items,
            &[None, None],
            Counting::IfAdmitted,
            MID_MINUTE,
            None,
        );
        // Read while others' additions were in flight: a at 7, b at 2.
        let read: Vec<CountsByLimit> = vec![smallvec![counts(&[0, 7])], smallvec![counts(&[0, 2])]];
        let room = |a_after: Option<u64>, b_after: Option<u64>| {
            let after = [Some(vec![a_after]), Some(vec![b_after])];
            room_after_take_back(&items, &groups, &read, &after, MID_MINUTE)
        };
        assert!(room(Some(1), Some(2)), "the burst has gone from a");
        assert!(!room(Some(5), Some(2)), "a is still full");
        assert!(!room(Some(1), Some(3)), "b is full now");
        assert!(!room(None, Some(0)), "a's take-back went unanswered");
        let unanswered = [None, Some(vec![Some(0)])];
        assert!(!room_after_take_back(
            &items,
            &groups,
            &read,
            &unanswered,
            MID_MINUTE
        ));
    }
}
