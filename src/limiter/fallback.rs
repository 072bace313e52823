//! When the store fails or is too slow for a request's deadline: the
//! configured failure mode decides, never a 500. Written once, for a
//! request of any number of parts (a check is a request of one).

use smallvec::SmallVec;

use super::counters::{self, CountsByLimit};
use super::reckon::reckon;
use super::request::{Decisions, Part};
use super::{CheckError, Decision, Source};
use crate::policy::Limit;
use crate::store::{MemoryStore, Store, StoreError};
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

/// The failure mode, and the counters `local` decides with.
pub(super) struct Fallback {
    pub(super) mode: FailureMode,
    pub(super) local: MemoryStore,
}

impl Fallback {
    /// The store failed for a request of `parts` (one cost each) at
    /// `now_ms`: the failure mode decides it, alone.
    pub(super) async fn decide(
        &self,
        error: StoreError,
        parts: &[Part<'_>],
        costs: &[u64],
        counting: Counting,
        now_ms: u64,
    ) -> Result<Decisions, CheckError> {
        match self.mode {
            FailureMode::Deny => Err(CheckError::StoreUnavailable(error)),
            // Counts are unknown: decide as if empty, which still refuses a
            // cost no limit could ever admit.
            FailureMode::Allow => Ok(parts
                .iter()
                .zip(costs)
                .map(|(part, &cost)| {
                    let empty: Vec<Vec<u64>> = part
                        .limits()
                        .iter()
                        .map(|limit| vec![0; limit.window().precision() as usize + 1])
                        .collect();
                    let verdict =
                        window::decide(part.limits(), &empty, now_ms, cost, Counting::Never);
                    Decision::new(verdict, Source::Fallback)
                })
                .collect()),
            FailureMode::Local => self.local(parts, costs, counting, now_ms).await,
        }
    }

    /// Failure mode `local`: the request decided on this process's
    /// counters, reckoned as the store's would be. The in-memory store
    /// cannot fail, and its calls are not store round trips.
    async fn local(
        &self,
        parts: &[Part<'_>],
        costs: &[u64],
        counting: Counting,
        now_ms: u64,
    ) -> Result<Decisions, CheckError> {
        let mut batches = SmallVec::<[_; 1]>::new();
        let mut counts = SmallVec::<[CountsByLimit; 1]>::new();
        for (part, &cost) in parts.iter().zip(costs) {
            let layouts = counters::layouts(part.digest, part.policy, now_ms);
            let batch = counters::batch(&layouts, cost, counting, now_ms, None);
            let found = self
                .local
                .read_and_add(&batch)
                .await
                .map_err(CheckError::StoreUnavailable)?;
            counts.push(counters::counts_before(&layouts, &batch, found));
            batches.push(batch);
        }
        let limits: SmallVec<[&[Limit]; 1]> = parts.iter().map(|part| part.limits()).collect();
        let mut reckoning = reckon(&limits, &counts, now_ms, [costs], counting);
        for (batch, &back) in batches.iter().zip(&reckoning.take_back) {
            if back > 0 && !batch.adds.is_empty() {
                let _ = self.local.subtract(&batch.adds, back, now_ms).await;
            }
        }
        // One request: its verdicts are the reckoning's.
        let verdicts = std::mem::take(&mut reckoning.verdicts);
        Ok(verdicts
            .into_iter()
            .map(|verdict| Decision::new(verdict, Source::Fallback))
            .collect())
    }
}
