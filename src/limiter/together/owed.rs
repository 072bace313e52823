//! What a request of several keys owes back while its batches are in
//! flight: an answered batch's additions, if the request is dropped before
//! it claims them.

use crate::join::start_now;
use crate::limiter::Limiter;
use crate::store::{CounterBatch, Store};

/// One answered batch of a request whose other batches are still in
/// flight. Dropped unclaimed, it takes its additions back: the store call
/// that made them has ended, so its own take-back on a caller gone (the
/// Memcached store's) no longer applies.
pub(super) struct Owed<'a, S: Store> {
    pub(super) limiter: &'a Limiter<S>,
    pub(super) batch: &'a CounterBatch,
    pub(super) local: bool,
    /// Whether the batch's call succeeded, so that its additions stand.
    pub(super) added: bool,
}

impl<S: Store> Owed<'_, S> {
    /// The request goes on with this batch's answer: what it added is the
    /// request's to keep or take back.
    pub(super) fn claimed(mut self) {
        self.added = false;
    }
}

impl<S: Store> Drop for Owed<'_, S> {
    fn drop(&mut self) {
        let batch = self.batch;
        if !self.added || batch.adds.is_empty() {
            return;
        }
        if self.local {
            start_now(
                self.limiter
                    .local
                    .subtract(&batch.adds, batch.amount, batch.now_ms),
            );
        } else {
            start_now(
                self.limiter
                    .store
                    .subtract(&batch.adds, batch.amount, batch.now_ms),
            );
        }
    }
}
