//! The near-cache of hot rejects: what this instance last saw of a key that
//! was rejected, so that the next requests for it can be rejected without a
//! round trip to the store.
//!
//! An entry holds, per limit, counts that are at most the true counts (a
//! lower bound) and the bucket they were read in. Other instances can only
//! add to the counts, so if the remembered counts alone reject a request at
//! the current time and cost, the store would reject it too. A cost-1
//! request may still pass where a cost-5 one was refused: the entry is
//! consulted with the request's own cost, and anything it does not reject
//! goes to the store.
//!
//! A reset, or a counter Memcached evicted, breaks that promise: the counts
//! went down. So an entry is trusted only for `revalidate` (1 s by default)
//! after its counts were read; then one check, and no other for another
//! interval, reads the store again before refusing with it ([`Lookup`]).
//! A reset is seen by every instance within the interval, and a hot key
//! still costs at most one store read per interval.
//!
//! A request of several items decided together (`Limiter::check_all`, an
//! RLS request of several descriptors) adds to every item's counter
//! before it knows whether one refuses, and takes the additions back if
//! one does: a count read meanwhile can hold such additions in flight,
//! anywhere under the limit, so what it remembers is not a lower bound of
//! one item's admitted counts. Such an entry ([`Items::Several`]) refuses
//! only requests of several items, where erring towards refusing is the
//! documented trade-off; a request of one item finds nothing in it, and the
//! store decides it on its own counts.
//!
//! Entries are bounded in number and in bytes (moka evicts the least
//! useful; an entry weighs its real size, so one of a many-counter policy
//! weighs more than one of a single limit), and expire
//! when their counts could no longer reject the request that created them.
//! That expiry is only housekeeping: every lookup re-decides with the
//! limiter's clock, so a stale entry can never reject wrongly.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use smallvec::SmallVec;

use crate::policy::{Policy, Window};
use crate::store::KeyDigest;
use crate::window;

// The table's hash of a digest: a seeded fold, not SipHash again.
mod hasher;
// One key's entry, its weight and expiry.
mod entry;
// Which keys it may hold, answered without a lookup.
mod presence;
use entry::{Entry, UntilUseless, slid};
use hasher::SeededFold;
use presence::Presence;

/// Which entry: the key (with its scope) and the windows of the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NearKey {
    digest: KeyDigest,
    windows: u64,
}

impl NearKey {
    pub fn new(digest: KeyDigest, policy: &Policy) -> NearKey {
        NearKey {
            digest,
            windows: policy.windows_id(),
        }
    }
}

/// A word at a time: a derived `Hash` writes the digest as a slice of
/// bytes with its length, which the near-cache's hasher folds in four
/// steps, copying each chunk, where three words are three. The same bits
/// as equality compares.
impl std::hash::Hash for NearKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let [low, high] = self.digest.words();
        for word in [low, high, self.windows] {
            state.write_u64(word);
        }
    }
}

/// Counts of one limit, oldest first, read while `bucket` was current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub window: Window,
    pub bucket: u64,
    /// Inline for precision 1 (two counts).
    pub counts: SmallVec<[u64; 2]>,
}

/// How many items the request that remembers an entry, or looks one up,
/// decides together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Items {
    /// A check, or a `check_all` of one item.
    One,
    /// A `check_all` of several items: what it remembers may hold other
    /// such requests' additions still to be taken back.
    Several,
}

impl Items {
    pub fn of(count: usize) -> Items {
        if count > 1 {
            Items::Several
        } else {
            Items::One
        }
    }
}

/// Bytes the near-cache may hold when `near_cache.max_bytes` is not set.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// How long an entry is trusted when `near_cache.revalidate_ms` is not set.
pub const DEFAULT_REVALIDATE: Duration = Duration::from_secs(1);

/// Each limit's remembered counts, slid to the instant of a lookup: inline
/// for up to two limits, so a hot reject allocates nothing for them.
pub type LowerBounds = smallvec::SmallVec<[window::SlidCounts; 2]>;

/// What the near-cache knows of a key for a check at some instant: lower
/// bounds of each limit's counts, slid to that instant.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Nothing usable is remembered.
    Unknown,
    /// Counts read less than the revalidation interval ago (or being read
    /// again by another check right now): refuse with them.
    Trusted(LowerBounds),
    /// Counts older than the interval: the caller, alone for this interval,
    /// reads the store before refusing with them.
    Revalidate(LowerBounds),
}

pub struct NearCache {
    cache: Option<Held>,
    revalidate_ms: u64,
}

/// The entries, and which keys they may be of.
struct Held {
    entries: Cache<NearKey, Arc<Entry>, SeededFold>,
    presence: Arc<Presence>,
}

impl NearCache {
    /// A cache of at most `capacity` keys and [`DEFAULT_MAX_BYTES`]; 0 turns
    /// it off.
    pub fn new(capacity: u64) -> NearCache {
        NearCache::bounded(capacity, DEFAULT_MAX_BYTES)
    }

    /// A cache of at most `capacity` keys and `max_bytes` bytes; either 0
    /// turns it off.
    pub fn bounded(capacity: u64, max_bytes: u64) -> NearCache {
        let cache = (capacity > 0 && max_bytes > 0).then(|| {
            // moka has one bound, in weight: every entry weighs at least
            // `max_bytes / capacity`, so no more than `capacity` fit, and at
            // least its real size, so together they stay under `max_bytes`.
            let floor = u32::try_from(max_bytes / capacity).unwrap_or(u32::MAX);
            let presence = Arc::new(Presence::new(capacity));
            let gone = presence.clone();
            let entries = Cache::builder()
                .max_capacity(max_bytes)
                .weigher(move |_: &NearKey, entry: &Arc<Entry>| entry.bytes.max(floor))
                .expire_after(UntilUseless)
                // Whatever the cause: expired, evicted, replaced, invalidated.
                .eviction_listener(move |key: Arc<NearKey>, _, _| gone.removed(&key))
                .build_with_hasher(SeededFold::new());
            Held { entries, presence }
        });
        NearCache {
            cache,
            revalidate_ms: DEFAULT_REVALIDATE.as_millis() as u64,
        }
    }

    /// Trust an entry for `interval` after its counts were read; then the
    /// store is read again before it refuses again.
    pub fn with_revalidate(mut self, interval: Duration) -> NearCache {
        self.revalidate_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// What is remembered of `key` for a check of `policy` at `now_ms`, by
    /// a request of `asking` items: one of one item knows nothing of what
    /// requests of several remembered.
    pub fn lookup(&self, key: &NearKey, policy: &Policy, now_ms: u64, asking: Items) -> Lookup {
        let Some(entry) = self
            .cache
            .as_ref()
            .filter(|held| held.presence.may_hold(key))
            .and_then(|held| held.entries.get(key))
            .filter(|entry| asking == Items::Several || entry.written_by == Items::One)
        else {
            return Lookup::Unknown;
        };
        let Some(bounds) = slid(&entry, policy, now_ms) else {
            return Lookup::Unknown;
        };
        if entry.claim_revalidation(now_ms, self.revalidate_ms) {
            Lookup::Revalidate(bounds)
        } else {
            Lookup::Trusted(bounds)
        }
    }

    /// The remembered counts of each limit of `policy`, slid to `now_ms`;
    /// `None` when nothing usable is remembered, or when the entry is due
    /// for revalidation: it is then forgotten, so that the store decides
    /// and a refusal is remembered afresh.
    pub fn lower_bounds(
        &self,
        key: &NearKey,
        policy: &Policy,
        now_ms: u64,
        asking: Items,
    ) -> Option<LowerBounds> {
        match self.lookup(key, policy, now_ms, asking) {
            Lookup::Trusted(bounds) => Some(bounds),
            Lookup::Revalidate(_) => {
                self.forget(key);
                None
            }
            Lookup::Unknown => None,
        }
    }

    /// Drop what may be remembered of `key`: this instance counted it, so
    /// what was remembered before is no longer all the counts (a refusal
    /// answered from it would wait too little). A key the cache certainly
    /// does not hold (most keys) costs one load of its presence slot.
    pub fn forget_counted(&self, key: &NearKey) {
        if let Some(cache) = &self.cache
            && cache.presence.may_hold(key)
        {
            cache.entries.invalidate(key);
        }
    }

    /// Drop what is remembered of `key`: its counts went down (a reset),
    /// or the store admits it again. Without asking the presence filter,
    /// unlike [`forget_counted`](Self::forget_counted): it may read low
    /// for an instant, and a reset must never leave its refusal behind.
    pub fn forget(&self, key: &NearKey) {
        if let Some(cache) = &self.cache {
            cache.entries.invalidate(key);
        }
    }

    /// Remember lower bounds of the counts, read at `read_at_ms` by a
    /// request of `written_by` items, for `lifetime`.
    pub fn remember(
        &self,
        key: NearKey,
        seen: impl IntoIterator<Item = Seen>,
        lifetime: Duration,
        read_at_ms: u64,
        written_by: Items,
    ) {
        if let Some(cache) = &self.cache {
            let seen = seen.into_iter().collect();
            let entry = Entry::new(seen, lifetime, read_at_ms, written_by);
            // Counted before it is in: a lookup never skips a held entry
            // for long (see `presence`).
            cache.presence.added(&key);
            cache.entries.insert(key, Arc::new(entry));
        }
    }

    /// How many keys are remembered (approximately: moka counts lazily).
    pub fn len(&self) -> u64 {
        self.cache
            .as_ref()
            .map_or(0, |cache| cache.entries.entry_count())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries' weight after moka's pending bookkeeping: bytes, or
    /// `max_bytes / capacity` for an entry smaller than that.
    pub fn settled_weight(&self) -> u64 {
        self.cache.as_ref().map_or(0, |cache| {
            cache.entries.run_pending_tasks();
            cache.entries.weighted_size()
        })
    }

    /// The count after moka's pending bookkeeping is done: exact, for a
    /// gauge read once per scrape, never on the request path.
    pub fn settled_len(&self) -> u64 {
        self.cache.as_ref().map_or(0, |cache| {
            cache.entries.run_pending_tasks();
            cache.entries.entry_count()
        })
    }
}

#[cfg(test)]
mod tests;
