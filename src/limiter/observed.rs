//! The last stage, observe: a decision's time and outcome counted under
//! its policy's name ([`crate::metrics`]), and shadow mode applied. Kept
//! apart from the decision itself, which does not need to know. Every
//! entry point's decisions pass here, once.

use std::time::Instant;

use super::{CheckError, Decision};
use crate::metrics::Metrics;
use crate::policy::Policy;

/// A decision's result, timed from `started`, counted by source and by
/// policy; shadow mode applied when `shadow` (checks and peeks, not
/// reports).
#[inline]
pub(super) fn observed(
    metrics: &Metrics,
    policy: &Policy,
    mut result: Result<Decision, CheckError>,
    started: Instant,
    shadow: bool,
) -> Result<Decision, CheckError> {
    match &result {
        Ok(decision) => metrics.decision(decision.source, decision.allowed),
        Err(CheckError::StoreUnavailable(_)) => {
            metrics.decision(crate::source::Source::Fallback, false)
        }
        Err(_) => {}
    }
    if shadow && policy.is_shadow() {
        result = result.map(shadowed);
    }
    record(metrics, policy, &result, started);
    result
}

/// Count a finished decision under its policy.
pub(super) fn record(
    metrics: &Metrics,
    policy: &Policy,
    result: &Result<Decision, CheckError>,
    started: Instant,
) {
    let took = started.elapsed();
    match result {
        Ok(decision) => metrics.decided(policy.scope(), decision.decided(), took),
        Err(CheckError::StoreUnavailable(_)) => metrics.refused_by_failure(policy.scope(), took),
        Err(_) => {}
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
