//! [`AnyStore`]: the store chosen at run time, each call handed to the
//! store it holds.

#[cfg(feature = "memcached")]
use super::MemcachedStore;
use super::{BatchCounts, CounterBatch, CounterKey, MemoryStore, Readiness, Store, StoreError};

/// The store chosen at run time from configuration, so that the server
/// keeps one `Limiter` type whichever store it runs on.
pub enum AnyStore {
    Memory(MemoryStore),
    #[cfg(feature = "memcached")]
    Memcached(MemcachedStore),
}

impl Store for AnyStore {
    async fn read_and_add(&self, batch: &CounterBatch) -> Result<BatchCounts, StoreError> {
        match self {
            AnyStore::Memory(store) => store.read_and_add(batch).await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.read_and_add(batch).await,
        }
    }

    async fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        now_ms: u64,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        match self {
            AnyStore::Memory(store) => store.subtract(counters, amount, now_ms).await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.subtract(counters, amount, now_ms).await,
        }
    }

    async fn subtract_many(
        &self,
        takes: &[(&[CounterKey], u64)],
        now_ms: u64,
    ) -> Vec<Result<Vec<Option<u64>>, StoreError>> {
        match self {
            AnyStore::Memory(store) => store.subtract_many(takes, now_ms).await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.subtract_many(takes, now_ms).await,
        }
    }

    fn touch(&self, counters: &[CounterKey], now_ms: u64) {
        match self {
            AnyStore::Memory(store) => store.touch(counters, now_ms),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.touch(counters, now_ms),
        }
    }

    fn keeps_what_is_touched(&self) -> bool {
        match self {
            AnyStore::Memory(store) => store.keeps_what_is_touched(),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.keeps_what_is_touched(),
        }
    }

    async fn remove(&self, counters: &[CounterKey], now_ms: u64) -> Result<usize, StoreError> {
        match self {
            AnyStore::Memory(store) => store.remove(counters, now_ms).await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.remove(counters, now_ms).await,
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.ping().await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.ping().await,
        }
    }

    async fn readiness(&self) -> Readiness {
        match self {
            AnyStore::Memory(store) => store.readiness().await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.readiness().await,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(store) => store.kind(),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.kind(),
        }
    }

    fn keeps_deadlines(&self) -> bool {
        match self {
            AnyStore::Memory(store) => store.keeps_deadlines(),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => store.keeps_deadlines(),
        }
    }
}
