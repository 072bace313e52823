//! What a check answers: a [`Decision`] (being over a limit is one), or a
//! [`CheckError`] for a request that cannot be decided; and where a
//! decision came from.

use super::MAX_KEY_BYTES;
use crate::policy::{MAX_AMOUNT, Policy, PolicyError};
use crate::store::StoreError;
use crate::window::{self, LimitState, Verdict};

pub use crate::source::Source;

/// The answer to a check, peek or report. Being over a limit is a normal
/// decision (`allowed: false`), not an error.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    /// Whether this call added its cost to the counters.
    pub counted: bool,
    /// 0 when allowed; otherwise the wait until the same request would be
    /// admitted if nothing else were counted; `None` if it never can be.
    pub retry_after_ms: Option<u64>,
    /// Each limit of the policy, in order.
    pub limits: Vec<LimitState>,
    pub source: Source,
    /// The policy is in shadow mode ([`Policy::with_shadow`](crate::Policy::with_shadow)): `allowed` is
    /// always true, and `would_allow` says what it would have decided.
    pub shadow: bool,
    /// The decision without shadow mode; equal to `allowed` otherwise.
    pub would_allow: bool,
    /// The instant, on the limiter's clock, the decision was made for: the
    /// buckets read are this instant's, and `retry_after_ms` counts from it.
    pub decided_at_ms: u64,
}

impl Decision {
    /// What the metrics count of it.
    pub(crate) fn decided(&self) -> crate::metrics::Decided {
        crate::metrics::Decided {
            source: self.source,
            allowed: self.allowed,
            shadow_refusal: self.shadow && !self.would_allow,
        }
    }

    pub(super) fn new(verdict: Verdict, source: Source) -> Decision {
        Decision {
            allowed: verdict.allowed,
            counted: verdict.counted,
            retry_after_ms: verdict.retry_after_ms,
            limits: verdict.limits,
            source,
            shadow: false,
            would_allow: verdict.allowed,
            decided_at_ms: verdict.decided_at_ms,
        }
    }

    /// The smallest `remaining` over the limits.
    pub fn remaining(&self) -> u64 {
        window::smallest_remaining(&self.limits)
    }
}

/// A request the limiter cannot decide.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("key: {0}")]
    InvalidKey(String),
    #[error("cost: must be an integer from 1 to {MAX_AMOUNT}, got {0}")]
    InvalidCost(u64),
    /// The policy touches more counters than the limiter allows
    /// ([`LimiterBuilder::max_counters`](super::LimiterBuilder::max_counters)).
    #[error("limits: {0}")]
    InvalidPolicy(PolicyError),
    /// The store failed and the failure mode is [`FailureMode::Deny`](super::FailureMode::Deny).
    #[error("rate-limit store unavailable: {0}")]
    StoreUnavailable(StoreError),
}

/// The key, cost and counter rules every entry point checks first.
pub(super) fn validate(
    key: &str,
    policy: &Policy,
    cost: u64,
    max_counters: usize,
) -> Result<(), CheckError> {
    policy
        .within(max_counters)
        .map_err(CheckError::InvalidPolicy)?;
    if key.is_empty() {
        return Err(CheckError::InvalidKey("must not be empty".to_owned()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(CheckError::InvalidKey(format!(
            "must be at most {MAX_KEY_BYTES} bytes, got {}",
            key.len()
        )));
    }
    valid_cost(cost)
}

/// A request's cost as every face takes it: from 1 to [`MAX_AMOUNT`].
pub(crate) fn valid_cost(cost: u64) -> Result<(), CheckError> {
    if cost == 0 || cost > MAX_AMOUNT {
        return Err(CheckError::InvalidCost(cost));
    }
    Ok(())
}
