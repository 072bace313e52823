//! The [`Limiter`]: near-cache, then store, then window, then decision.
//!
//! A check costs one round trip when admitted: the older buckets are read
//! and the current bucket is incremented in one batch, and the value the
//! increment returns is the current count, so concurrent checks from any
//! number of instances each see a distinct count and cannot all slip under
//! the limit. Over the limit, the increment is taken back (a second round
//! trip) and the counts seen are remembered in the near-cache, so the next
//! rejects of that key cost none.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::near_cache::{NearCache, NearKey, Seen};
use crate::policy::{DEFAULT_MAX_COUNTERS, Policy};
use crate::store::{
    BatchCounts, CounterBatch, CounterKey, DEFAULT_MEMORY_CAPACITY, KeyDigest, MemoryStore, Store,
    StoreError,
};
use crate::window::{self, Counting, Verdict};

// Timing, counting by policy and shadow mode around check, peek, report.
mod observed;
// Several items decided as one request (Envoy RLS descriptors).
mod together;
// Checks whose bucket ended while their counters were in flight.
mod boundary;
// Which counters a call touches, and the counts their answers give.
mod counters;
// What a check answers.
mod decision;

use boundary::Crossing;
pub(crate) use counters::Counts;
use counters::{Layout, layout};
use decision::validate;
pub use decision::{CheckError, Decision, Source};
pub use together::Item;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The store timeout when none is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Near-cache capacity (keys) when none is configured.
pub const DEFAULT_NEAR_CACHE_CAPACITY: u64 = 100_000;

/// What to decide when the store fails or times out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Admit (fail open): an outage of the store is not an outage of the API.
    #[default]
    Allow,
    /// Refuse (fail closed): [`CheckError::StoreUnavailable`].
    Deny,
    /// Decide with counters in this process until the store is back.
    Local,
}

/// Decides requests against policies, with counters in a [`Store`].
/// Cheap to share: wrap it in an `Arc`.
///
/// ```
/// use std::time::Duration;
/// use slidegate::{FailureMode, Limit, Limiter, ManualClock, MemoryStore, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // With Memcached: `MemcachedStore::connect(&options).await?` instead.
/// let limiter = Limiter::builder(MemoryStore::new())
///     .timeout(Duration::from_millis(50))
///     .failure_mode(FailureMode::Allow)
///     // A clock that moves only when told, so the numbers below are exact.
///     .clock(ManualClock::new(1_700_000_000_000))
///     .build();
/// // 10 a second and 100 a minute: both must admit, then both count.
/// let policy = Policy::new(
///     "search",
///     vec![
///         Limit::per(10, Duration::from_secs(1))?,
///         Limit::per(100, Duration::from_secs(60))?,
///     ],
/// )?;
/// let decision = limiter.check("tenant-7", &policy, 3).await?;
/// assert!(decision.allowed);
/// assert_eq!(decision.remaining(), 7);
/// // A peek decides without counting.
/// assert_eq!(limiter.peek("tenant-7", &policy, 1).await?.remaining(), 7);
/// # Ok(())
/// # }
/// ```
pub struct Limiter<S> {
    store: S,
    clock: Arc<dyn Clock>,
    near_cache: NearCache,
    timeout: Duration,
    failure_mode: FailureMode,
    max_counters: usize,
    local: MemoryStore,
    metrics: Metrics,
    store_healthy: AtomicBool,
}

/// Settings of a [`Limiter`]; start from [`Limiter::builder`].
pub struct LimiterBuilder<S> {
    store: S,
    clock: Arc<dyn Clock>,
    near_cache_capacity: u64,
    near_cache_max_bytes: u64,
    timeout: Duration,
    failure_mode: FailureMode,
    max_counters: usize,
    local_capacity: usize,
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

    /// How long to wait for the store before the failure mode decides.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
    /// [`CheckError::InvalidPolicy`] before anything is read.
    pub fn max_counters(mut self, max_counters: usize) -> Self {
        self.max_counters = max_counters;
        self
    }

    pub fn build(self) -> Limiter<S> {
        Limiter {
            store: self.store,
            clock: self.clock,
            near_cache: NearCache::bounded(self.near_cache_capacity, self.near_cache_max_bytes),
            timeout: self.timeout,
            failure_mode: self.failure_mode,
            max_counters: self.max_counters,
            local: MemoryStore::with_capacity(self.local_capacity),
            metrics: Metrics::default(),
            store_healthy: AtomicBool::new(true),
        }
    }
}

impl<S: Store> Limiter<S> {
    pub fn builder(store: S) -> LimiterBuilder<S> {
        LimiterBuilder {
            store,
            clock: Arc::new(SystemClock),
            near_cache_capacity: DEFAULT_NEAR_CACHE_CAPACITY,
            near_cache_max_bytes: crate::near_cache::DEFAULT_MAX_BYTES,
            timeout: DEFAULT_TIMEOUT,
            failure_mode: FailureMode::default(),
            max_counters: DEFAULT_MAX_COUNTERS,
            local_capacity: DEFAULT_MEMORY_CAPACITY,
        }
    }

    /// A limiter with the default settings.
    pub fn new(store: S) -> Limiter<S> {
        Limiter::builder(store).build()
    }

    /// Decide a request of `cost` for `key` and, if admitted, count it.
    pub async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        self.observed(policy, self.decide(key, policy, cost, Counting::IfAdmitted))
            .await
    }

    /// The decision a check would make now, counting nothing.
    pub async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        self.observed(policy, self.decide(key, policy, cost, Counting::Never))
            .await
    }

    /// Count `cost` whatever the limits say (work that happened anyway); the
    /// decision says whether the counts are still within every limit.
    pub async fn report(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let started = Instant::now();
        let result = self.decide(key, policy, cost, Counting::Always).await;
        self.record(policy, &result, started);
        result
    }

    /// Whether the store answers within the timeout (any node of it).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.timed(self.store.ping()).await
    }

    /// [`ready`](Self::ready), with each node's state: what `/readyz`
    /// answers. A store slower than the timeout is not ready.
    pub async fn readiness(&self) -> crate::store::Readiness {
        match tokio::time::timeout(self.timeout, self.store.readiness()).await {
            Ok(readiness) => readiness,
            Err(_) => crate::store::Readiness {
                result: Err(StoreError::Timeout(self.timeout.as_millis() as u64)),
                nodes: Vec::new(),
            },
        }
    }

    /// The limiter's time now: what a face that keeps its own state beside
    /// the counters (RLQS streams) reads, so it moves with the decisions.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// What the limiter decides when the store fails.
    pub fn failure_mode(&self) -> FailureMode {
        self.failure_mode
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Counters held by failure mode `local` (expired ones not yet reused
    /// included).
    pub fn local_counters(&self) -> usize {
        self.local.len()
    }

    /// The near-cache's weight in bytes, settled (not for the request path).
    pub fn near_cache_bytes(&self) -> u64 {
        self.near_cache.settled_weight()
    }

    /// Keys currently remembered by the near-cache.
    pub fn near_cache_len(&self) -> u64 {
        self.near_cache.len()
    }

    async fn decide(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        mut counting: Counting,
    ) -> Result<Decision, CheckError> {
        validate(key, policy, cost, self.max_counters)?;
        // A check that can never pass must not be counted, even for the
        // instant before its rollback: answer it as a peek.
        if counting == Counting::IfAdmitted && cost > policy.max_cost() {
            counting = Counting::Never;
        }
        let digest = KeyDigest::of(policy.scope(), key);
        let near_key = NearKey::new(digest, policy);
        let mut now_ms = self.clock.now_ms();
        let mut attempt = 1;
        loop {
            if counting != Counting::Always
                && let Some(lower_bounds) = self.near_cache.lower_bounds(&near_key, policy, now_ms)
            {
                let verdict = window::decide(
                    policy.limits(),
                    &lower_bounds,
                    now_ms,
                    cost,
                    Counting::Never,
                );
                if !verdict.allowed {
                    return Ok(self.done(Decision::new(verdict, Source::NearCache)));
                }
            }

            let layouts: Vec<Layout> = policy
                .limits()
                .iter()
                .map(|limit| layout(digest, limit, now_ms))
                .collect();
            let batch = counters::batch(&layouts, cost, counting, now_ms);
            let counts = match self.timed(self.store.read_and_add(&batch)).await {
                Ok(found) => counters::counts_before(&layouts, &batch, found),
                Err(error) => {
                    return self
                        .fall_back(error, policy, &layouts, &batch, counting, now_ms)
                        .await;
                }
            };
            let verdict = window::decide(policy.limits(), &counts, now_ms, cost, counting);
            if !verdict.allowed && counting != Counting::Always {
                // A check added its cost to the current counters: take it back.
                let after_rollback = if batch.adds.is_empty() {
                    None
                } else {
                    self.roll_back(&batch.adds, cost, now_ms).await
                };
                self.remember(near_key, policy, &counts, after_rollback, cost, now_ms);
            } else if counting == Counting::IfAdmitted
                && let Some(crossing) = boundary::recheck(
                    policy.limits(),
                    now_ms,
                    self.clock.now_ms(),
                    attempt,
                    self.failure_mode,
                )
            {
                match crossing {
                    Crossing::Stands(error) => {
                        self.metrics.store_error(&error);
                        let decision = Decision::new(verdict, Source::Store);
                        return Ok(self.done(boundary::stands(decision)));
                    }
                    Crossing::Refused(error) => {
                        self.metrics.store_error(&error);
                        self.roll_back(&batch.adds, cost, now_ms).await;
                        return self
                            .fall_back(error, policy, &layouts, &batch, counting, now_ms)
                            .await;
                    }
                    Crossing::Retry => {
                        self.roll_back(&batch.adds, cost, now_ms).await;
                        now_ms = self.clock.now_ms();
                        attempt += 1;
                        continue;
                    }
                }
            }
            return Ok(self.done(Decision::new(verdict, Source::Store)));
        }
    }

    /// Take back a rejected request's increments. Returns each current
    /// counter's value after, when known. The increment is never retried:
    /// if this fails, the cost stays counted until the bucket expires, which
    /// errs on the side of rejecting.
    async fn roll_back(
        &self,
        currents: &[CounterKey],
        cost: u64,
        now_ms: u64,
    ) -> Option<Vec<Option<u64>>> {
        match self
            .timed(self.store.subtract(currents, cost, now_ms))
            .await
        {
            Ok(values) => Some(values),
            Err(error) => {
                self.metrics.rollback_failure();
                tracing::warn!(%error, cost, "could not take back a rejected request's increment");
                None
            }
        }
    }

    /// Remember a rejected key's counts in the near-cache, as lower bounds.
    ///
    /// A current count read by an increment can include increments of
    /// concurrent requests that are themselves being rejected and rolled
    /// back. Two bounds remove that excess: the value left after our own
    /// rollback (others may have rolled back by then), and the ceiling, the
    /// most that admitted requests can have left in the current bucket given
    /// the older ones.
    fn remember(
        &self,
        near_key: NearKey,
        policy: &Policy,
        counts: &[Counts],
        after_rollback: Option<Vec<Option<u64>>>,
        cost: u64,
        now_ms: u64,
    ) {
        let lower_bounds: Vec<Vec<u64>> = policy
            .limits()
            .iter()
            .zip(counts)
            .enumerate()
            .map(|(index, (limit, counts))| {
                let mut bounds = counts.to_vec();
                let ceiling = window::current_ceiling(*limit, counts, now_ms);
                let rolled_back = after_rollback
                    .as_ref()
                    .and_then(|values| values.get(index).copied().flatten())
                    .unwrap_or(u64::MAX);
                if let Some(current) = bounds.last_mut() {
                    *current = (*current).min(ceiling).min(rolled_back);
                }
                bounds
            })
            .collect();
        let verdict = window::decide(
            policy.limits(),
            &lower_bounds,
            now_ms,
            cost,
            Counting::Never,
        );
        // Remember only what rejects on its own, for as long as it does.
        let Some(lifetime) = verdict.retry_after_ms.filter(|_| !verdict.allowed) else {
            return;
        };
        let seen = policy
            .limits()
            .iter()
            .zip(lower_bounds)
            .map(|(limit, counts)| Seen {
                window: limit.window(),
                bucket: limit.window().bucket_of(now_ms),
                counts: counts.into(),
            });
        self.near_cache
            .remember(near_key, seen, Duration::from_millis(lifetime));
    }

    /// The store failed: the failure mode decides.
    async fn fall_back(
        &self,
        error: StoreError,
        policy: &Policy,
        layouts: &[Layout],
        batch: &CounterBatch,
        counting: Counting,
        now_ms: u64,
    ) -> Result<Decision, CheckError> {
        let cost = batch.amount;
        match self.failure_mode {
            FailureMode::Deny => {
                self.metrics.decision(Source::Fallback, false);
                Err(CheckError::StoreUnavailable(error))
            }
            FailureMode::Allow => {
                // Counts are unknown: decide as if empty, which still refuses
                // a cost no limit could ever admit.
                let empty: Vec<Vec<u64>> =
                    layouts.iter().map(|layout| vec![0; layout.len()]).collect();
                let verdict =
                    window::decide(policy.limits(), &empty, now_ms, cost, Counting::Never);
                Ok(self.done(Decision::new(verdict, Source::Fallback)))
            }
            FailureMode::Local => {
                // The in-memory store cannot fail; its calls are not store
                // round trips, so they bypass `timed`.
                let found = self
                    .local
                    .read_and_add(batch)
                    .await
                    .map_err(CheckError::StoreUnavailable)?;
                let counts = counters::counts_before(layouts, batch, found);
                let verdict = window::decide(policy.limits(), &counts, now_ms, cost, counting);
                if !verdict.allowed && !verdict.counted && !batch.adds.is_empty() {
                    let _ = self.local.subtract(&batch.adds, cost, now_ms).await;
                }
                Ok(self.done(Decision::new(verdict, Source::Fallback)))
            }
        }
    }

    fn done(&self, decision: Decision) -> Decision {
        self.metrics.decision(decision.source, decision.allowed);
        decision
    }

    /// A store call under the timeout, with its outcome recorded. Logs only
    /// when the store's health changes, so an outage under load is one line,
    /// not one per request.
    async fn timed<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(self.timeout.as_millis() as u64)),
        };
        self.metrics
            .store_call(started.elapsed(), result.as_ref().err());
        match &result {
            Ok(_) => {
                if !self.store_healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!(store = self.store.kind(), "store answers again");
                }
            }
            Err(error) => {
                if self.store_healthy.swap(false, Ordering::Relaxed) {
                    tracing::warn!(store = self.store.kind(), %error, mode = ?self.failure_mode, "store failing; the failure mode decides until it answers");
                } else {
                    tracing::debug!(store = self.store.kind(), %error, "store call failed");
                }
            }
        }
        result
    }
}
