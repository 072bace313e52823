//! What the limiter counts about itself, as `prometheus-client` metrics.
//!
//! Every handle is registered once; the hot path only bumps atomics behind
//! handles it already holds. Labels come from the configuration (a policy's
//! name, `inline` for limits given in a request) or from fixed sets, never
//! from keys, so the number of series is bounded whatever clients send.
//!
//! A library user exposes them with [`Metrics::register`] into their own
//! [`Registry`]; the server does the same for `GET /metrics`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub mod catalogue;
pub mod clock;
mod families;
mod last_error;
mod latency;
pub mod store;
mod striped;

pub use self::families::FAMILIES;
use self::last_error::LastError;
use self::latency::LatencyHistogram;
use self::striped::{Striped, StripedArray};
use crate::by_name::ByName;
use crate::source::Source;
use crate::store::StoreError;

/// The limiter's counters: striped, so that the cores counting every
/// check do not take turns owning one cache line (see [`striped`]).
type Counter = prometheus_client::metrics::counter::Counter<u64, Striped>;

/// Upper bounds of the latency buckets, in seconds: 100 µs (a near-cache
/// answer) to 60 s, the longest `memcached.timeout_ms` a file may set, so
/// that a check that waits out any configured timeout lands in a finite
/// bucket.
pub(crate) const LATENCY_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// How a decision ended, for `slidegate_decisions_total{outcome}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// Admitted by the store's counts.
    allowed,
    /// Refused by the store's counts.
    rejected,
    /// Refused from the near-cache, without a store round trip.
    near_cache,
    /// The store failed: the failure mode decided (either way).
    fallback,
    /// A shadow policy would have refused, and admitted.
    shadow,
    /// An exempt key or client address: admitted, nothing counted.
    exempt,
}

impl Outcome {
    const ALL: [Outcome; 6] = [
        Outcome::allowed,
        Outcome::rejected,
        Outcome::near_cache,
        Outcome::fallback,
        Outcome::shadow,
        Outcome::exempt,
    ];

    fn of(decided: Decided) -> Outcome {
        if decided.shadow_refusal {
            Outcome::shadow
        } else {
            match (decided.source, decided.allowed) {
                (Source::Fallback, _) => Outcome::fallback,
                (Source::Exempt, _) => Outcome::exempt,
                (Source::NearCache, _) => Outcome::near_cache,
                (Source::Store, true) => Outcome::allowed,
                (Source::Store, false) => Outcome::rejected,
            }
        }
    }
}

/// A decision as the metrics count it: plain values the limiter hands
/// over, so that this module needs none of the limiter's types.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decided {
    pub source: Source,
    pub allowed: bool,
    /// Shadow mode admitted what the limits refused.
    pub shadow_refusal: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    policy: String,
    outcome: Outcome,
}

/// Why a store call failed, for `slidegate_store_errors_total{kind}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ErrorKind {
    /// No answer within the timeout.
    timeout,
    /// No connection: refused, reset, unreachable.
    refused,
    /// An unexpected answer, or a connection lost mid-request.
    protocol,
    /// Too many requests already waiting: refused without being sent. Or
    /// a store slower than a sub-bucket: each attempt of a check crossed a
    /// bucket boundary, and the failure mode decided it.
    overloaded,
}

impl ErrorKind {
    fn of(error: &StoreError) -> ErrorKind {
        match error {
            StoreError::Timeout(_) => ErrorKind::timeout,
            StoreError::Unreachable(_) => ErrorKind::refused,
            StoreError::Ambiguous(_) | StoreError::Protocol(_) => ErrorKind::protocol,
            StoreError::Overloaded(_) => ErrorKind::overloaded,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: ErrorKind,
}

/// One policy's decision counters, one per outcome, taken from the family
/// once so that counting is one atomic add.
#[derive(Debug)]
struct PolicyCounters([Counter; Outcome::ALL.len()]);

impl PolicyCounters {
    fn new(family: &Family<DecisionLabels, Counter>, policy: &str) -> PolicyCounters {
        PolicyCounters(Outcome::ALL.map(|outcome| {
            family.get_or_create_owned(&DecisionLabels {
                policy: policy.to_owned(),
                outcome,
            })
        }))
    }

    fn count(&self, outcome: Outcome) {
        self.0[outcome as usize].inc();
    }
}

pub struct Metrics {
    decisions: Family<DecisionLabels, Counter>,
    /// Every check counts its policy's outcome: found without a shared lock
    /// (see [`ByName`]).
    by_policy: ByName<PolicyCounters>,
    inline: PolicyCounters,
    check_duration: LatencyHistogram,
    store_duration: LatencyHistogram,
    store_calls: Counter,
    store_errors: Family<KindLabels, Counter>,
    store_errors_by_kind: [Counter; 4],
    last_store_error: LastError,
    rollback_failures: Counter,
    coalesced_checks: Counter,
    near_cache_hits: Counter,
    near_cache_entries: Gauge,
    // Decisions by source, for `MetricsSnapshot` (tests and embedders).
    /// Allowed by source, then rejected by source.
    by_source: StripedArray<{ 2 * Source::ALL.len() }>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let decisions = Family::<DecisionLabels, Counter>::default();
        let store_errors = Family::<KindLabels, Counter>::default();
        let store_errors_by_kind = [
            ErrorKind::timeout,
            ErrorKind::refused,
            ErrorKind::protocol,
            ErrorKind::overloaded,
        ]
        .map(|kind| store_errors.get_or_create_owned(&KindLabels { kind }));
        Metrics {
            inline: PolicyCounters::new(&decisions, crate::policy::INLINE_SCOPE),
            decisions,
            by_policy: ByName::default(),
            check_duration: LatencyHistogram::new(&LATENCY_BUCKETS),
            store_duration: LatencyHistogram::new(&LATENCY_BUCKETS),
            store_calls: Counter::default(),
            store_errors,
            store_errors_by_kind,
            last_store_error: LastError::default(),
            rollback_failures: Counter::default(),
            coalesced_checks: Counter::default(),
            near_cache_hits: Counter::default(),
            near_cache_entries: Gauge::default(),
            by_source: StripedArray::default(),
        }
    }
}

/// A copy of the counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Decisions by source ([`Source::ALL`] order), allowed and rejected.
    pub allowed: [u64; Source::ALL.len()],
    pub rejected: [u64; Source::ALL.len()],
    /// Round trips to the store, rollbacks included.
    pub store_calls: u64,
    /// Store calls that failed or timed out.
    pub store_errors: u64,
    /// Rejected requests whose take-back was not confirmed: it failed (the
    /// cost stays counted until the bucket expires), or its answer came too
    /// late to wait for (it was sent, and usually applied).
    pub rollback_failures: u64,
    /// Checks that gathered behind another of their key and shared its
    /// batch's exchange instead of one of their own.
    pub coalesced_checks: u64,
}

impl MetricsSnapshot {
    /// Rejections answered from the near-cache, without the store.
    pub fn near_cache_hits(&self) -> u64 {
        self.rejected[Source::NearCache.index()]
    }
}

impl Metrics {
    /// Add the limiter's families to `registry` (prefix `slidegate_`). The
    /// registry holds handles to the same counters: register once, scrape
    /// as often as wanted; call [`crate::Limiter::refresh_gauges`] first.
    pub fn register(&self, registry: &mut Registry) {
        let [
            decisions,
            check_duration,
            store_duration,
            store_calls,
            store_errors,
            rollback_failures,
            coalesced_checks,
            near_cache_hits,
            near_cache_entries,
        ] = FAMILIES;
        decisions.register(registry, self.decisions.clone());
        check_duration.register(registry, self.check_duration.clone());
        store_duration.register(registry, self.store_duration.clone());
        store_calls.register(registry, self.store_calls.clone());
        store_errors.register(registry, self.store_errors.clone());
        rollback_failures.register(registry, self.rollback_failures.clone());
        coalesced_checks.register(registry, self.coalesced_checks.clone());
        near_cache_hits.register(registry, self.near_cache_hits.clone());
        near_cache_entries.register(registry, self.near_cache_entries.clone());
    }

    /// Create the series of a named policy now (every outcome at 0), so that
    /// dashboards see it before its first request and counting it never
    /// allocates.
    pub fn register_policy(&self, name: &str) {
        self.policy_counters(name);
    }

    /// Remove the series of a policy no longer configured (the server
    /// calls this for each policy a reload removes): Prometheus marks them
    /// stale, and the series follow the configuration in force. Configured
    /// again, the policy starts from zero. A check still being decided
    /// under the configuration before the removal may bring its series
    /// back (at zero, then counting it): a race of one reload's instant,
    /// bounded as before by the policies ever configured.
    pub fn forget_policy(&self, name: &str) {
        if name == crate::policy::INLINE_SCOPE {
            return;
        }
        self.by_policy.remove(name);
        for outcome in Outcome::ALL {
            self.decisions.remove(&DecisionLabels {
                policy: name.to_owned(),
                outcome,
            });
        }
    }

    fn policy_counters(&self, name: &str) -> Arc<PolicyCounters> {
        self.by_policy
            .get_or_create(name, |name| PolicyCounters::new(&self.decisions, name))
    }

    /// One decision of a policy (by its scope), and how long it took.
    pub(crate) fn decided(&self, scope: &str, decided: Decided, took: Duration) {
        self.check_duration.observe(took);
        self.count_outcome(scope, Outcome::of(decided));
    }

    /// A check the failure mode refused with an error (`deny`).
    pub(crate) fn refused_by_failure(&self, scope: &str, took: Duration) {
        self.check_duration.observe(took);
        self.count_outcome(scope, Outcome::fallback);
    }

    fn count_outcome(&self, scope: &str, outcome: Outcome) {
        if scope == crate::policy::INLINE_SCOPE {
            self.inline.count(outcome);
            return;
        }
        // A policy no one registered (a library user's) gets its series on
        // first use, once.
        self.by_policy.with(
            scope,
            |name| PolicyCounters::new(&self.decisions, name),
            |counters| counters.count(outcome),
        );
    }

    pub(crate) fn decision(&self, source: Source, allowed: bool) {
        let offset = if allowed { 0 } else { Source::ALL.len() };
        self.by_source.add(offset + source.index(), 1);
        if source == Source::NearCache {
            self.near_cache_hits.inc();
        }
    }

    /// One store round trip, its time and its failure if any.
    pub(crate) fn store_call(&self, took: Duration, error: Option<&StoreError>) {
        self.store_calls.inc();
        self.store_duration.observe(took);
        if let Some(error) = error {
            self.store_error(error);
        }
    }

    /// A store failure that is not one call's: a store too slow to decide
    /// with (every attempt of a check crossed a bucket boundary).
    pub(crate) fn store_error(&self, error: &StoreError) {
        self.store_errors_by_kind[ErrorKind::of(error) as usize].inc();
        self.last_store_error.record(error);
    }

    /// A store error a readiness probe met: the last error, not a failed
    /// call (the error counts are of calls that decide).
    pub(crate) fn saw_store_error(&self, error: &StoreError) {
        self.last_store_error.record(error);
    }

    /// The last store error a call or a readiness probe met, its text and
    /// how long ago; `None` while none has failed.
    pub fn last_store_error(&self) -> Option<(String, Duration)> {
        self.last_store_error.get()
    }

    pub(crate) fn rollback_failure(&self) {
        self.rollback_failures.inc();
    }

    pub(crate) fn coalesced(&self) {
        self.coalesced_checks.inc();
    }

    pub(crate) fn set_near_cache_entries(&self, entries: u64) {
        self.near_cache_entries
            .set(i64::try_from(entries).unwrap_or(i64::MAX));
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            allowed: std::array::from_fn(|at| self.by_source.get(at)),
            rejected: std::array::from_fn(|at| self.by_source.get(Source::ALL.len() + at)),
            store_calls: self.store_calls.get(),
            store_errors: self.store_errors_by_kind.iter().map(Counter::get).sum(),
            rollback_failures: self.rollback_failures.get(),
            coalesced_checks: self.coalesced_checks.get(),
        }
    }
}

#[cfg(test)]
mod tests;
