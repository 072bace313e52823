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
//!
//! The counters' call is bounded by the store itself when it can
//! ([`Store::keeps_deadlines`]): a Memcached connection keeps one sweep for
//! all of its calls' deadlines, where a tokio timer per call was
//! registered in the runtime's wheel and taken out again on every check.
//! Every other call (rare: rollbacks, resets) has a timer.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Instant;

use super::exchange::Exchange;
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
        Deadline::starting_at(Instant::now(), timeout)
    }

    /// `timeout` after `start`: a check reads the clock once, for both its
    /// deadline and its duration.
    pub(super) fn starting_at(start: Instant, timeout: Duration) -> Deadline {
        Deadline {
            at: start + timeout,
            timeout,
        }
    }

    pub(super) fn passed_at(&self, now: Instant) -> bool {
        now >= self.at
    }

    /// When it passes.
    pub(super) fn at(&self) -> Instant {
        self.at
    }

    /// The deadline as a store keeps it.
    pub(super) fn for_store(&self) -> crate::store::CallDeadline {
        crate::store::CallDeadline {
            at: self.at.into_std(),
            timeout: self.timeout,
        }
    }

    /// The error a check's store work ends with when its time is up.
    pub(super) fn ran_out(&self) -> StoreError {
        StoreError::Timeout(self.timeout.as_millis() as u64)
    }

    /// `future`'s output, or the timeout error once this deadline passes:
    /// for a wait that is not a store call (a gathered check waiting for
    /// its turn), so no call is recorded; the caller counts the timeout.
    pub(super) async fn bound<F: Future>(self, future: F) -> Result<F::Output, StoreError> {
        tokio::time::timeout_at(self.at, future)
            .await
            .map_err(|_| self.ran_out())
    }
}

pin_project_lite::pin_project! {
    /// A store call bounded by a check's deadline (`Exchange::timed`).
    ///
    /// A future of its own rather than an `async fn` wrapping the call: an
    /// async wrapper keeps the call it was given beside the one it awaits,
    /// and every wrapper level copied the call's whole state again; a
    /// check's future was 7 KB, and moving it cost more CPU than the
    /// decision (see the commit that made this).
    pub(super) struct Timed<'a, S: Store, F> {
        exchange: &'a Exchange<S>,
        deadline: Deadline,
        started: Instant,
        // `None`: the deadline had passed, and the call was not made.
        #[pin]
        call: Option<Bounded<F>>,
    }
}

pin_project_lite::pin_project! {
    /// Who keeps a call's deadline.
    #[project = BoundedProjection]
    pub(super) enum Bounded<F> {
        /// The store, which answers [`StoreError::Timeout`] when it passes.
        ByStore { #[pin] call: F },
        ByTimer { #[pin] call: tokio::time::Timeout<F> },
    }
}

impl<'a, S: Store, F> Timed<'a, S, F> {
    /// `call` (`None`: not made, the deadline had passed), recorded by
    /// `exchange` when it ends.
    pub(super) fn new(
        exchange: &'a Exchange<S>,
        deadline: Deadline,
        started: Instant,
        call: Option<Bounded<F>>,
    ) -> Self {
        Timed {
            exchange,
            deadline,
            started,
            call,
        }
    }
}

impl<F: Future> Bounded<F> {
    pub(super) fn by_store(call: F) -> Bounded<F> {
        Bounded::ByStore { call }
    }

    pub(super) fn by_timer(deadline: Deadline, call: F) -> Bounded<F> {
        Bounded::ByTimer {
            call: tokio::time::timeout_at(deadline.at, call),
        }
    }
}

impl<S: Store, T, F> Future for Timed<'_, S, F>
where
    F: Future<Output = Result<T, StoreError>>,
{
    type Output = Result<T, StoreError>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(call) = this.call.as_pin_mut() else {
            return Poll::Ready(Err(this.deadline.ran_out()));
        };
        let result = match call.project() {
            BoundedProjection::ByStore { call } => ready!(call.poll(context)),
            BoundedProjection::ByTimer { call } => match ready!(call.poll(context)) {
                Ok(result) => result,
                Err(_) => Err(this.deadline.ran_out()),
            },
        };
        this.exchange.record_call(*this.started, &result);
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_passes_at_its_timeout_and_names_it() {
        assert!(!Deadline::after(Duration::from_secs(3600)).passed_at(Instant::now()));
        let deadline = Deadline::after(Duration::ZERO);
        assert!(deadline.passed_at(Instant::now()));
        assert!(matches!(deadline.ran_out(), StoreError::Timeout(0)));
        assert!(matches!(
            Deadline::after(Duration::from_millis(50)).ran_out(),
            StoreError::Timeout(50)
        ));
    }
}
