//! A batch's failures: the failure mode decides a gathered check whose
//! deadline passes while its batch's exchange is out, every check of a
//! batch the store failed, and a check decided alone.

use std::task::Poll;

use super::gather::{Counted, Lead, Member};
use super::{Arrival, counters};
use crate::limiter::{CheckError, Decision, Limiter};
use crate::policy::Policy;
use crate::store::{Store, StoreError};

impl<S: Store> Limiter<S> {
    /// The batch's exchange, its leader answering each other check by the
    /// failure mode at that check's deadline if the exchange is not back
    /// by then (the leader arrived last: its own deadline, which bounds
    /// the exchange, is the batch's latest). One timer for the batch, at
    /// its earliest deadline still waiting, instead of one per check: a
    /// timer per gathered check was a fifth of a hot key's instructions.
    /// A check answered so keeps its place in the batch, so its cost is
    /// accounted for like a caller's who left: taken back if counted.
    pub(super) async fn answering_late_members<T>(
        &self,
        lead: &mut Lead<'_>,
        policy: &Policy,
        arrival: Arrival,
        exchange: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let mut exchange = std::pin::pin!(exchange);
        loop {
            let earliest = lead
                .others
                .iter()
                .filter(|member| member.waiting())
                .map(|member| member.deadline)
                .min_by_key(|deadline| deadline.at());
            let Some(earliest) = earliest else {
                return exchange.await;
            };
            // The exchange first, then the timer (no `select!`: the
            // library builds without tokio's macros).
            let mut due = std::pin::pin!(tokio::time::sleep_until(earliest.at()));
            let back = std::future::poll_fn(|cx| match exchange.as_mut().poll(cx) {
                Poll::Ready(found) => Poll::Ready(Some(found)),
                Poll::Pending => due.as_mut().poll(cx).map(|()| None),
            })
            .await;
            if let Some(found) = back {
                return found;
            }
            let now = tokio::time::Instant::now();
            for member in &mut lead.others {
                if member.waiting() && member.deadline.passed_at(now) {
                    let error = member.deadline.ran_out();
                    self.metrics.store_error(&error);
                    let late = Arrival {
                        now_ms: self.clock.now_ms(),
                        ..arrival
                    };
                    Box::pin(self.fall_back_member(member, error, policy, late)).await;
                }
            }
        }
    }

    /// The store failed for a whole batch: the failure mode decides each
    /// check of it, alone, at the batch's instant. Boxed: the failure path
    /// is rare, and a leader's future, moved whole wherever it is created,
    /// stays the size of its common path.
    pub(super) async fn fall_back_boxed(
        &self,
        lead: &mut Lead<'_>,
        error: StoreError,
        policy: &Policy,
        batch: Arrival,
    ) -> Result<Decision, CheckError> {
        Box::pin(async move {
            for mut member in std::mem::take(&mut lead.others) {
                if member.waiting() {
                    self.fall_back_member(&mut member, error.clone(), policy, batch)
                        .await;
                }
            }
            self.fall_back_alone(error, policy, batch).await
        })
        .await
    }

    /// Answer `member` by the failure mode, decided alone with its own cost
    /// at `at`'s instant; nothing of it was counted in the store.
    async fn fall_back_member(
        &self,
        member: &mut Member,
        error: StoreError,
        policy: &Policy,
        at: Arrival,
    ) {
        let alone = Arrival {
            cost: member.cost,
            ..at
        };
        let result = self.fall_back_alone(error, policy, alone).await;
        member.answer(result, Counted::NOTHING);
    }

    /// The failure mode's decision for one check, at its instant.
    pub(super) async fn fall_back_alone(
        &self,
        error: StoreError,
        policy: &Policy,
        check: Arrival,
    ) -> Result<Decision, CheckError> {
        let now_ms = check.now_ms;
        let layouts = counters::layouts(check.digest, policy, now_ms);
        let batch = counters::batch(&layouts, check.cost, check.counting, now_ms, None);
        self.fall_back(error, policy, &layouts, &batch, check.counting, now_ms)
            .await
    }
}
