//! What a batch owes back when an answer is dropped unread: a leader's own
//! count while it awaits the batch's take-back, and the take-back its
//! gathered checks' counted answers share.

use super::gather::TakeBack;
use crate::join::start_now;
use crate::limiter::Limiter;
use crate::store::{CounterKey, Counters, Store};

/// A leader's own counted cost while it still awaits the batch's
/// take-back: if its caller stops waiting then, the cost is taken back at
/// once, so the store counts only what callers were told was counted.
pub(super) struct OwnCount<'a, S: Store> {
    pub(super) limiter: &'a Limiter<S>,
    pub(super) counters: &'a [CounterKey],
    pub(super) cost: u64,
    pub(super) now_ms: u64,
}

impl<S: Store> Drop for OwnCount<'_, S> {
    fn drop(&mut self) {
        if self.cost > 0 && !self.counters.is_empty() {
            // A store starts a subtraction on its first poll and finishes
            // it whoever waits (see `Store::subtract`): start it, and leave.
            start_now(
                self.limiter
                    .store
                    .subtract(self.counters, self.cost, self.now_ms),
            );
        }
    }
}

/// Takes a counted answer's cost back from the counters its batch added
/// to (see [`Counted`]).
pub(super) struct StoreTakeBack<S: Store> {
    pub(super) store: S,
    pub(super) counters: Counters,
    pub(super) now_ms: u64,
}

impl<S: Store> TakeBack for StoreTakeBack<S> {
    fn take_back(&self, cost: u64) {
        start_now(self.store.subtract(&self.counters, cost, self.now_ms));
    }
}
