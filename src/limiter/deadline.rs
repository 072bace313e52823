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
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::Instant;

use super::Limiter;
use crate::store::{BatchCounts, CallDeadline, CounterBatch, Store, StoreError};

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

impl<S: Store> Limiter<S> {
    /// A store call with the time left until `deadline`, its outcome
    /// recorded; with no time left it is not made.
    pub(super) fn timed<T, F>(&self, deadline: Deadline, call: F) -> Timed<'_, S, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        self.bounded(deadline, call, false)
    }

    /// [`timed`](Self::timed), the deadline kept by the store when
    /// `kept_by_store` (it was given it), else by a timer.
    fn bounded<T, F>(&self, deadline: Deadline, call: F, kept_by_store: bool) -> Timed<'_, S, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        // One reading of the clock: whether time is left, and when the call
        // started.
        let started = Instant::now();
        let passed = deadline.passed_at(started);
        if passed {
            // A store too slow for this check: counted, but not a call.
            self.metrics.store_error(&deadline.ran_out());
        }
        Timed {
            limiter: self,
            deadline,
            started,
            call: (!passed).then(|| {
                if kept_by_store {
                    Bounded::ByStore { call }
                } else {
                    Bounded::by_timer(deadline, call)
                }
            }),
        }
    }

    /// The store's `read_and_add` of `batch`, as [`timed`](Self::timed);
    /// bounded by the store itself when the batch carries the deadline
    /// (see [`store_deadline`](Self::store_deadline)), else by a timer.
    pub(super) fn timed_read_and_add<'a>(
        &'a self,
        deadline: Deadline,
        batch: &'a CounterBatch,
    ) -> Timed<'a, S, impl Future<Output = Result<BatchCounts, StoreError>> + Send + 'a> {
        let kept_by_store = batch.deadline.is_some();
        self.bounded(deadline, self.store.read_and_add(batch), kept_by_store)
    }

    /// `deadline` for a batch, when the store keeps it itself.
    pub(super) fn store_deadline(&self, deadline: Deadline) -> Option<CallDeadline> {
        self.store.keeps_deadlines().then(|| CallDeadline {
            at: deadline.at.into_std(),
            timeout: deadline.timeout,
        })
    }

    /// A store call that is made even when no time is left (a rollback),
    /// and waited for until `deadline`. Its first poll hands it to the store
    /// (a Memcached node queues it before it waits, and sends it whether or
    /// not its caller still waits), and `timeout_at` polls the call before
    /// it looks at the time.
    pub(super) fn timed_sent<T, F>(&self, deadline: Deadline, call: F) -> Timed<'_, S, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        Timed {
            limiter: self,
            deadline,
            started: Instant::now(),
            call: Some(Bounded::by_timer(deadline, call)),
        }
    }

    /// Record a finished store call. Logs only when the store's health
    /// changes, so an outage under load is one line, not one per request.
    fn record_call<T>(&self, started: Instant, result: &Result<T, StoreError>) {
        self.metrics
            .store_call(started.elapsed(), result.as_ref().err());
        match result {
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
    }
}

pin_project_lite::pin_project! {
    /// A store call bounded by a check's deadline ([`Limiter::timed`]).
    ///
    /// A future of its own rather than an `async fn` wrapping the call: an
    /// async wrapper keeps the call it was given beside the one it awaits,
    /// and every wrapper level copied the call's whole state again; a
    /// check's future was 7 KB, and moving it cost more CPU than the
    /// decision (see the commit that made this).
    pub(super) struct Timed<'a, S: Store, F> {
        limiter: &'a Limiter<S>,
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
    enum Bounded<F> {
        /// The store, which answers [`StoreError::Timeout`] when it passes.
        ByStore { #[pin] call: F },
        ByTimer { #[pin] call: tokio::time::Timeout<F> },
    }
}

impl<F: Future> Bounded<F> {
    fn by_timer(deadline: Deadline, call: F) -> Bounded<F> {
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
        this.limiter.record_call(*this.started, &result);
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
