//! The buckets every stream of an instance keeps, against one bound in
//! number and one in bytes (`rlqs.max_tracked_bytes`, live): streams and
//! bucket ids are bounded each, but their product is not a bound an
//! operator can plan for; these are. Each stream gives back its own when
//! it forgets them or ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::Status;

use super::places::{Bytes, Places};

/// The most buckets all the streams of an instance keep together.
pub const MAX_BUCKETS: usize = 100_000;

#[derive(Clone, Debug)]
pub struct BucketBudget {
    held: Arc<Places>,
    weight: Arc<Bytes>,
    most: usize,
    /// `rlqs.max_tracked_bytes`, as the last reload set it.
    most_bytes: Arc<AtomicU64>,
}

impl BucketBudget {
    pub fn new(most: usize, most_bytes: u64) -> BucketBudget {
        BucketBudget {
            held: Arc::default(),
            weight: Arc::default(),
            most,
            most_bytes: Arc::new(AtomicU64::new(most_bytes)),
        }
    }

    /// A new bound in bytes: buckets kept over a lowered one stay, and no
    /// new one is kept until they weigh less.
    pub fn set_most_bytes(&self, most_bytes: u64) {
        self.most_bytes.store(most_bytes, Ordering::Relaxed);
    }

    /// Buckets kept now, over all streams, and what they weigh.
    #[cfg(test)]
    pub fn held(&self) -> (usize, u64) {
        (self.held.held(), self.weight.held())
    }

    /// A place for one more bucket weighing `bytes`; past either bound the
    /// stream that would keep it ends with RESOURCE_EXHAUSTED naming it.
    pub fn take(&self, bytes: u64) -> Result<(), Status> {
        let most_bytes = self.most_bytes.load(Ordering::Relaxed);
        if !self.weight.take(bytes, most_bytes) {
            return Err(Status::resource_exhausted(format!(
                "rlqs.max_tracked_bytes: the buckets this instance keeps over all its streams \
                 would weigh more than {most_bytes} bytes"
            )));
        }
        if !self.held.take(self.most) {
            self.weight.give_back(bytes);
            return Err(Status::resource_exhausted(format!(
                "this instance keeps at most {} buckets over all its streams",
                self.most
            )));
        }
        Ok(())
    }

    pub fn give_back(&self, buckets: usize, bytes: u64) {
        self.held.give_back(buckets);
        self.weight.give_back(bytes);
    }
}
