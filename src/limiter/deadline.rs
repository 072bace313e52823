//! One deadline per check. A check may make several store calls: its
//! counters, a rollback, and, when its bucket ended in flight, a rollback
//! and a new attempt (up to 3 attempts). Each gets the time left until the
//! check's deadline, not a timeout of its own, so the failure mode decides
//! within the configured timeout however many calls the check needed.
//!
//! A call that would add to the counters is not made once the deadline has
//! passed: nothing was sent, so nothing needs undoing. A rollback is made
//! whatever the time left, since the addition it takes back certainly
//! happened; only the wait for its answer is bounded.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Limiter;
use crate::store::{Store, StoreError};

/// When a check's store work must be done by (monotonic: a wall clock set
/// back must not extend it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    pub(super) fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            timeout,
        }
    }

    /// The instant it falls at.
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// The error a check's store work ends with when its time is up.
    fn ran_out(&self) -> StoreError {
        StoreError::Timeout(self.timeout.as_millis() as u64)
    }
}

impl<S: Store> Limiter<S> {
    /// A store call with the time left until `deadline`, its outcome
    /// recorded; with no time left it is not made.
    pub(super) async fn timed<T>(
        &self,
        deadline: Deadline,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if deadline.passed() {
            // A store too slow for this check: counted, but not a call.
            let error = deadline.ran_out();
            self.metrics.store_error(&error);
            return Err(error);
        }
        self.timed_sent(deadline, call).await
    }

    /// A store call that is made even when no time is left (a rollback),
    /// and waited for until `deadline`. Its first poll hands it to the store
    /// (a Memcached node queues it before it waits, and sends it whether or
    /// not its caller still waits), and `timeout_at` polls the call before
    /// it looks at the time.
    ///
    /// Logs only when the store's health changes, so an outage under load is
    /// one line, not one per request.
    pub(super) async fn timed_sent<T>(
        &self,
        deadline: Deadline,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let result = match tokio::time::timeout_at(deadline.at, call).await {
            Ok(result) => result,
            Err(_) => Err(deadline.ran_out()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_passes_at_its_timeout_and_names_it() {
        assert!(!Deadline::after(Duration::from_secs(3600)).passed());
        let deadline = Deadline::after(Duration::ZERO);
        assert!(deadline.passed());
        assert!(matches!(deadline.ran_out(), StoreError::Timeout(0)));
        assert!(matches!(
            Deadline::after(Duration::from_millis(50)).ran_out(),
            StoreError::Timeout(50)
        ));
    }
}
