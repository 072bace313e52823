//! The pipeline's back half, run by a batch's leader: the exchange for
//! every request of the batch, the reckoning, the answers, the take-back,
//! what the near-cache remembers; the failure mode when the store fails.

use std::task::Poll;

use smallvec::{SmallVec, smallvec};

mod parts;

use self::parts::{
    Answering, answer_admitted, answer_refused, counts_of, decision_of, decisions_of,
    holds_its_own, last_verdicts, limits_of, reckoned,
};

use super::boundary::{self, Crossing};
use super::counters::{self, CountsByLimit, Layouts};
use super::exchange::gather::{Lead, Member};
use super::exchange::{After, Held};
use super::reckon::{Reckoning, room_after_take_back};
use super::request::{Arrival, Decisions};
use super::screen::Read;
use super::{CheckError, Limiter};
use crate::store::{BatchCounts, CounterBatch, Store, StoreError};
use crate::window::Counting;

/// What a batch read, and how it was reckoned: for `settle`. Borrowed:
/// moved into `settle`'s future, it would be held there beside the
/// leader's own, and a check's future is moved whole at every level.
struct Settling<'s> {
    batches: &'s [CounterBatch],
    counts: &'s [CountsByLimit],
    reckoning: &'s mut Reckoning,
    /// Its admissions crossed a boundary on the last attempt, and stand.
    stood: bool,
    now_ms: u64,
    /// Whether a refusal may still go once more.
    may_go_again: bool,
}

impl<S: Store> Limiter<S> {
    /// Run the batch of this request (last in arrival order) and
    /// `lead.others`: answer the others, take back what was refused,
    /// remember a refusal in the near-cache; this request's own answer is
    /// returned.
    pub(super) async fn lead(
        &self,
        lead: &mut Lead<'_>,
        arrival: &Arrival<'_>,
    ) -> Result<Decisions, CheckError> {
        let (mut now_ms, mut attempt, mut may_go_again) = (arrival.now_ms, 1, true);
        loop {
            if !lead.others.is_empty() {
                lead.others.retain(Member::waiting);
            }
            let layouts = layouts_of(arrival, now_ms);
            let batches = self.batches(lead, arrival, &layouts, now_ms);
            let (counts, mut held) = match self.exchanged(lead, arrival, &batches).await {
                Ok((found, held)) => (counts_of(&layouts, &batches, found), held),
                Err(error) => return self.fall_back_batch(lead, error, arrival, now_ms).await,
            };
            let mut reckoning = reckoned(lead, arrival, &counts, now_ms);
            let crossing = self.crossing(arrival, &reckoning, now_ms, attempt);
            let stood = match crossing {
                None => false,
                Some(Crossing::Stands(error)) => {
                    self.metrics.store_error(&error);
                    true
                }
                Some(crossing) => {
                    let adding = held.surrender();
                    let deadline = arrival.deadline;
                    Box::pin(self.exchange.take_back(deadline, &batches, &adding)).await;
                    if let Crossing::Refused(error) = crossing {
                        self.metrics.store_error(&error);
                        return self.fall_back_batch(lead, error, arrival, now_ms).await;
                    }
                    (now_ms, attempt) = (self.clock.now_ms(), attempt + 1);
                    continue;
                }
            };
            let settling = Settling {
                batches: &batches,
                counts: &counts,
                reckoning: &mut reckoning,
                stood,
                now_ms,
                may_go_again,
            };
            match self.settle(lead, arrival, settling, &mut held).await {
                Some(decisions) => {
                    // Its caller has the answer (settle took back what
                    // was refused, and answered the others).
                    held.claim();
                    return Ok(decisions);
                }
                None => (now_ms, may_go_again) = (self.clock.now_ms(), false),
            }
        }
    }

    /// Whether a batch decided at `now_ms` that counted crossed a bucket
    /// boundary in flight on its `attempt`, and what that calls for.
    fn crossing(
        &self,
        arrival: &Arrival<'_>,
        reckoning: &Reckoning,
        now_ms: u64,
        attempt: u32,
    ) -> Option<Crossing> {
        if arrival.counting != Counting::IfAdmitted || !reckoning.kept_any() {
            return None;
        }
        let (now, mode) = (self.clock.now_ms(), self.fallback.mode);
        match arrival.parts.as_slice() {
            [part] => boundary::recheck(part.limits(), now_ms, now, attempt, mode),
            _ => boundary::recheck(arrival.limits(), now_ms, now, attempt, mode),
        }
    }

    /// Each part's batch at `now_ms`: the sum of the batch's costs added
    /// to its current counters (nothing, for a peek). Returned alone, not
    /// with the layouts: a tuple of the two was copied twice a check.
    fn batches(
        &self,
        lead: &Lead<'_>,
        arrival: &Arrival<'_>,
        layouts: &[Layouts],
        now_ms: u64,
    ) -> SmallVec<[CounterBatch; 1]> {
        let store_deadline = self.exchange.store_deadline(arrival.deadline);
        let counting = arrival.counting;
        if let ([layouts], [cost]) = (layouts, arrival.costs.as_slice()) {
            // One part (a check): filled where it is kept, not moved there.
            let others = lead.others.iter().map(|member| member.costs[0]);
            let adding = others.sum::<u64>() + cost;
            let mut made = SmallVec::from_buf([counters::empty(adding, now_ms, store_deadline)]);
            counters::fill(&mut made[0], layouts, counting);
            return made;
        }
        let parts = layouts.iter().zip(&arrival.costs).enumerate();
        parts
            .map(|(index, (layouts, cost))| {
                let others = lead.others.iter().map(|member| member.costs[index]);
                let adding = others.sum::<u64>() + cost;
                counters::batch(layouts, adding, counting, now_ms, store_deadline)
            })
            .collect()
    }

    /// The store's answer for every part, the leader answering each other
    /// request by the failure mode at its own deadline if it is not back.
    async fn exchanged<'b>(
        &'b self,
        lead: &mut Lead<'_>,
        arrival: &Arrival<'_>,
        batches: &'b [CounterBatch],
    ) -> Result<(SmallVec<[BatchCounts; 1]>, Held<'b, S>), StoreError> {
        let deadline = arrival.deadline;
        if let [batch] = batches {
            // The store's call awaited here, not through a function of its
            // own: each level of future moves it whole.
            let exchange = self.exchange.timed_read_and_add(deadline, batch);
            // Boxed: a lone check's future (most checks) stays the size of
            // its own exchange, without the batch's timer in it.
            let found = if lead.others.is_empty() {
                exchange.await
            } else {
                Box::pin(self.answering_late_members(lead, arrival, exchange)).await
            };
            return found.map(|found| (smallvec![found], self.exchange.held_one(batch)));
        }
        let exchange = self.exchange.read_and_add_many(deadline, batches);
        Box::pin(self.answering_late_members(lead, arrival, exchange)).await
    }

    /// Answer the batch's requests as reckoned, take back what was refused
    /// (and what callers who left were counted), remember refusals; this
    /// request's own decisions. `None`: go once more (every request of
    /// several parts refused, and the take-back left room: see
    /// [`room_after_take_back`]).
    async fn settle(
        &self,
        lead: &mut Lead<'_>,
        arrival: &Arrival<'_>,
        settling: Settling<'_>,
        held: &mut Held<'_, S>,
    ) -> Option<Decisions> {
        let Settling {
            batches,
            counts,
            reckoning,
            stood,
            now_ms,
            may_go_again,
        } = settling;
        let counting = arrival.counting;
        let decision_of = decision_of(stood);
        let verdicts = std::mem::take(&mut reckoning.verdicts);
        // What was refused is taken back below, by the leader itself.
        if reckoning.takes_back() {
            held.surrender_part(&reckoning.take_back);
        }
        // The admitted first; the refused once the take-back has landed,
        // so a refused caller that asks again finds the counts it left.
        let (mine, refused) = if lead.others.is_empty() {
            (verdicts, None)
        } else {
            let mut verdicts = verdicts;
            let mine = last_verdicts(&mut verdicts, batches.len());
            let answering = Answering {
                verdicts,
                reckoning,
                held,
                counting,
            };
            let store = &self.exchange.store;
            let refused = answer_admitted(store, lead, batches, answering, &decision_of);
            (mine, Some(refused))
        };
        debug_assert!(
            holds_its_own(held, arrival),
            "the leader holds its own count"
        );
        // What is held now is this request's own count: dropped while the
        // take-back is awaited (its caller gave up), it is given back too;
        // claimed once the answer is returned.
        let after = self.take_back_refused(arrival, batches, reckoning).await;
        // Every request of several parts refused, and the take-back left
        // room: refused by additions since gone, the batch goes once more.
        let several = arrival.parts.len() > 1 && counting == Counting::IfAdmitted;
        if several && may_go_again && !reckoning.kept_any() {
            let limits = limits_of(arrival);
            if room_after_take_back(&limits, counts, &after, now_ms, &arrival.costs) {
                return None;
            }
        }
        if let Some(refused) = refused {
            answer_refused(lead, refused);
        }
        self.remember_batch(arrival, counts, reckoning, &after, now_ms);
        Some(decisions_of(mine, &decision_of))
    }

    /// Take back what the batch refused (and what callers who left were
    /// counted): each part's values after, when known.
    async fn take_back_refused(
        &self,
        arrival: &Arrival<'_>,
        batches: &[CounterBatch],
        reckoning: &Reckoning,
    ) -> After {
        if !reckoning.takes_back() {
            return After::new();
        }
        let take_back = &reckoning.take_back;
        Box::pin(
            self.exchange
                .take_back(arrival.deadline, batches, take_back),
        )
        .await
    }

    /// What the near-cache learns of the batch: each part that refused a
    /// request, the counts the admitted ones left (and what the take-back
    /// left); each part that counted, that its entry no longer holds all.
    fn remember_batch(
        &self,
        arrival: &Arrival<'_>,
        counts: &[CountsByLimit],
        reckoning: &Reckoning,
        after: &After,
        now_ms: u64,
    ) {
        let by = arrival.by;
        for (index, part) in arrival.parts.iter().enumerate() {
            let kept = reckoning.kept[index];
            if let Some(least) = reckoning.remember[index] {
                let mut seen = counts[index].clone();
                for counts in &mut seen {
                    if let Some(current) = counts.last_mut() {
                        *current = current.saturating_add(kept);
                    }
                }
                let after_rollback = after.get(index).cloned().flatten();
                let read = Read {
                    counts: &seen,
                    after_rollback,
                    by,
                };
                self.screen.remember(*part, read, least, now_ms);
            } else if kept > 0 {
                self.screen.counted(&part.near_key);
            }
        }
    }

    /// The batch's exchange, its leader answering each other request by
    /// the failure mode at that request's deadline if the exchange is not
    /// back by then (the leader arrived last: its own deadline, which
    /// bounds the exchange, is the batch's latest). One timer for the
    /// batch, at its earliest deadline still waiting, instead of one per
    /// request. A request answered so keeps its place in the batch, so its
    /// cost is accounted for like a caller's who left: taken back if
    /// counted.
    async fn answering_late_members<T>(
        &self,
        lead: &mut Lead<'_>,
        arrival: &Arrival<'_>,
        exchange: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let mut exchange = std::pin::pin!(exchange);
        loop {
            let waiting = lead.others.iter().filter(|member| member.waiting());
            let earliest = waiting.map(|member| member.deadline).min_by_key(|d| d.at());
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
                    let now_ms = self.clock.now_ms();
                    self.fall_back_member(member, error, arrival, now_ms).await;
                }
            }
        }
    }

    /// The store failed for a whole batch: the failure mode decides each
    /// request of it, alone, at the batch's instant. Boxed: the failure
    /// path is rare, and a leader's future stays the size of its common
    /// path.
    async fn fall_back_batch(
        &self,
        lead: &mut Lead<'_>,
        error: StoreError,
        arrival: &Arrival<'_>,
        now_ms: u64,
    ) -> Result<Decisions, CheckError> {
        Box::pin(async move {
            for mut member in std::mem::take(&mut lead.others) {
                if member.waiting() {
                    let error = error.clone();
                    self.fall_back_member(&mut member, error, arrival, now_ms)
                        .await;
                }
            }
            let (parts, costs) = (&arrival.parts, &arrival.costs);
            self.fallback
                .decide(error, parts, costs, arrival.counting, now_ms)
                .await
        })
        .await
    }

    /// Answer `member` by the failure mode, decided alone with its own
    /// costs at `now_ms`; nothing of it was counted in the store.
    async fn fall_back_member(
        &self,
        member: &mut Member,
        error: StoreError,
        arrival: &Arrival<'_>,
        now_ms: u64,
    ) {
        let (parts, counting) = (&arrival.parts, arrival.counting);
        let decided = Box::pin(
            self.fallback
                .decide(error, parts, &member.costs, counting, now_ms),
        );
        // Nothing of it was counted: a caller gone is owed nothing.
        let _ = member.answer(decided.await, None);
    }
}

/// Each part's layouts at `now_ms`.
#[inline]
fn layouts_of(arrival: &Arrival<'_>, now_ms: u64) -> SmallVec<[Layouts; 1]> {
    if let [part] = arrival.parts.as_slice() {
        return SmallVec::from_buf([counters::layouts(part.digest, part.policy, now_ms)]);
    }
    let parts = arrival.parts.iter();
    parts
        .map(|part| counters::layouts(part.digest, part.policy, now_ms))
        .collect()
}
