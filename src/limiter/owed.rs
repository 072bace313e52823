//! Additions no caller has been told of yet: a coalesced leader's own cost
//! while it awaits its batch's take-back, a multi-key request's answered
//! batch while others are in flight. Dropped before it is claimed (the
//! caller gave up), what is owed is taken back at once, so the store counts
//! only what callers were told was counted.

use super::Limiter;
use crate::join::start_now;
use crate::store::{CounterKey, Store};

/// `amount` added to each of `counters` at `now_ms`, in the store or in
/// failure mode `local`'s counters; 0 when nothing was added.
pub(super) struct Owed<'a, S: Store> {
    pub(super) limiter: &'a Limiter<S>,
    pub(super) counters: &'a [CounterKey],
    pub(super) amount: u64,
    pub(super) now_ms: u64,
    pub(super) local: bool,
}

impl<S: Store> Owed<'_, S> {
    /// The caller has the answer: what was added is its to keep, or to
    /// take back itself.
    pub(super) fn claimed(self) {
        std::mem::forget(self);
    }
}

impl<S: Store> Drop for Owed<'_, S> {
    fn drop(&mut self) {
        if self.amount == 0 || self.counters.is_empty() {
            return;
        }
        // A store starts a subtraction on its first poll and finishes it
        // whoever waits (see `Store::subtract`): start it, and leave.
        let (counters, amount, now_ms) = (self.counters, self.amount, self.now_ms);
        if self.local {
            start_now(self.limiter.local.subtract(counters, amount, now_ms));
        } else {
            start_now(self.limiter.store.subtract(counters, amount, now_ms));
        }
    }
}
