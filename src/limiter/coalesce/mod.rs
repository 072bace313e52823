//! Same-key coalescing: concurrent checks of one key and policy in this
//! instance share one store exchange.
//!
//! While an exchange for a key is in flight, later checks of it gather
//! here. When it returns, they go together: one addition per counter of
//! the sum of their costs, and the value it returns decides them one by
//! one, in arrival order, each exactly as if it had come alone in that
//! order ([`decide_in_order`]). What was refused is taken back in one
//! subtraction. A lone check finds nothing in flight and goes at once:
//! coalescing never delays it. A hot admitted key then costs one exchange
//! per round trip instead of one per check.
//!
//! Exactness is unchanged: the batch's addition is one atomic step in the
//! store, so every other instance sees the counts before it or after it,
//! as it would see N separate additions. The answers get more exact: a
//! refused check's `retry_after_ms` (and what the near-cache remembers) is
//! computed from the checks admitted before it, not from every concurrent
//! check's addition still in the counter.
//!
//! Checks, peeks and reports gather apart (they count differently); a batch
//! never holds more than [`MAX_BATCH`] checks, the next gather behind it.
//!
//! A caller that gives up is not counted: its cost is taken back with the
//! refused ones. One gap remains, as for a failed rollback: a check whose
//! future is dropped without being polled again after its answer was sent
//! (an aborted task) stays counted, which errs towards refusing.
//!
//! Who runs an exchange: the check that found nothing in flight, then, for
//! each batch gathered behind it, the batch's latest check, handed the lead
//! ([`Turn::Lead`]): its deadline is the batch's latest, so the exchange
//! has all the time any of its checks has, and it answers each earlier one
//! by the failure mode at that one's own deadline if the exchange is not
//! back (one timer for the batch). A leader that is dropped (its caller
//! gave up) hands the lead on, so a batch is never stranded; its own
//! exchange, if sent, undoes itself in the store (an outcome nobody claims
//! takes its additions back), so the batch can simply be decided again. That
//! take-back lands when the dropped exchange's reply arrives, and the next
//! batch may be sent before: it then reads the dropped exchange's
//! additions as it would read a concurrent check's from another instance,
//! which errs towards refusing (and the near-cache may remember those
//! counts until the entry is read again). Waiting for the take-back would
//! need the store to signal it; not done, since only a caller giving up
//! mid-exchange opens the gap, and never towards admitting.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the leader: one exchange for a batch, its answers, its take-back |
//! | `gather` | the keys in flight, the checks waiting, the lead passed on |
//! | `order` | the pure decision of a batch in arrival order |
//! | `fallback` | the failure mode for a batch, and for a check whose deadline passes in one |

// When the store or a deadline fails a batch.
mod fallback;
mod gather;
mod order;

use std::sync::Arc;

use smallvec::SmallVec;
use tokio::sync::oneshot;

pub(in crate::limiter) use self::gather::{Coalescer, Lead};
use self::gather::{Counted, Joined, Member, StoreTakeBack, TakeBack, Turn};
use self::order::decide_in_order;
use super::boundary::{self, Crossing};
use super::counters;
use super::deadline::Deadline;
use super::owed::Owed;
use super::remembered::Read;
use super::{CheckError, Decision, Limiter, Source};
use crate::near_cache::{Items, NearKey};
use crate::policy::Policy;
use crate::store::{KeyDigest, Store, StoreError};
use crate::window::{Counting, Verdict};

/// A check as it reaches the coalescer: the near-cache did not refuse it.
#[derive(Clone, Copy)]
pub(super) struct Arrival {
    pub digest: KeyDigest,
    pub near_key: NearKey,
    pub cost: u64,
    pub counting: Counting,
    /// The instant it is decided at if it leads at once.
    pub now_ms: u64,
    /// When its store work must be done by, waiting included.
    pub deadline: Deadline,
    /// Whether it read its near-cache entry again before it came: then its
    /// deadline may fall before its leader's, so it waits with a timer.
    pub read_again: bool,
}

impl<S: Store> Limiter<S> {
    /// Decide a check that the near-cache did not refuse, together with the
    /// checks of its key gathered behind the exchange in flight, if any.
    pub(super) async fn decide_together(
        &self,
        coalescer: &Coalescer,
        policy: &Policy,
        arrival: Arrival,
    ) -> Result<Decision, CheckError> {
        let Arrival {
            near_key,
            cost,
            counting,
            now_ms: arrived_ms,
            ..
        } = arrival;
        let key = coalescer.in_flight(near_key, counting, policy.limits());
        // A check that leads at once decides at the instant it arrived; one
        // handed the lead after waiting, at the clock's reading then.
        let (others, now_ms) = match coalescer.join(&key, cost, arrival.deadline) {
            Joined::Lead => (Vec::new(), arrived_ms),
            Joined::Wait(turn) => {
                self.metrics.coalesced();
                let turn = if arrival.read_again {
                    match arrival.deadline.bound(wait_for_turn(turn)).await {
                        Ok(turn) => turn,
                        // Its place is given up (a counted answer arriving
                        // now is taken back, a lead passed on), and the
                        // failure mode decides, as for a store call that
                        // ran out of time.
                        Err(error) => {
                            self.metrics.store_error(&error);
                            let waited = Arrival {
                                now_ms: self.clock.now_ms(),
                                ..arrival
                            };
                            return Box::pin(self.fall_back_alone(error, policy, waited)).await;
                        }
                    }
                } else {
                    wait_for_turn(turn).await
                };
                match turn {
                    Some(Turn::Decided(result, counted)) => {
                        counted.claim();
                        return result;
                    }
                    Some(Turn::Lead(hand_off)) => (hand_off.take(), self.clock.now_ms()),
                    // Its batch was dropped unanswered (nothing drops one
                    // today: a leader that gives up passes the lead on, and
                    // a batch is answered before it is let go). Nothing
                    // counted it, and no store call was made for it: the
                    // failure mode decides, told so rather than told of a
                    // timeout that did not happen.
                    None => {
                        let error = StoreError::Unreachable(
                            "the batch this check waited in ended unanswered".to_owned(),
                        );
                        let waited = Arrival {
                            now_ms: self.clock.now_ms(),
                            ..arrival
                        };
                        return Box::pin(self.fall_back_alone(error, policy, waited)).await;
                    }
                }
            }
        };
        let mut lead = Lead {
            turn: Some((coalescer, key)),
            others,
        };
        let arrival = Arrival { now_ms, ..arrival };
        self.lead(&mut lead, policy, arrival).await
        // Dropping `lead` passes the turn to the next batch, once this
        // batch's take-back (if any) has landed: the next batch then reads
        // counts without this one's refused costs in them.
    }

    /// Run the batch of this check (`cost`, first) and `lead.others`:
    /// answer the others, take back what was refused, remember a refusal
    /// in the near-cache; this check's own answer is returned.
    pub(super) async fn lead(
        &self,
        lead: &mut Lead<'_>,
        policy: &Policy,
        arrival: Arrival,
    ) -> Result<Decision, CheckError> {
        let Arrival {
            digest,
            near_key,
            cost,
            counting,
            mut now_ms,
            deadline,
            ..
        } = arrival;
        let mut attempt = 1;
        loop {
            lead.others.retain(Member::waiting);
            // In arrival order: a leader handed a batch arrived last.
            let costs: SmallVec<[u64; 16]> = lead
                .others
                .iter()
                .map(|member| member.cost)
                .chain(std::iter::once(cost))
                .collect();
            let adding: u64 = match counting {
                Counting::Never => 0,
                Counting::IfAdmitted | Counting::Always => costs.iter().sum(),
            };
            let layouts = counters::layouts(digest, policy, now_ms);
            let batch = counters::batch(
                &layouts,
                adding,
                counting,
                now_ms,
                self.store_deadline(deadline),
            );
            let exchange = self.timed_read_and_add(deadline, &batch);
            // Boxed: a lone check's future (most checks) stays the size of
            // its own exchange, without the batch's timer in it.
            let found = if lead.others.is_empty() {
                exchange.await
            } else {
                Box::pin(self.answering_late_members(lead, policy, arrival, exchange)).await
            };
            let counts = match found {
                Ok(found) => counters::counts_before(&layouts, &batch, found),
                Err(error) => {
                    return self
                        .fall_back_boxed(lead, error, policy, Arrival { now_ms, ..arrival })
                        .await;
                }
            };
            let (mut verdicts, counted) = decide_in_order(
                policy.limits(),
                &counts,
                now_ms,
                costs.iter().copied(),
                counting,
            );
            let mut stood = false;
            if counting == Counting::IfAdmitted
                && counted > 0
                && let Some(crossing) = boundary::recheck(
                    policy.limits(),
                    now_ms,
                    self.clock.now_ms(),
                    attempt,
                    self.failure_mode,
                )
            {
                match crossing {
                    Crossing::Stands(error) => {
                        self.metrics.store_error(&error);
                        stood = true;
                    }
                    Crossing::Refused(error) => {
                        self.metrics.store_error(&error);
                        self.roll_back(deadline, &batch.adds, adding, now_ms).await;
                        return self
                            .fall_back_boxed(lead, error, policy, Arrival { now_ms, ..arrival })
                            .await;
                    }
                    Crossing::Retry => {
                        self.roll_back(deadline, &batch.adds, adding, now_ms).await;
                        now_ms = self.clock.now_ms();
                        attempt += 1;
                        continue;
                    }
                }
            }
            let decision_of = |verdict: Verdict| {
                let decision = Decision::new(verdict, Source::Store);
                if stood && decision.allowed {
                    boundary::stands(decision)
                } else {
                    decision
                }
            };
            // What the store keeps: what was counted for callers still
            // waiting for it. An admitted check whose caller left is
            // taken back with the refused ones.
            let mut kept = counted;
            let mut refused_cost: Option<u64> = None;
            let Some(mine) = verdicts.pop() else {
                unreachable!("a batch decides its leader too");
            };
            // One take-back for the whole batch, shared by its counted
            // answers: each takes back its own cost if dropped unread.
            let mut batch_take_back: Option<Arc<dyn TakeBack>> = None;
            for (mut member, verdict) in lead.others.drain(..).zip(verdicts) {
                let (member_cost, was_counted) = (member.cost, verdict.counted);
                if !verdict.allowed {
                    refused_cost =
                        Some(refused_cost.map_or(member_cost, |least| least.min(member_cost)));
                }
                let counted = if was_counted && counting == Counting::IfAdmitted {
                    let take_back = batch_take_back.get_or_insert_with(|| {
                        Arc::new(StoreTakeBack {
                            store: self.store.clone(),
                            counters: batch.adds.clone(),
                            now_ms,
                        })
                    });
                    Counted::taking_back(take_back.clone(), member_cost)
                } else {
                    Counted::NOTHING
                };
                let answered = member.answer(Ok(self.done(decision_of(verdict))), counted);
                if !answered && was_counted && counting == Counting::IfAdmitted {
                    kept -= member_cost;
                }
            }
            if !mine.allowed {
                refused_cost = Some(refused_cost.map_or(cost, |least| least.min(cost)));
            }
            let take_back = match counting {
                Counting::IfAdmitted => adding - kept,
                Counting::Never | Counting::Always => 0,
            };
            // This check's own count stands only if its caller gets the
            // answer: dropped while the take-back below is awaited, it is
            // taken back too.
            let own = Owed {
                limiter: self,
                counters: &batch.adds,
                amount: if mine.counted && counting == Counting::IfAdmitted {
                    cost
                } else {
                    0
                },
                now_ms,
                local: false,
            };
            let after_rollback = if take_back > 0 {
                self.roll_back(deadline, &batch.adds, take_back, now_ms)
                    .await
            } else {
                None
            };
            own.claimed();
            if let Some(least) = refused_cost.filter(|_| counting != Counting::Always) {
                let mut seen = counts;
                for counts in &mut seen {
                    if let Some(current) = counts.last_mut() {
                        *current = current.saturating_add(kept);
                    }
                }
                let read = Read {
                    counts: &seen,
                    after_rollback,
                    by: Items::One,
                };
                self.remember(near_key, policy, read, least, now_ms);
            } else if kept > 0 || (counting == Counting::Always && adding > 0) {
                // What the near-cache remembered of the key no longer holds
                // all its counts: a refusal answered from it would say to
                // wait less than the store's counts do.
                self.near_cache.forget_counted(&near_key);
            }
            return Ok(self.done(decision_of(mine)));
        }
    }
}

/// A gathered check's turn. No timer of its own: the exchange it waits
/// behind is bounded by its leader's deadline, which falls before its own
/// (that leader found nothing in flight: it arrived first, under the same
/// timeout); then its batch's leader, the batch's latest check, answers it
/// at its own deadline if that batch's exchange is not back by then
/// (`answering_late_members`). So a gathered check is answered by its
/// deadline, give or take the scheduling delay between its start and its
/// arrival here, without a timer per check: arming and clearing one was a
/// fifth of a hot key's instructions at 256 callers (4,778 -> 5,728). A
/// check that read its near-cache entry again on the way spent part of its
/// time first, so a leader that started after it may end later: that
/// check waits with a timer ([`Arrival::read_again`]). `None` when the
/// batch was dropped unanswered.
///
/// One case is not bounded: a leader whose future is neither polled nor
/// dropped (its caller holds it unpolled) holds its key's turn, and the
/// checks behind it wait until it is polled or dropped.
///
/// Unconstrained by tokio's cooperative budget: an answer that is there is
/// always taken, never dropped unread for a budget-starved poll.
async fn wait_for_turn(turn: oneshot::Receiver<Turn>) -> Option<Turn> {
    tokio::task::unconstrained(turn).await.ok()
}
