//! The embedded store: counters in this process's memory, with the same
//! semantics as Memcached (atomic additions, counters created on first
//! addition, expiry after the TTL of their window). The default when no
//! Memcached is configured, and the in-process counter of failure mode
//! `local`.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{BatchCounts, CounterBatch, CounterKey, Store, StoreError, bucket_ttl_secs};

/// Enough shards that two cores rarely wait on each other's lock.
const SHARDS: usize = 64;
/// How often a shard drops its expired counters.
const SWEEP_EVERY_MS: u64 = 1_000;

pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
}

#[derive(Default)]
struct Shard {
    counters: HashMap<CounterKey, Counter>,
    next_sweep_ms: u64,
}

struct Counter {
    value: u64,
    expires_at_ms: u64,
}

impl Shard {
    fn live(&mut self, key: &CounterKey, now_ms: u64) -> Option<&mut Counter> {
        self.counters
            .get_mut(key)
            .filter(|counter| counter.expires_at_ms > now_ms)
    }

    fn read(&mut self, key: &CounterKey, now_ms: u64) -> u64 {
        self.live(key, now_ms).map_or(0, |counter| counter.value)
    }

    fn add(&mut self, key: CounterKey, amount: u64, now_ms: u64) -> u64 {
        if now_ms >= self.next_sweep_ms {
            self.counters
                .retain(|_, counter| counter.expires_at_ms > now_ms);
            self.next_sweep_ms = now_ms.saturating_add(SWEEP_EVERY_MS);
        }
        if let Some(counter) = self.live(&key, now_ms) {
            // Memcached wraps at 2^64; amounts are capped far below that, so
            // saturating only differs in a case that cannot be reached.
            counter.value = counter.value.saturating_add(amount);
            return counter.value;
        }
        let ttl_ms = bucket_ttl_secs(key.window) * 1000;
        self.counters.insert(
            key,
            Counter {
                value: amount,
                expires_at_ms: now_ms.saturating_add(ttl_ms),
            },
        );
        amount
    }

    fn subtract(&mut self, key: &CounterKey, amount: u64, now_ms: u64) -> Option<u64> {
        let counter = self.live(key, now_ms)?;
        counter.value = counter.value.saturating_sub(amount);
        Some(counter.value)
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    /// All counters of one key share a shard, so a batch (always one key's
    /// counters) takes one lock.
    fn shard(&self, key: &CounterKey) -> std::sync::MutexGuard<'_, Shard> {
        let index = usize::from(key.digest.as_bytes()[0]) % SHARDS;
        // A panic while holding the lock cannot leave a shard half-updated
        // (every update is a single assignment), so a poisoned lock is safe
        // to keep using.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// How many counters are held, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().map_or(0, |shard| shard.counters.len()))
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
            .map(|key| self.shard(key).add(*key, batch.amount, batch.now_ms))
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

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Window;
    use crate::store::KeyDigest;

    fn counter(bucket: u64) -> CounterKey {
        CounterKey {
            digest: KeyDigest::of("t", "k"),
            window: Window::new(1_000, 1).unwrap(),
            bucket,
        }
    }

    #[test]
    fn counters_expire_after_their_ttl_and_are_swept() {
        let mut shard = Shard::default();
        assert_eq!(shard.add(counter(1), 2, 0), 2);
        assert_eq!(shard.add(counter(1), 3, 10), 5);
        // TTL of a 1 s window: 2 s + 2 s margin.
        assert_eq!(shard.read(&counter(1), 3_999), 5);
        assert_eq!(shard.read(&counter(1), 4_000), 0);
        assert_eq!(shard.subtract(&counter(1), 1, 4_000), None);
        // An expired counter starts again from the amount.
        assert_eq!(shard.add(counter(1), 1, 4_000), 1);
        shard.add(counter(2), 1, 4_000);
        shard.add(counter(3), 1, 9_000);
        assert_eq!(shard.counters.len(), 1, "expired counters were swept");
    }
}
