//! What happens around a decision: its time and outcome counted under its
//! policy's name ([`crate::metrics`]), and shadow mode applied. Kept apart
//! from the decision itself, which does not need to know.

use std::time::Instant;

use super::{CheckError, Decision, Limiter};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::store::Store;

impl<S: Store> Limiter<S> {
    /// A check or peek's result, timed from `started` and counted by
    /// policy; shadow mode applied. Not a wrapper future around the
    /// decision: that would hold the decision's whole state twice.
    pub(super) fn observed(
        &self,
        policy: &Policy,
        mut result: Result<Decision, CheckError>,
        started: Instant,
    ) -> Result<Decision, CheckError> {
        if policy.is_shadow() {
            result = result.map(shadowed);
        }
        self.record(policy, &result, started);
        result
    }

    pub(super) fn record(
        &self,
        policy: &Policy,
        result: &Result<Decision, CheckError>,
        started: Instant,
    ) {
        let took = started.elapsed();
        match result {
            Ok(decision) => self
                .metrics
                .decided(policy.scope(), decision.decided(), took),
            Err(CheckError::StoreUnavailable(_)) => {
                self.metrics.refused_by_failure(policy.scope(), took)
            }
            Err(_) => {}
        }
    }

    /// The limiter's metrics, to register into a Prometheus registry
    /// ([`Metrics::register`]).
    pub fn metrics_handles(&self) -> &Metrics {
        &self.metrics
    }

    /// Bring the gauges (near-cache entries) up to date before a scrape.
    pub fn refresh_gauges(&self) {
        self.metrics
            .set_near_cache_entries(self.near_cache.settled_len());
    }
}

/// A shadow policy's decision: admitted, saying what it would have decided.
/// A refused check was not counted (or was rolled back), as without shadow.
fn shadowed(mut decision: Decision) -> Decision {
    decision.shadow = true;
    decision.would_allow = decision.allowed;
    decision.allowed = true;
    decision
}
