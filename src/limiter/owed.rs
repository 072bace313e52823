//! Additions no caller has been told of yet: a coalesced leader's own cost
//! while it awaits its batch's take-back, a request's answered batch while
//! its other parts are in flight. Dropped before it is claimed (the caller
//! gave up), what is owed is taken back at once, so the store counts only
//! what callers were told was counted.

use smallvec::SmallVec;

use crate::join::start_now;
use crate::store::{CounterKey, Store};

/// Each `(counters, amount)` added at `now_ms` to `store`; an amount of 0
/// when nothing was added there.
pub(super) struct Owed<'a, T: Store> {
    store: &'a T,
    takes: SmallVec<[(&'a [CounterKey], u64); 1]>,
    now_ms: u64,
}

impl<'a, T: Store> Owed<'a, T> {
    /// `amount` added to each of `counters`.
    pub(super) fn one(
        store: &'a T,
        counters: &'a [CounterKey],
        amount: u64,
        now_ms: u64,
    ) -> Owed<'a, T> {
        Owed::many(store, [(counters, amount)], now_ms)
    }

    /// Each `(counters, amount)`.
    pub(super) fn many(
        store: &'a T,
        takes: impl IntoIterator<Item = (&'a [CounterKey], u64)>,
        now_ms: u64,
    ) -> Owed<'a, T> {
        Owed {
            store,
            takes: takes
                .into_iter()
                .filter(|(counters, amount)| *amount > 0 && !counters.is_empty())
                .collect(),
            now_ms,
        }
    }

    /// The caller has the answer: what was added is its to keep, or to
    /// take back itself.
    pub(super) fn claimed(mut self) {
        self.takes.clear();
    }
}

impl<T: Store> Drop for Owed<'_, T> {
    fn drop(&mut self) {
        // A store starts a subtraction on its first poll and finishes it
        // whoever waits (see `Store::subtract`): start it, and leave.
        for &(counters, amount) in &self.takes {
            start_now(self.store.subtract(counters, amount, self.now_ms));
        }
    }
}
