//! Counters the limiter keeps about itself; the server renders them for
//! Prometheus. Plain atomics: they are bumped on every request.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::limiter::Source;

#[derive(Default)]
pub struct Metrics {
    allowed: [AtomicU64; 3],
    rejected: [AtomicU64; 3],
    store_calls: AtomicU64,
    store_errors: AtomicU64,
    rollback_failures: AtomicU64,
}

/// A copy of the counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Decisions by source ([`Source::ALL`] order), allowed and rejected.
    pub allowed: [u64; 3],
    pub rejected: [u64; 3],
    /// Round trips to the store, rollbacks included.
    pub store_calls: u64,
    /// Store calls that failed or timed out.
    pub store_errors: u64,
    /// Rejected requests whose increment could not be taken back: their
    /// cost stays counted until the bucket expires.
    pub rollback_failures: u64,
}

impl MetricsSnapshot {
    /// Rejections answered from the near-cache, without the store.
    pub fn near_cache_hits(&self) -> u64 {
        self.rejected[Source::NearCache.index()]
    }
}

impl Metrics {
    pub(crate) fn decision(&self, source: Source, allowed: bool) {
        let counters = if allowed {
            &self.allowed
        } else {
            &self.rejected
        };
        counters[source.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_call(&self) {
        self.store_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rollback_failure(&self) {
        self.rollback_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        MetricsSnapshot {
            allowed: self.allowed.each_ref().map(load),
            rejected: self.rejected.each_ref().map(load),
            store_calls: load(&self.store_calls),
            store_errors: load(&self.store_errors),
            rollback_failures: load(&self.rollback_failures),
        }
    }
}
