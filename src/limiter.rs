//! The [`Limiter`]: every decision, a check or a request of several items
//! (Envoy RLS), goes down one pipeline. A check is a request of one item.
//!
//! ```text
//!  check / peek / report / check_all          (limiter.rs: the entry points)
//!       |  validate; one Part per item (digest, near-cache key)
//!       v
//!  screen   near-cache: may refuse first;      (screen.rs)
//!       |   an old entry is read again first
//!       v
//!  exchange join the exchange in flight for    (exchange.rs, exchange/gather.rs)
//!       |   the same parts, or lead one: each
//!       |   part's batch, all at once, under
//!       |   the request's deadline             (decide.rs: joining; lead.rs: leading)
//!       v
//!  reckon   pure: the batch in arrival order ->  (reckon.rs)
//!       |   admitted, taken back, remembered
//!       |-- boundary crossed: take back, again (boundary.rs)
//!       |-- store failed: fall back, once      (fallback.rs)
//!       v
//!  answer the others, take back, remember      (lead.rs)
//!       v
//!  observe  metrics by policy; shadow mode     (observed.rs)
//! ```
//!
//! A check costs one round trip when admitted: the older buckets are read
//! and the current bucket is incremented in one batch, and the value the
//! increment returns is the current count, so concurrent checks from any
//! number of instances each see a distinct count and cannot all slip under
//! the limit. Over the limit, the increment is taken back (a second round
//! trip) and the counts seen are remembered in the near-cache, so the next
//! rejects of that key cost none. Concurrent requests of the same parts in
//! one instance share one exchange, decided in arrival order exactly as if
//! each had come alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::policy::Policy;
use crate::store::{Store, StoreError};
use crate::window::Counting;

// The limiter's settings and their defaults.
mod builder;
// What travels down the pipeline: items, parts, costs.
mod request;
// Stage: the near-cache, and reading the store again when it is old.
mod screen;
// Stage: the store under a request's deadline; coalescing.
mod exchange;
// Stage: the pure reckoning of a batch.
mod reckon;
// Stage: the failure modes.
mod fallback;
// Stage: metrics by policy, shadow mode.
mod observed;
// The pipeline's front half: validate, screen, join or lead.
mod decide;
// The pipeline's back half: a batch's exchange, answers, take-back.
mod lead;
// Checks whose bucket ended while their counters were in flight.
mod boundary;
// Which counters a call touches, and the counts their answers give.
mod counters;
// What a check answers.
mod decision;
// One deadline for all of a request's store calls.
mod deadline;
// Additions no caller has been told of, taken back if dropped.
// Removing a key's counters (`POST /v1/reset`).
mod reset;
// Keys that are never limited.
mod exempt;

pub use builder::LimiterBuilder;
use deadline::Deadline;
#[cfg(feature = "server")]
pub(crate) use decision::valid_cost;
use decision::validate;
pub use decision::{CheckError, Decision, Source};
use exchange::Exchange;
pub use fallback::FailureMode;
use fallback::Fallback;
use observed::observed;
pub use request::Item;
use screen::Screen;

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
    screen: Screen,
    exchange: Exchange<S>,
    fallback: Fallback,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    max_counters: AtomicUsize,
}

impl<S: Store> Limiter<S> {
    pub fn builder(store: S) -> LimiterBuilder<S> {
        LimiterBuilder::new(store)
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
        // Not through a shared async helper: each level of future a check
        // goes through is moved whole when it is created.
        let started = Instant::now();
        let items = [Item { key, policy, cost }];
        let result = self.decide(&items, Counting::IfAdmitted, started).await;
        self.observed_one(policy, result, started, true)
    }

    /// The decision a check would make now, counting nothing.
    pub async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        // Not through a shared async helper: each level of future a check
        // goes through is moved whole when it is created.
        let started = Instant::now();
        let items = [Item { key, policy, cost }];
        let result = self.decide(&items, Counting::Never, started).await;
        self.observed_one(policy, result, started, true)
    }

    /// Count `cost` whatever the limits say (work that happened anyway); the
    /// decision says whether the counts are still within every limit.
    pub async fn report(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        // Not through a shared async helper: each level of future a check
        // goes through is moved whole when it is created.
        let started = Instant::now();
        let items = [Item { key, policy, cost }];
        let result = self.decide(&items, Counting::Always, started).await;
        self.observed_one(policy, result, started, false)
    }

    /// Decide `items` as one request: each decision says whether its item
    /// alone would be admitted (`allowed`) and whether it was counted
    /// (`counted`, the same for all: all were, or none). Envoy's rate-limit
    /// protocol refuses a request if any descriptor is over its limit:
    /// counting the others anyway would spend their quota on a request that
    /// never ran. An item rejected by the near-cache or that can never pass
    /// decides the request without counting anything; the others are then
    /// only read. When the store fails, [`FailureMode::Local`] decides the
    /// whole request the same way on this process's counters.
    pub async fn check_all(&self, items: &[Item<'_>]) -> Result<Vec<Decision>, CheckError> {
        let started = Instant::now();
        match self.decide(items, Counting::IfAdmitted, started).await {
            Ok(decisions) => Ok(items
                .iter()
                .zip(decisions)
                .filter_map(|(item, decision)| {
                    observed(&self.metrics, item.policy, Ok(decision), started, true).ok()
                })
                .collect()),
            // Counted once, under the first item's policy.
            Err(error) => match items.first() {
                Some(item) => observed(&self.metrics, item.policy, Err(error), started, true)
                    .map(|decision| vec![decision]),
                None => Err(error),
            },
        }
    }

    /// The decision of a request of one item, observed.
    #[inline]
    fn observed_one(
        &self,
        policy: &Policy,
        result: Result<request::Decisions, CheckError>,
        started: Instant,
        shadow: bool,
    ) -> Result<Decision, CheckError> {
        let result =
            result.map(|mut decisions| decisions.pop().unwrap_or_else(decide::refused_by_error));
        observed(&self.metrics, policy, result, started, shadow)
    }

    /// Admit a request of `cost` for exempt `key` under `policy`: nothing
    /// is read or counted; each limit shows its whole quota; counted as
    /// outcome `exempt`. The key and cost are held to what a check's are:
    /// an exemption passes requests, not bad input.
    pub fn exempt(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, CheckError> {
        validate(key, policy, cost, self.max_counters())?;
        let started = Instant::now();
        let decision = exempt::exempt(policy, self.clock.now_ms());
        observed(&self.metrics, policy, Ok(decision), started, false)
    }

    /// Remove `key`'s counters under `policy` from the store (and from
    /// failure mode `local`'s counters, and this instance's near-cache).
    /// Returns how many counters the store held.
    pub async fn reset(&self, key: &str, policy: &Policy) -> Result<usize, CheckError> {
        validate(key, policy, 1, self.max_counters())?;
        let stages = (&self.exchange, &self.fallback, &self.screen);
        reset::reset(stages, key, policy, self.clock.now_ms()).await
    }

    /// Whether the store answers within the timeout (any node of it).
    pub async fn ready(&self) -> Result<(), StoreError> {
        let exchange = &self.exchange;
        let deadline = Deadline::after(exchange.timeout);
        exchange.timed(deadline, exchange.store.ping()).await
    }

    /// [`ready`](Self::ready), with each node's state: what `/readyz`
    /// answers. A store slower than the timeout is not ready.
    pub async fn readiness(&self) -> crate::store::Readiness {
        let timeout = self.exchange.timeout;
        let readiness = match tokio::time::timeout(timeout, self.exchange.store.readiness()).await {
            Ok(readiness) => readiness,
            Err(_) => crate::store::Readiness {
                result: Err(StoreError::Timeout(timeout.as_millis() as u64)),
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
        self.fallback.mode
    }

    /// The most counters one check's policy may touch now.
    pub fn max_counters(&self) -> usize {
        self.max_counters.load(Ordering::Relaxed)
    }

    /// Change [`max_counters`](Self::max_counters) while serving (a reload):
    /// checks from now on are held to the new bound.
    pub fn set_max_counters(&self, max_counters: usize) {
        self.max_counters.store(max_counters, Ordering::Relaxed);
    }

    pub fn store(&self) -> &S {
        &self.exchange.store
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The limiter's metrics, to register into a Prometheus registry
    /// ([`Metrics::register`]).
    pub fn metrics_handles(&self) -> &Metrics {
        &self.metrics
    }

    /// Bring the gauges (near-cache entries) up to date before a scrape.
    pub fn refresh_gauges(&self) {
        let entries = self.screen.near_cache.settled_len();
        self.metrics.set_near_cache_entries(entries);
    }

    /// Counters held by failure mode `local` (expired ones not yet reused
    /// included).
    pub fn local_counters(&self) -> usize {
        self.fallback.local.len()
    }

    /// The near-cache's weight in bytes, settled (not for the request path).
    pub fn near_cache_bytes(&self) -> u64 {
        self.screen.near_cache.settled_weight()
    }

    /// Keys currently remembered by the near-cache.
    pub fn near_cache_len(&self) -> u64 {
        self.screen.near_cache.len()
    }
}
