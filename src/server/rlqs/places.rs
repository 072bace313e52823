//! Places held against a bound, taken and given back without a lock: the
//! RLQS streams open, and the buckets they keep.

use std::sync::atomic::{AtomicUsize, Ordering};

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
