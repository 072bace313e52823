//! The exchange: the store under a request's deadline. One batch per part
//! (a part's counters live on one node), all in flight at once; a failed
//! one takes back what the others added, so the failure mode starts from
//! clean counters; a refused request's additions go back in one exchange.
//!
//! Coalescing is an optimisation of this stage (`gather`): concurrent
//! requests of the same parts (one key, or the same descriptors of an RLS
//! call) share one exchange, the sum of their costs added per part and
//! the counts it returns reckoned in arrival order.

// The keys in flight, the requests waiting, the lead passed on.
pub(super) mod gather;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use smallvec::SmallVec;
use tokio::time::Instant;

use super::FailureMode;
use super::deadline::{Bounded, Deadline, Timed};
use crate::join::join_all;
use crate::metrics::Metrics;
use crate::store::reservation::{Added, Amounts, Reservation, gives_back, subtractions};
use crate::store::{BatchCounts, CallDeadline, CounterBatch, CounterKey, Store, StoreError};

/// Each part's value after a take-back, when known.
pub(super) type After = SmallVec<[Option<Vec<Option<u64>>>; 1]>;

/// What a request's exchange added, one group a part, held until its
/// callers are told (see `store::reservation`).
pub(super) type Held<'a, S> = Reservation<Added<&'a S, &'a [CounterKey]>>;

/// The store, and how a request reaches it.
pub(super) struct Exchange<S> {
    pub(super) store: Arc<S>,
    /// Same-parts requests in flight together share an exchange; `None`
    /// when coalescing is off.
    pub(super) coalescer: Option<gather::Coalescer>,
    pub(super) timeout: Duration,
    healthy: AtomicBool,
    metrics: Arc<Metrics>,
    failure_mode: FailureMode,
}

impl<S: Store> Exchange<S> {
    pub(super) fn new(
        store: S,
        coalesce: bool,
        timeout: Duration,
        metrics: Arc<Metrics>,
        failure_mode: FailureMode,
    ) -> Exchange<S> {
        Exchange {
            store: Arc::new(store),
            coalescer: coalesce.then(gather::Coalescer::default),
            timeout,
            healthy: AtomicBool::new(true),
            metrics,
            failure_mode,
        }
    }

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
        let call = (!passed).then(|| {
            if kept_by_store {
                Bounded::by_store(call)
            } else {
                Bounded::by_timer(deadline, call)
            }
        });
        Timed::new(self, deadline, started, call)
    }

    /// The store's `read_and_add` of `batch`, as [`timed`](Self::timed);
    /// bounded by the store itself when the batch carries the deadline.
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
        self.store.keeps_deadlines().then(|| deadline.for_store())
    }

    /// A store call that is made even when no time is left (a take-back),
    /// and waited for until `deadline`. Its first poll hands it to the
    /// store, which sends it whether or not its caller still waits.
    pub(super) fn timed_sent<T, F>(&self, deadline: Deadline, call: F) -> Timed<'_, S, F>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let call = Some(Bounded::by_timer(deadline, call));
        Timed::new(self, deadline, Instant::now(), call)
    }

    /// The reservation of what `batches` added, `amounts[i]` to part `i`'s
    /// counters (see `store::reservation`): a leader holds it until each
    /// request of its batch has its answer.
    pub(super) fn held<'a>(&'a self, batches: &'a [CounterBatch], amounts: &[u64]) -> Held<'a, S> {
        let adds = batches.iter().map(|batch| batch.adds.as_slice()).collect();
        let amounts = batches.iter().zip(amounts);
        let amounts =
            amounts.map(|(batch, &amount)| if batch.adds.is_empty() { 0 } else { amount });
        let now_ms = batches.first().map_or(0, |batch| batch.now_ms);
        let returns = Added {
            store: &*self.store,
            adds,
        };
        Reservation::new(returns, amounts.collect(), now_ms)
    }

    /// [`held`](Self::held) of one part's batch, built in place (a check).
    pub(super) fn held_one<'a>(&'a self, batch: &'a CounterBatch) -> Held<'a, S> {
        let amount = if batch.adds.is_empty() {
            0
        } else {
            batch.amount
        };
        let returns = Added {
            store: &*self.store,
            adds: SmallVec::from_buf([batch.adds.as_slice()]),
        };
        let amounts = SmallVec::from_buf_and_len([amount, 0], 1);
        Reservation::new(returns, amounts, batch.now_ms)
    }

    /// One part's batch, and the reservation of what it added.
    async fn read_and_add<'a>(
        &'a self,
        deadline: Deadline,
        batch: &'a CounterBatch,
    ) -> Result<(BatchCounts, Held<'a, S>), StoreError> {
        let found = self.timed_read_and_add(deadline, batch).await?;
        Ok((found, self.held_one(batch)))
    }

    /// Several parts' batches at once. Until every batch has answered, an
    /// answered one stays reserved: if the request is dropped meanwhile
    /// (its caller gave up while another node was slow), nobody was told
    /// its additions counted. One failing takes back what the others
    /// added.
    pub(super) async fn read_and_add_many<'a>(
        &'a self,
        deadline: Deadline,
        batches: &'a [CounterBatch],
    ) -> Result<(SmallVec<[BatchCounts; 1]>, Held<'a, S>), StoreError> {
        let calls = batches
            .iter()
            .map(|batch| self.read_and_add(deadline, batch))
            .collect();
        let mut found = SmallVec::new();
        let mut amounts = Amounts::new();
        let mut first_error = None;
        for result in join_all(calls).await {
            match result {
                Ok((counts, held)) => {
                    found.push(counts);
                    amounts.extend(held.surrender());
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                    amounts.push(0);
                }
            }
        }
        // Handed from each part's reservation to the request's, with no
        // wait between.
        let held = self.held(batches, &amounts);
        let Some(error) = first_error else {
            return Ok((found, held));
        };
        let added = held.surrender();
        self.take_back(deadline, batches, &added).await;
        Err(error)
    }

    /// Take `amounts` (one per part) back from each part's current
    /// counters, all at once: each part's values after, when known; `None`
    /// for a part that gave nothing back. Sent whatever time is left,
    /// waited for until `deadline`, never retried: a take-back that fails
    /// leaves the cost counted until the bucket expires, which errs
    /// towards refusing.
    pub(super) async fn take_back(
        &self,
        deadline: Deadline,
        batches: &[CounterBatch],
        amounts: &[u64],
    ) -> After {
        let takes = subtractions(batches.iter().map(|batch| batch.adds.as_slice()), amounts);
        let Some(now_ms) = batches.first().map(|batch| batch.now_ms) else {
            return After::new();
        };
        let results = if takes.is_empty() {
            Vec::new()
        } else if let [(counters, amount)] = takes.as_slice() {
            let one = self.store.subtract(counters, *amount, now_ms);
            vec![self.timed_sent(deadline, one).await]
        } else {
            let all = async { Ok(self.store.subtract_many(&takes, now_ms).await) };
            match self.timed_sent(deadline, all).await {
                Ok(results) => results,
                Err(error) => takes
                    .iter()
                    .map(|_| Err(StoreError::Ambiguous(error.to_string())))
                    .collect(),
            }
        };
        let mut results = results.into_iter().map(|result| {
            result
                .map_err(|error| {
                    self.metrics.rollback_failure();
                    tracing::warn!(%error, "could not take back a rejected request's increment");
                })
                .ok()
        });
        batches
            .iter()
            .zip(amounts)
            .map(|(batch, &amount)| {
                if gives_back(&batch.adds, amount) {
                    results.next().flatten()
                } else {
                    None
                }
            })
            .collect()
    }

    /// Record a finished store call. Logs only when the store's health
    /// changes, so an outage under load is one line, not one per request.
    pub(super) fn record_call<T>(&self, started: Instant, result: &Result<T, StoreError>) {
        self.metrics
            .store_call(started.elapsed(), result.as_ref().err());
        match result {
            Ok(_) => {
                if !self.healthy.swap(true, Ordering::Relaxed) {
                    tracing::info!(store = self.store.kind(), "store answers again");
                }
            }
            Err(error) => {
                if self.healthy.swap(false, Ordering::Relaxed) {
                    tracing::warn!(store = self.store.kind(), %error, mode = ?self.failure_mode, "store failing; the failure mode decides until it answers");
                } else {
                    tracing::debug!(store = self.store.kind(), %error, "store call failed");
                }
            }
        }
    }
}
