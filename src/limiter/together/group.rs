//! The batches of a multi-item request: one per item not yet decided, its
//! counters' layouts, and how its counts split back into each item's.

use super::super::counters::{self, Counts, Layout, layout};
use super::Item;
use crate::limiter::Decision;
use crate::store::{CallDeadline, CounterBatch, KeyDigest};
use crate::window::Counting;

/// The batch of one item (a group of one: the decision code reads the same
/// for any grouping, should stores ever take several keys per batch).
pub(super) struct Group {
    pub(super) items: Vec<usize>,
    pub(super) layouts: Vec<Layout>,
    pub(super) batch: CounterBatch,
}

impl Group {
    /// Each item's layouts, in the group's order.
    pub(super) fn layouts_by_item<'g>(&'g self, items: &[Item<'_>]) -> Vec<&'g [Layout]> {
        let mut start = 0;
        self.items
            .iter()
            .map(|&index| {
                let end = start + items[index].policy.limits().len();
                let layouts = &self.layouts[start..end];
                start = end;
                layouts
            })
            .collect()
    }

    /// Each item's index and its per-limit counts.
    pub(super) fn split<'c>(
        &self,
        items: &[Item<'_>],
        counts: &'c [Counts],
    ) -> impl Iterator<Item = (usize, &'c [Counts])> {
        let mut start = 0;
        let ends: Vec<(usize, usize, usize)> = self
            .items
            .iter()
            .map(|&index| {
                let end = start + items[index].policy.limits().len();
                let range = (index, start, end);
                start = end;
                range
            })
            .collect();
        ends.into_iter()
            .map(move |(index, start, end)| (index, &counts[start..end]))
    }
}

/// The undecided items, one batch each, by `deadline` when the store
/// keeps it.
pub(super) fn groups(
    items: &[Item<'_>],
    decided: &[Option<Decision>],
    counting: Counting,
    now_ms: u64,
    deadline: Option<CallDeadline>,
) -> Vec<Group> {
    (0..items.len())
        .filter(|&index| decided[index].is_none())
        .map(|index| {
            let cost = items[index].cost;
            let indices = vec![index];
            let layouts: Vec<Layout> = indices
                .iter()
                .flat_map(|&index| {
                    let item = items[index];
                    let digest = KeyDigest::of(item.policy.scope(), item.key);
                    item.policy
                        .limits()
                        .iter()
                        .map(move |limit| layout(digest, limit, now_ms))
                })
                .collect();
            let batch = counters::batch(&layouts, cost, counting, now_ms, deadline);
            Group {
                items: indices,
                layouts,
                batch,
            }
        })
        .collect()
}
