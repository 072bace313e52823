//! The settings of a [`Limiter`] and their defaults: [`Limiter::builder`],
//! [`LimiterBuilder`], and [`Limiter::new`] for the defaults as they are.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use super::exchange::Exchange;
use super::fallback::Fallback;
use super::screen::Screen;
use super::{DEFAULT_NEAR_CACHE_CAPACITY, DEFAULT_TIMEOUT, FailureMode, Limiter};
use crate::clock::{Clock, SystemClock};
use crate::metrics::Metrics;
use crate::near_cache::{DEFAULT_REVALIDATE, NearCache};
use crate::policy::DEFAULT_MAX_COUNTERS;
use crate::store::{DEFAULT_MEMORY_CAPACITY, MemoryStore, Store};

/// Settings of a [`Limiter`]; start from [`Limiter::builder`].
pub struct LimiterBuilder<S> {
    store: S,
    clock: Arc<dyn Clock>,
    near_cache_capacity: u64,
    near_cache_max_bytes: u64,
    near_cache_revalidate: Duration,
    timeout: Duration,
    failure_mode: FailureMode,
    max_counters: usize,
    local_capacity: usize,
    coalesce: bool,
}

impl<S: Store> LimiterBuilder<S> {
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How many keys the near-cache of hot rejects holds; 0 turns it off.
    pub fn near_cache_capacity(mut self, capacity: u64) -> Self {
        self.near_cache_capacity = capacity;
        self
    }

    /// How many bytes the near-cache may hold (each entry weighs its real
    /// size, its counts included); 0 turns it off.
    pub fn near_cache_max_bytes(mut self, max_bytes: u64) -> Self {
        self.near_cache_max_bytes = max_bytes;
        self
    }

    /// How long a near-cache entry is trusted after its counts were read;
    /// then one check reads the store again before it refuses again, so a
    /// reset (or an evicted counter) is seen within this interval.
    pub fn near_cache_revalidate(mut self, interval: Duration) -> Self {
        self.near_cache_revalidate = interval;
        self
    }

    /// How long a check may wait for the store, all its calls together (one
    /// deadline from its start), before the failure mode decides. Held
    /// within 1 ms and an hour ([`bounded_timeout`](crate::store::bounded_timeout)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = crate::store::bounded_timeout(timeout);
        self
    }

    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// Counters failure mode `local` holds before it evicts (the server
    /// passes `memory.capacity`): an outage under a flood of distinct keys
    /// costs bounded memory.
    pub fn local_capacity(mut self, capacity: usize) -> Self {
        self.local_capacity = capacity;
        self
    }

    /// The most counters one check's policy may touch (precision + 1 summed
    /// over its limits); a policy past it is refused with
    /// [`CheckError::InvalidPolicy`](super::CheckError::InvalidPolicy) before anything is read.
    pub fn max_counters(mut self, max_counters: usize) -> Self {
        self.max_counters = max_counters;
        self
    }

    /// Whether concurrent checks of one key and policy share one store
    /// exchange (on by default; see the exchange stage): exact either
    /// way, and a hot key costs a fraction of an exchange per check.
    pub fn coalesce(mut self, coalesce: bool) -> Self {
        self.coalesce = coalesce;
        self
    }

    pub fn build(self) -> Limiter<S> {
        let metrics = Arc::new(Metrics::default());
        let near_cache = NearCache::bounded(self.near_cache_capacity, self.near_cache_max_bytes)
            .with_revalidate(self.near_cache_revalidate);
        Limiter {
            screen: Screen { near_cache },
            exchange: Exchange::new(
                self.store,
                self.coalesce,
                self.timeout,
                metrics.clone(),
                self.failure_mode,
            ),
            fallback: Fallback {
                mode: self.failure_mode,
                local: MemoryStore::with_capacity(self.local_capacity),
            },
            metrics,
            clock: self.clock,
            max_counters: AtomicUsize::new(self.max_counters),
        }
    }

    pub(super) fn new(store: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            store,
            clock: Arc::new(SystemClock),
            near_cache_capacity: DEFAULT_NEAR_CACHE_CAPACITY,
            near_cache_max_bytes: crate::near_cache::DEFAULT_MAX_BYTES,
            near_cache_revalidate: DEFAULT_REVALIDATE,
            timeout: DEFAULT_TIMEOUT,
            failure_mode: FailureMode::default(),
            max_counters: DEFAULT_MAX_COUNTERS,
            local_capacity: DEFAULT_MEMORY_CAPACITY,
            coalesce: true,
        }
    }
}
