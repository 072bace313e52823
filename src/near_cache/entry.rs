//! One key's entry: what it remembers, what it weighs, when it expires,
//! and its counts slid to the instant of a lookup.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use moka::Expiry;
use smallvec::SmallVec;

use super::{Items, LowerBounds, NearKey, Seen};
use crate::policy::Policy;
use crate::window;

/// What an entry costs besides the key and the value: moka's entry node, its
/// place in the access and expiry orders, its hash table slot, and the
/// allocator's headers. An estimate, fitted to the resident memory of
/// 100,000 refused keys of 128 counters (tests/bounds.rs).
const MOKA_BYTES_PER_ENTRY: usize = 256;

/// What one key's entry holds, in one allocation for a policy of one limit
/// at precision 1.
pub(super) struct Entry {
    seen: SmallVec<[Seen; 1]>,
    lifetime: Duration,
    /// What the entry costs in memory, counted once when made.
    pub(super) bytes: u32,
    /// When the last check that went to the store for this entry set out,
    /// on the limiter's clock: the counts' read time at first.
    revalidated_ms: AtomicU64,
    /// Whose counts these are, and so which requests they may refuse.
    pub(super) written_by: Items,
}

impl Entry {
    pub(super) fn new(
        seen: SmallVec<[Seen; 1]>,
        lifetime: Duration,
        read_at_ms: u64,
        written_by: Items,
    ) -> Entry {
        let heap_of_seen = if seen.spilled() {
            seen.capacity() * size_of::<Seen>()
        } else {
            0
        };
        let heap_of_counts: usize = seen
            .iter()
            .filter(|seen| seen.counts.spilled())
            .map(|seen| seen.counts.capacity() * size_of::<u64>())
            .sum();
        // The key, the Arc's counts and the entry itself, what it points
        // to, and moka's own bookkeeping.
        let bytes = size_of::<NearKey>()
            + 2 * size_of::<usize>()
            + size_of::<Entry>()
            + heap_of_seen
            + heap_of_counts
            + MOKA_BYTES_PER_ENTRY;
        Entry {
            seen,
            lifetime,
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            revalidated_ms: AtomicU64::new(read_at_ms),
            written_by,
        }
    }

    /// Whether the caller is the one check of this interval to read the
    /// store again: the entry is older than `interval_ms`, and no other
    /// check claimed it since.
    pub(super) fn claim_revalidation(&self, now_ms: u64, interval_ms: u64) -> bool {
        self.revalidated_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                (now_ms >= last.saturating_add(interval_ms)).then_some(now_ms)
            })
            .is_ok()
    }
}

pub(super) struct UntilUseless;

impl Expiry<NearKey, Arc<Entry>> for UntilUseless {
    fn expire_after_create(&self, _: &NearKey, entry: &Arc<Entry>, _: Instant) -> Option<Duration> {
        Some(entry.lifetime)
    }

    fn expire_after_update(
        &self,
        _: &NearKey,
        entry: &Arc<Entry>,
        _: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(entry.lifetime)
    }
}

/// An entry's counts of each limit of `policy`, slid to `now_ms`; `None`
/// when it was made for other windows, or the clock went back.
pub(super) fn slid(entry: &Entry, policy: &Policy, now_ms: u64) -> Option<LowerBounds> {
    if entry.seen.len() != policy.limits().len() {
        return None;
    }
    policy
        .limits()
        .iter()
        .zip(&entry.seen)
        .map(|(limit, seen)| {
            let window = limit.window();
            if seen.window != window {
                return None;
            }
            window::slide(&seen.counts, seen.bucket, window.bucket_of(now_ms))
        })
        .collect()
}
