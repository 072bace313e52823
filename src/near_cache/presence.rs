//! Which keys the near-cache may hold, answered without asking it.
//!
//! Every check looks its key up before it goes to the store, and most keys
//! are admitted, so most lookups find nothing. moka's lookup costs about
//! 600 instructions even then (its hash table, a read recorded for its
//! eviction policy, housekeeping), an eighth of what a check of a hot
//! admitted key costs in all. So beside the cache sits a counting filter of
//! one hash: per slot, how many of the cache's entries hash there. A slot
//! at 0 means the key is certainly not held; anything else, "ask moka".
//!
//! A wrong answer here can only cost time, never a wrong decision: the
//! near-cache only ever refuses, and a key it is not asked about goes to
//! the store, which decides exactly. So the counts need not be exact, only
//! not too low for long: an entry is counted before it goes in, and taken
//! off when moka says it left (expired, evicted, replaced or invalidated).
//! A slot that reaches 255 stays there for good (it only asks moka).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, Ordering};

use super::NearKey;
use super::hasher::SeededFold;

/// The fewest and most slots: 4 per key the cache can hold, a byte each
/// (a cache of 100,000 keys has 512 KiB of them).
const MIN_SLOTS: usize = 1 << 10;
const MAX_SLOTS: usize = 1 << 22;
/// A slot that reached this is never counted down again.
const STUCK: u8 = u8::MAX;

pub(super) struct Presence {
    slots: Box<[AtomicU8]>,
    /// The number of slots minus one (a power of two).
    mask: usize,
    hasher: SeededFold,
}

impl Presence {
    pub(super) fn new(capacity: u64) -> Presence {
        let wanted = usize::try_from(capacity.saturating_mul(4)).unwrap_or(MAX_SLOTS);
        let slots = wanted.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two();
        Presence {
            slots: (0..slots).map(|_| AtomicU8::new(0)).collect(),
            mask: slots - 1,
            hasher: SeededFold::new(),
        }
    }

    fn slot(&self, key: &NearKey) -> &AtomicU8 {
        // The mask keeps the index in bounds.
        let index = (self.hasher.hash_one(key) as usize) & self.mask;
        &self.slots[index]
    }

    /// Whether the cache may hold `key`: false only when it certainly does
    /// not.
    pub(super) fn may_hold(&self, key: &NearKey) -> bool {
        self.slot(key).load(Ordering::Relaxed) != 0
    }

    /// `key` is about to go into the cache.
    pub(super) fn added(&self, key: &NearKey) {
        let _ = self
            .slot(key)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |count| {
                (count != STUCK).then(|| count + 1)
            });
    }

    /// `key` left the cache.
    pub(super) fn removed(&self, key: &NearKey) {
        let _ = self
            .slot(key)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |count| {
                (count != STUCK).then(|| count.saturating_sub(1))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Limit, Policy};
    use crate::store::KeyDigest;

    fn key(name: &str) -> NearKey {
        let policy = Policy::new("api", vec![Limit::new(1, 1_000, 1).unwrap()]).unwrap();
        NearKey::new(KeyDigest::of("api", name), &policy)
    }

    #[test]
    fn a_key_is_held_until_every_entry_of_its_slot_left() {
        let presence = Presence::new(10);
        assert_eq!(presence.slots.len(), MIN_SLOTS);
        let (a, b) = (key("a"), key("b"));
        assert!(!presence.may_hold(&a));
        presence.added(&a);
        presence.added(&a);
        assert!(presence.may_hold(&a));
        presence.removed(&a);
        assert!(presence.may_hold(&a), "one entry of its slot is still in");
        presence.removed(&a);
        assert!(!presence.may_hold(&a));
        presence.removed(&a);
        assert!(!presence.may_hold(&a), "never below zero");
        // Keys that are never added are mostly answered "not held".
        let strangers = (0..1000)
            .filter(|n| presence.may_hold(&key(&format!("k{n}"))))
            .count();
        assert_eq!(strangers, 0);
        presence.added(&b);
        let slot = presence.slot(&b);
        slot.store(STUCK, Ordering::Relaxed);
        presence.removed(&b);
        presence.added(&b);
        assert_eq!(
            slot.load(Ordering::Relaxed),
            STUCK,
            "a full slot stays full"
        );
    }

    #[test]
    fn slots_follow_the_capacity_within_bounds() {
        assert_eq!(Presence::new(0).slots.len(), MIN_SLOTS);
        assert_eq!(Presence::new(100_000).slots.len(), 1 << 19);
        assert_eq!(Presence::new(u64::MAX).slots.len(), MAX_SLOTS);
    }
}
