//! A request's batches run on the store (or on failure mode `local`'s
//! counters), and a refused request's additions taken back, all keys at
//! once.

use super::super::*;

impl<S: Store> Limiter<S> {
    pub(super) async fn run_batch(
        &self,
        deadline: Deadline,
        batch: &CounterBatch,
        local: bool,
    ) -> Result<BatchCounts, StoreError> {
        if local {
            self.local.read_and_add(batch).await
        } else {
            self.timed_read_and_add(deadline, batch).await
        }
    }

    /// Take back the additions of `batches` (all of one request, so of one
    /// instant) at once, as [`Store::subtract_many`]: each batch's values
    /// after, when known; `None` for a batch that added nothing. Like a
    /// single rollback, it is sent whatever time is left, waited for until
    /// `deadline`, and never retried.
    pub(super) async fn take_back_all(
        &self,
        deadline: Deadline,
        batches: &[&CounterBatch],
        local: bool,
    ) -> Vec<Option<Vec<Option<u64>>>> {
        let adding: Vec<&CounterBatch> = batches
            .iter()
            .copied()
            .filter(|batch| !batch.adds.is_empty())
            .collect();
        let Some(now_ms) = adding.first().map(|batch| batch.now_ms) else {
            return vec![None; batches.len()];
        };
        let takes: Vec<(&[CounterKey], u64)> = adding
            .iter()
            .map(|batch| (batch.adds.as_slice(), batch.amount))
            .collect();
        let results = if local {
            self.local.subtract_many(&takes, now_ms).await
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
            result.map_err(|error| {
                if !local {
                    self.metrics.rollback_failure();
                    tracing::warn!(%error, "could not take back a rejected request's increment");
                }
            })
        });
        batches
            .iter()
            .map(|batch| {
                if batch.adds.is_empty() {
                    None
                } else {
                    results.next()?.ok()
                }
            })
            .collect()
    }
}
