//! Places and bytes held against a bound, taken and given back without a
//! lock: the RLQS streams open, and the buckets they keep and what those
//! weigh.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct Places(AtomicUsize);

impl Places {
    /// One more place, unless `most` are held already.
    pub fn take(&self, most: usize) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < most).then(|| held + 1)
            })
            .is_ok()
    }

    pub fn give_back(&self, places: usize) {
        self.0.fetch_sub(places, Ordering::Relaxed);
    }

    pub fn held(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Bytes held against a bound.
#[derive(Debug, Default)]
pub struct Bytes(AtomicU64);

impl Bytes {
    /// `bytes` more, unless that would hold more than `most`.
    pub fn take(&self, bytes: u64, most: u64) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&after| after <= most)
            })
            .is_ok()
    }

    pub fn give_back(&self, bytes: u64) {
        self.0.fetch_sub(bytes, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
