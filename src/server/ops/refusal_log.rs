//! Refused decisions in the log, at a bounded rate (`log.refusals_per_s`):
//! enough lines to answer "which limit refused this client", never a flood
//! that fills the disk. Refusals past the rate are only counted
//! (`slidegate_refusals_not_logged_total`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::clock::{Clock, SystemClock};
use crate::limiter::Decision;
use crate::metrics::catalogue::{Described, Kind};

/// The refusal log's family.
pub(crate) const FAMILIES: &[Described; 1] = &[Described {
    name: "slidegate_refusals_not_logged",
    kind: Kind::Counter,
    labels: &[],
    help: "Refused decisions not logged because log.refusals_per_s were already logged that second.",
}];

/// Where a refused call came in.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Face {
    /// `POST /v1/check`.
    Check,
    /// `GET /v1/auth`, a proxy's forward-auth sub-request.
    ForwardAuth,
    /// Envoy's `ShouldRateLimit`: the policy is the rule's path (its
    /// domain first), the key the descriptor's entries.
    #[cfg(feature = "grpc")]
    Rls,
}

impl Face {
    fn name(self) -> &'static str {
        match self {
            Face::Check => "http_check",
            Face::ForwardAuth => "forward_auth",
            #[cfg(feature = "grpc")]
            Face::Rls => "rls",
        }
    }
}

/// The rate and this second's tally.
#[derive(Default)]
pub(crate) struct RefusalLog {
    /// Lines allowed a second; 0: the log is off.
    per_second: AtomicU32,
    /// The current second (high 32 bits, seconds since the epoch) and the
    /// lines logged in it (low 32 bits), in one word so that a flood of
    /// refusals on every core takes no lock.
    second_and_logged: AtomicU64,
    /// Refusals past the rate.
    not_logged: Counter,
}

impl RefusalLog {
    pub fn register(&self, registry: &mut Registry) {
        let [not_logged] = FAMILIES;
        not_logged.register(registry, self.not_logged.clone());
    }

    pub fn set_per_second(&self, per_second: u32) {
        self.per_second.store(per_second, Ordering::Relaxed);
    }

    /// A refused decision: logged if this second has room, else counted.
    /// `None`: refused without a decision (an RLS rule of
    /// `requests_per_unit: 0`), so without a limit to name.
    pub fn refused(&self, face: Face, policy: &str, key: &str, decision: Option<&Decision>) {
        let per_second = self.per_second.load(Ordering::Relaxed);
        if per_second == 0 {
            return;
        }
        if !self.take(per_second, SystemClock.now_ms() / 1000) {
            self.not_logged.inc();
            return;
        }
        // The limit that refused: the first one exhausted (a refusal has
        // at least one; the first limit stands in if a cost larger than
        // every remaining left none at zero).
        let refusing = decision.and_then(|decision| {
            let state = decision
                .limits
                .iter()
                .find(|state| state.remaining == 0)
                .or_else(|| decision.limits.first())?;
            Some((decision, state))
        });
        let Some((decision, state)) = refusing else {
            tracing::info!(face = face.name(), policy, key, "refused");
            return;
        };
        tracing::info!(
            face = face.name(),
            policy,
            key,
            limit = state.limit.limit(),
            window_ms = state.limit.window().window_ms(),
            estimate = state.estimate.as_f64(),
            retry_after_ms = decision.retry_after_ms,
            "refused"
        );
    }

    /// Whether a line may be logged in `second`: a slot taken from its
    /// allowance, which starts afresh with each new second.
    fn take(&self, per_second: u32, second: u64) -> bool {
        let mut current = self.second_and_logged.load(Ordering::Relaxed);
        // Bounded: each failed exchange means another thread took a slot
        // or moved the second; there are at most `per_second` slots to take.
        for _ in 0..=per_second.saturating_add(64) {
            let (seen_second, logged) = (current >> 32, current as u32);
            let next = if seen_second != second & 0xFFFF_FFFF {
                (second << 32) | 1
            } else if logged < per_second {
                current + 1
            } else {
                return false;
            };
            match self.second_and_logged.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_rate_a_second_then_afresh() {
        let log = RefusalLog::default();
        let taken = (0..50).filter(|_| log.take(2, 100)).count();
        assert_eq!(taken, 2);
        assert!(log.take(2, 101));
        assert!(log.take(2, 101));
        assert!(!log.take(2, 101));
    }
}
