//! The embedded store: counters in this process's memory, with the same
//! semantics as Memcached (atomic additions, counters created on first
//! addition, expiry after the TTL of their window, and eviction when full).
//! The default when no Memcached is configured, and the in-process counter
//! of failure mode `local`.
//!
//! # Bounded, and cheap per counter
//!
//! The store holds at most `capacity` counters, in a fixed table allocated
//! once (zeroed pages, which the kernel only backs with memory as they are
//! first written). A counter costs 32 bytes: a 128-bit fingerprint, its
//! value, its expiry in whole seconds and when it was last used. A hash map
//! of `CounterKey` costs about four times that, and grows without bound.
//!
//! The table is set-associative, like a CPU cache: a counter can only live
//! in one set of 16 slots. When its set is full, a new counter takes the
//! slot of an expired one if there is one, else evicts the set's **least
//! recently used** counter, as Memcached does (its LRU is per slab class;
//! ours per set), and the eviction is counted. An evicted counter then
//! reads as 0, as after a Memcached eviction.
//!
//! Least recently used rather than soonest to expire: a flood of one-shot
//! keys then pushes out only other idle keys, while the counters of active
//! clients, touched on every check, stay: refused ones too, since a
//! refusal the near-cache answers touches them ([`Store::touch`]).
//! Soonest-to-expire would evict the previous bucket of every active key
//! first, since it is the oldest, and that is exactly the count a sliding
//! window still needs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BatchCounts, CounterBatch, CounterKey, Store, StoreError, bucket_ttl_secs};

/// Counters held when no capacity is configured.
pub const DEFAULT_MEMORY_CAPACITY: usize = 1_000_000;
/// Slots a counter may live in. Sixteen 16-byte fingerprints are four
/// cache lines to scan; fewer ways would evict while much of the table is
/// still free.
const WAYS: usize = 16;
/// Enough shards that two cores rarely wait on each other's lock; a power
/// of two, so the digest's first byte spreads keys evenly over them.
const MAX_SHARDS: usize = 64;

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    evictions: AtomicU64,
}

/// One shard's table of `sets * WAYS` slots, in one zeroed allocation of
/// four words a slot, laid out as four regions (fingerprint halves, value,
/// stamp) so that a set's fingerprints sit together for the scan. One
/// allocation, not four: large enough that the allocator maps fresh pages,
/// which the kernel backs with memory only when first written, so a store
/// that is never filled (the failure mode's, say) costs nothing.
struct Shard {
    sets: usize,
    slots: usize,
    words: Box<[u64]>,
    /// Counts uses; wraps, and ages are compared with wrapping arithmetic.
    tick: u32,
}

/// A slot's stamp: its expiry in Unix seconds (rounded up) modulo 2^32, 0
/// while the slot is free (a real expiry that would be 0 is made 1), in the
/// high half; the shard's `tick` at its last use, for LRU, in the low half.
/// Modulo 2^32 and compared with wrapping arithmetic ([`Shard::is_live`]):
/// a TTL is at most two years and a second, far under the 68 years that
/// can be told apart, so a clock past 2038 or 2106 keeps counting.
fn stamp(expires_secs: u32, last_used: u32) -> u64 {
    (u64::from(expires_secs) << 32) | u64::from(last_used)
}

/// A counter's name in the table. The digest is BLAKE3 of the key, so it
/// cannot be steered; window and bucket are folded in without loss (a
/// window is under 2^35 ms, a precision under 2^10), so two counters of one
/// key never share a fingerprint.
fn fingerprint(key: &CounterKey) -> [u64; 2] {
    let digest = key.digest.as_bytes();
    let half = |range: std::ops::Range<usize>| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[range]);
        u64::from_le_bytes(word)
    };
    let window = (key.window.window_ms() << 10) | u64::from(key.window.precision());
    [half(0..8) ^ key.bucket, half(8..16) ^ window]
}

/// The set a fingerprint lives in (SplitMix64's finaliser: every bit of
/// the bucket moves the set, so a key's buckets spread over the table).
fn set_of(fingerprint: &[u64; 2], sets: usize) -> usize {
    let mut x = fingerprint[0] ^ fingerprint[1].rotate_left(32);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x % sets as u64) as usize
}

fn expiry_secs(now_ms: u64, ttl_secs: u64) -> u32 {
    let secs = now_ms.div_ceil(1000).wrapping_add(ttl_secs) as u32;
    // 0 marks a free slot: one second more instead.
    secs.max(1)
}

impl Shard {
    fn new(sets: usize) -> Shard {
        let slots = sets * WAYS;
        Shard {
            sets,
            slots,
            words: vec![0; 4 * slots].into_boxed_slice(),
            tick: 0,
        }
    }

    fn fingerprint(&self, slot: usize) -> [u64; 2] {
        [self.words[slot], self.words[self.slots + slot]]
    }

    fn value(&self, slot: usize) -> u64 {
        self.words[2 * self.slots + slot]
    }

    fn set_value(&mut self, slot: usize, value: u64) {
        self.words[2 * self.slots + slot] = value;
    }

    fn expires_secs(&self, slot: usize) -> u32 {
        (self.words[3 * self.slots + slot] >> 32) as u32
    }

    fn last_used(&self, slot: usize) -> u32 {
        self.words[3 * self.slots + slot] as u32
    }

    fn is_taken(&self, slot: usize) -> bool {
        self.expires_secs(slot) != 0
    }

    /// Mark `slot` as just used.
    fn touch(&mut self, slot: usize) {
        self.tick = self.tick.wrapping_add(1);
        self.words[3 * self.slots + slot] = stamp(self.expires_secs(slot), self.tick);
    }

    fn holds(&self, slot: usize, fingerprint: &[u64; 2]) -> bool {
        self.fingerprint(slot) == *fingerprint && self.is_taken(slot)
    }

    fn slots_of(&self, fingerprint: &[u64; 2]) -> std::ops::Range<usize> {
        let start = set_of(fingerprint, self.sets) * WAYS;
        start..start + WAYS
    }

    /// Taken, and expiring after `now_ms`: its expiry is later than the
    /// current second, compared modulo 2^32 (see [`stamp`]).
    fn is_live(&self, slot: usize, now_ms: u64) -> bool {
        let now_secs = (now_ms / 1000) as u32;
        self.is_taken(slot) && (self.expires_secs(slot).wrapping_sub(now_secs) as i32) > 0
    }

    /// The slot holding `key`'s live counter, marked as just used.
    fn find(&mut self, key: &CounterKey, now_ms: u64) -> Option<usize> {
        let fingerprint = fingerprint(key);
        let slot = self
            .slots_of(&fingerprint)
            .find(|&slot| self.holds(slot, &fingerprint))?;
        if !self.is_live(slot, now_ms) {
            return None;
        }
        self.touch(slot);
        Some(slot)
    }

    fn read(&mut self, key: &CounterKey, now_ms: u64) -> u64 {
        self.find(key, now_ms).map_or(0, |slot| self.value(slot))
    }

    /// Add `amount`, creating the counter when missing; also says whether
    /// a live counter was evicted to make room.
    fn add(&mut self, key: &CounterKey, amount: u64, now_ms: u64) -> (u64, bool) {
        if let Some(slot) = self.find(key, now_ms) {
            // Memcached wraps at 2^64; amounts are capped far below that, so
            // saturating only differs in a case that cannot be reached.
            let value = self.value(slot).saturating_add(amount);
            self.set_value(slot, value);
            return (value, false);
        }
        let fingerprint = fingerprint(key);
        let slots = self.slots_of(&fingerprint);
        // The same counter expired, else a free or expired slot, else the
        // least recently used.
        let reuse = slots
            .clone()
            .find(|&slot| self.holds(slot, &fingerprint))
            .or_else(|| slots.clone().find(|&slot| !self.is_live(slot, now_ms)));
        let (slot, evicted) = match reuse {
            Some(slot) => (slot, false),
            None => {
                let tick = self.tick;
                let oldest = slots
                    .max_by_key(|&slot| tick.wrapping_sub(self.last_used(slot)))
                    .unwrap_or(0);
                (oldest, true)
            }
        };
        self.tick = self.tick.wrapping_add(1);
        let expires = expiry_secs(now_ms, bucket_ttl_secs(key.window));
        self.words[slot] = fingerprint[0];
        self.words[self.slots + slot] = fingerprint[1];
        self.set_value(slot, amount);
        self.words[3 * self.slots + slot] = stamp(expires, self.tick);
        (amount, evicted)
    }

    fn subtract(&mut self, key: &CounterKey, amount: u64, now_ms: u64) -> Option<u64> {
        let slot = self.find(key, now_ms)?;
        let value = self.value(slot).saturating_sub(amount);
        self.set_value(slot, value);
        Some(value)
    }

    /// Free the slot of `key`'s live counter; whether there was one.
    fn remove(&mut self, key: &CounterKey, now_ms: u64) -> bool {
        let Some(slot) = self.find(key, now_ms) else {
            return false;
        };
        // An expiry of 0 marks a free slot.
        self.words[3 * self.slots + slot] = 0;
        true
    }

    fn held(&self) -> usize {
        (0..self.slots).filter(|&slot| self.is_taken(slot)).count()
    }
}

impl MemoryStore {
    /// A store of [`DEFAULT_MEMORY_CAPACITY`] counters.
    pub fn new() -> MemoryStore {
        MemoryStore::with_capacity(DEFAULT_MEMORY_CAPACITY)
    }

    /// A store of at least `capacity` counters (rounded up to whole sets
    /// of 16 in every shard; [`capacity`](Self::capacity) says how many).
    pub fn with_capacity(capacity: usize) -> MemoryStore {
        let sets = capacity.max(1).div_ceil(WAYS);
        let shards = if sets >= MAX_SHARDS {
            MAX_SHARDS
        } else {
            // The largest power of two not above `sets`.
            1 << sets.ilog2()
        };
        let sets_per_shard = sets.div_ceil(shards);
        MemoryStore {
            shards: (0..shards)
                .map(|_| Mutex::new(Shard::new(sets_per_shard)))
                .collect(),
            evictions: AtomicU64::new(0),
        }
    }

    /// How many counters fit.
    pub fn capacity(&self) -> usize {
        self.shards.len() * self.lock(0).sets * WAYS
    }

    /// Bytes the table takes once every slot has been written.
    pub fn table_bytes(&self) -> usize {
        self.capacity() * 4 * std::mem::size_of::<u64>()
    }

    /// Live counters evicted to make room for new ones, since the start.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// All counters of one key share a shard, so a batch (always one key's
    /// counters) takes one lock.
    fn shard(&self, key: &CounterKey) -> std::sync::MutexGuard<'_, Shard> {
        self.lock(usize::from(key.digest.as_bytes()[0]) % self.shards.len())
    }

    fn lock(&self, index: usize) -> std::sync::MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a slot half-updated
        // in a way that matters (the worst is a counter with a stale
        // value), so a poisoned lock is safe to keep using.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many counters are held, expired ones not yet reused included.
    pub fn len(&self) -> usize {
        (0..self.shards.len())
            .map(|index| self.lock(index).held())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl Store for MemoryStore {
    async fn read_and_add(&self, batch: &CounterBatch) -> Result<BatchCounts, StoreError> {
        let read = batch
            .reads
            .iter()
            .map(|key| self.shard(key).read(key, batch.now_ms))
            .collect();
        let added = batch
            .adds
            .iter()
            .map(|key| {
                let (value, evicted) = self.shard(key).add(key, batch.amount, batch.now_ms);
                if evicted {
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
                value
            })
            .collect();
        Ok(BatchCounts { read, added })
    }

    async fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        now_ms: u64,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        Ok(counters
            .iter()
            .map(|key| self.shard(key).subtract(key, amount, now_ms))
            .collect())
    }

    fn touch(&self, counters: &[CounterKey], now_ms: u64) {
        for key in counters {
            // Finding a live counter marks it used; a missing one stays so.
            self.shard(key).find(key, now_ms);
        }
    }

    fn keeps_what_is_touched(&self) -> bool {
        true
    }

    async fn remove(&self, counters: &[CounterKey], now_ms: u64) -> Result<usize, StoreError> {
        // Expired counters read 0 already: only live ones count as removed.
        Ok(counters
            .iter()
            .filter(|key| self.shard(key).remove(key, now_ms))
            .count())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests;
