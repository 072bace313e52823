//! When the store fails or is too slow for a check's deadline: the
//! configured failure mode decides, never a 500.

use super::counters::{self, Layout};
use super::{CheckError, Decision, Limiter, Source};
use crate::policy::Policy;
use crate::store::{CounterBatch, Store, StoreError};
use crate::window::{self, Counting};

/// What to decide when the store fails or times out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Admit (fail open): an outage of the store is not an outage of the API.
    #[default]
    Allow,
    /// Refuse (fail closed): [`CheckError::StoreUnavailable`].
    Deny,
    /// Decide with counters in this process until the store is back.
    Local,
}

impl<S: Store> Limiter<S> {
    /// The store failed: the failure mode decides.
    pub(super) async fn fall_back(
        &self,
        error: StoreError,
        policy: &Policy,
        layouts: &[Layout],
        batch: &CounterBatch,
        counting: Counting,
        now_ms: u64,
    ) -> Result<Decision, CheckError> {
        let cost = batch.amount;
        match self.failure_mode {
            FailureMode::Deny => {
                self.metrics.decision(Source::Fallback, false);
                Err(CheckError::StoreUnavailable(error))
            }
            FailureMode::Allow => {
                // Counts are unknown: decide as if empty, which still refuses
                // a cost no limit could ever admit.
                let empty: Vec<Vec<u64>> =
                    layouts.iter().map(|layout| vec![0; layout.len()]).collect();
                let verdict =
                    window::decide(policy.limits(), &empty, now_ms, cost, Counting::Never);
                Ok(self.done(Decision::new(verdict, Source::Fallback)))
            }
            FailureMode::Local => {
                // The in-memory store cannot fail; its calls are not store
                // round trips, so they bypass `timed`.
                let found = self
                    .local
                    .read_and_add(batch)
                    .await
                    .map_err(CheckError::StoreUnavailable)?;
                let counts = counters::counts_before(layouts, batch, found);
                let verdict = window::decide(policy.limits(), &counts, now_ms, cost, counting);
                if !verdict.allowed && !verdict.counted && !batch.adds.is_empty() {
                    let _ = self.local.subtract(&batch.adds, cost, now_ms).await;
                }
                Ok(self.done(Decision::new(verdict, Source::Fallback)))
            }
        }
    }
}
