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
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::near_cache::{NearCache, NearKey};
use crate::policy::Policy;
use crate::store::{
    BatchCounts, CounterBatch, CounterKey, KeyDigest, MemoryStore, Store, StoreError,
};
use crate::window::{self, Counting, Verdict};

// The limiter's settings and their defaults.
mod builder;
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
// Concurrent checks of one key sharing one store exchange.
mod coalesce;
// One deadline for all of a check's store calls.
mod deadline;
// When the store fails: the failure mode decides.
mod failure;
// Rejected keys' counts kept in the near-cache.
mod remembered;
// Additions no caller has been told of, taken back if dropped.
mod owed;
// Removing a key's counters (`POST /v1/reset`).
mod reset;
// Keys that are never limited.
mod exempt;
// Near-cache refusals, and reading the store again when they are old.
mod revalidate;

use boundary::Crossing;
pub use builder::LimiterBuilder;
pub(crate) use counters::Counts;
use counters::layout;
use deadline::Deadline;
#[cfg(feature = "server")]
pub(crate) use decision::valid_cost;
use decision::validate;
pub use decision::{CheckError, Decision, Source};
pub use failure::FailureMode;
use revalidate::Screened;
pub use together::Item;

/// The longest key accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// A check's deadline for its store work when none is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// Near-cache capacity (keys) when none is configured.
pub const DEFAULT_NEAR_CACHE_CAPACITY: u64 = 100_000;

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
    store: Arc<S>,
    clock: Arc<dyn Clock>,
    near_cache: NearCache,
    timeout: Duration,
    failure_mode: FailureMode,
    max_counters: std::sync::atomic::AtomicUsize,
    local: MemoryStore,
    metrics: Metrics,
    store_healthy: AtomicBool,
    /// Same-key checks in flight together share an exchange; `None` when
    /// coalescing is off.
    coalescer: Option<coalesce::Coalescer>,
}

impl<S: Store> Limiter<S> {
    /// Decide a request of `cost` for `key` and, if admitted, count it.
    pub async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let started = Instant::now();
        let result = self
            .decide(key, policy, cost, Counting::IfAdmitted, started)
            .await;
        self.observed(policy, result, started)
    }

    /// The decision a check would make now, counting nothing.
    pub async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let started = Instant::now();
        let result = self
            .decide(key, policy, cost, Counting::Never, started)
            .await;
        self.observed(policy, result, started)
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
        let result = self
            .decide(key, policy, cost, Counting::Always, started)
            .await;
        self.record(policy, &result, started);
        result
    }

    /// Whether the store answers within the timeout (any node of it).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.timed(Deadline::after(self.timeout), self.store.ping())
            .await
    }

    /// [`ready`](Self::ready), with each node's state: what `/readyz`
    /// answers. A store slower than the timeout is not ready.
    pub async fn readiness(&self) -> crate::store::Readiness {
        let readiness = match tokio::time::timeout(self.timeout, self.store.readiness()).await {
            Ok(readiness) => readiness,
            Err(_) => crate::store::Readiness {
                result: Err(StoreError::Timeout(self.timeout.as_millis() as u64)),
                nodes: Vec::new(),
            },
        };
        if let Err(error) = &readiness.result {
            self.metrics.saw_store_error(error);
        }
        readiness
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

    /// The most counters one check's policy may touch now.
    pub fn max_counters(&self) -> usize {
        self.max_counters.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Change [`max_counters`](Self::max_counters) while serving (a reload):
    /// checks from now on are held to the new bound.
    pub fn set_max_counters(&self, max_counters: usize) {
        self.max_counters
            .store(max_counters, std::sync::atomic::Ordering::Relaxed);
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
        started: Instant,
    ) -> Result<Decision, CheckError> {
        validate(key, policy, cost, self.max_counters())?;
        let deadline = Deadline::starting_at(started.into(), self.timeout);
        // A check that can never pass must not be counted, even for the
        // instant before its rollback: answer it as a peek.
        if counting == Counting::IfAdmitted && cost > policy.max_cost() {
            counting = Counting::Never;
        }
        let digest = KeyDigest::of(policy.scope(), key);
        let near_key = NearKey::new(digest, policy);
        let now_ms = self.clock.now_ms();
        let read_again = if counting == Counting::Always {
            false
        } else {
            match self
                .near_cache_refusal(digest, near_key, policy, cost, now_ms, deadline)
                .await
            {
                Screened::Refused(refused) => return Ok(self.done(refused)),
                Screened::Passed { read_again } => read_again,
            }
        };
        let arrival = coalesce::Arrival {
            digest,
            near_key,
            cost,
            counting,
            now_ms,
            deadline,
            read_again,
        };
        match &self.coalescer {
            Some(coalescer) => self.decide_together(coalescer, policy, arrival).await,
            // Without coalescing, a check is a batch of one.
            None => {
                self.lead(&mut coalesce::Lead::alone(), policy, arrival)
                    .await
            }
        }
    }

    /// Take back a rejected request's increments. Returns each current
    /// counter's value after, when known. Sent however little of the
    /// check's time is left, and waited for only until its deadline. The
    /// increment is never retried: if this fails, the cost stays counted
    /// until the bucket expires, which errs on the side of rejecting.
    async fn roll_back(
        &self,
        deadline: Deadline,
        currents: &[CounterKey],
        cost: u64,
        now_ms: u64,
    ) -> Option<Vec<Option<u64>>> {
        match self
            .timed_sent(deadline, self.store.subtract(currents, cost, now_ms))
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

    fn done(&self, decision: Decision) -> Decision {
        self.metrics.decision(decision.source, decision.allowed);
        decision
    }
}
