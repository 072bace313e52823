//! A rejected key's counts, kept in the near-cache as lower bounds so that
//! the next rejects of that key cost no round trip.

use std::time::Duration;

use super::{Counts, Limiter};
use crate::near_cache::{Items, NearKey, Seen};
use crate::policy::Policy;
use crate::store::Store;
use crate::window::{self, Counting};

impl<S: Store> Limiter<S> {
    /// Remember a rejected key's counts in the near-cache, as lower bounds.
    ///
    /// A current count read by an increment can include increments of
    /// concurrent requests that are themselves being rejected and rolled
    /// back. Two bounds remove that excess: the value left after our own
    /// rollback (others may have rolled back by then), and the ceiling, the
    /// most that admitted requests can have left in the current bucket given
    /// the older ones. The ceiling assumes that every addition under it is
    /// an admitted one, which holds while a counter is asked by requests of
    /// one item only. A request of several items can hold one there and
    /// still be refused by another item: what such a request read refuses
    /// only requests of several ([`Items::Several`]). A counter asked both
    /// alone and together (RLS `[a]` and `[a, b]`) can still show a lone
    /// request such an addition in flight; what it remembers then errs
    /// towards refusing until the entry is read again.
    pub(super) fn remember(
        &self,
        near_key: NearKey,
        policy: &Policy,
        read: Read<'_>,
        cost: u64,
        now_ms: u64,
    ) {
        let Read {
            counts,
            after_rollback,
            by,
        } = read;
        let lower_bounds: Vec<Vec<u64>> = policy
            .limits()
            .iter()
            .zip(counts)
            .enumerate()
            .map(|(index, (limit, counts))| {
                let mut bounds = counts.to_vec();
                let ceiling = window::current_ceiling(*limit, counts, now_ms);
                let rolled_back = after_rollback
                    .as_ref()
                    .and_then(|values| values.get(index).copied().flatten())
                    .unwrap_or(u64::MAX);
                if let Some(current) = bounds.last_mut() {
                    *current = (*current).min(ceiling).min(rolled_back);
                }
                bounds
            })
            .collect();
        let verdict = window::decide(
            policy.limits(),
            &lower_bounds,
            now_ms,
            cost,
            Counting::Never,
        );
        // Remember only what rejects on its own, for as long as it does.
        let Some(lifetime) = verdict.retry_after_ms.filter(|_| !verdict.allowed) else {
            return;
        };
        let seen = policy
            .limits()
            .iter()
            .zip(lower_bounds)
            .map(|(limit, counts)| Seen {
                window: limit.window(),
                bucket: limit.window().bucket_of(now_ms),
                counts: counts.into(),
            });
        let lifetime = Duration::from_millis(lifetime);
        self.near_cache
            .remember(near_key, seen, lifetime, now_ms, by);
    }
}

/// What a refused request read of one key's counters.
pub(super) struct Read<'a> {
    /// Each limit's counts before the request, oldest first.
    pub(super) counts: &'a [Counts],
    /// Each current counter's value after the request's take-back, when
    /// known.
    pub(super) after_rollback: Option<Vec<Option<u64>>>,
    /// How many items the request decided together.
    pub(super) by: Items,
}
