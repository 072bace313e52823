//! The pipeline's front half: a request (a check is a request of one) is
//! validated, screened by the near-cache part by part, and either joins
//! the exchange in flight for the same parts or leads its own (`lead`).

use tokio::sync::oneshot;
use tokio::task::Unconstrained;

use super::deadline::Deadline;
use super::exchange::gather::{Coalescer, Joined, Lead, Member, Turn};
use super::request::{Arrival, Costs, Decisions, Item, Part, Parts};
use super::screen::{Looked, Screened};
use super::{CheckError, Decision, Limiter, Source, validate};
use crate::metrics::Metrics;
use crate::near_cache::Items;
use crate::store::{Store, StoreError};
use crate::window::Counting;

impl<S: Store> Limiter<S> {
    /// Decide `items` as one request, `counting` as asked: one decision
    /// per item, in order. An item the near-cache refuses, or one that can
    /// never pass, decides the request without counting anything; the
    /// others are then only read.
    pub(super) async fn decide(
        &self,
        items: &[Item<'_>],
        counting: Counting,
        started: std::time::Instant,
    ) -> Result<Decisions, CheckError> {
        for item in items {
            validate(item.key, item.policy, item.cost, self.max_counters())?;
        }
        let deadline = Deadline::starting_at(started.into(), self.exchange.timeout);
        let now_ms = self.clock.now_ms();
        let asking = Items::of(items.len());
        // The screen's refusals, by index: none for most requests, and no
        // allocation then. The parts it passes go straight into the
        // arrival, by a loop inline rather than a function of its own: each
        // level of future a check goes through, and each value moved from
        // one to the next, is copied whole.
        let mut refused = Vec::new();
        let mut arrival = Arrival {
            parts: Parts::new(),
            costs: Costs::new(),
            counting,
            now_ms,
            deadline,
            by: asking,
            read_again: false,
        };
        for (index, item) in items.iter().enumerate() {
            let part = Part::of(item.key, item.policy);
            if counting != Counting::Always {
                let (screen, exchange) = (&self.screen, &self.exchange);
                let screened = match screen.screen(exchange, part, item.cost, now_ms, asking) {
                    Looked::Screened(screened) => screened,
                    Looked::Due(due) => {
                        Box::pin(screen.read_again_due(exchange, due, deadline)).await
                    }
                };
                match screened {
                    Screened::Refused(decision) => {
                        refused.push((index, decision));
                        continue;
                    }
                    Screened::Passed { read_again } => arrival.read_again |= read_again,
                }
            }
            arrival.parts.push(part);
            arrival.costs.push(item.cost);
        }
        if arrival.parts.is_empty() {
            return Ok(refused.into_iter().map(|(_, d)| d).collect());
        }
        arrival.counting = counting_for(items, &refused, counting);
        let found = match &self.exchange.coalescer {
            Some(coalescer) => self.gathered(coalescer, &mut arrival).await?,
            // Without coalescing, a request is a batch of one.
            None => self.lead(&mut Lead::alone(), &arrival).await?,
        };
        if refused.is_empty() {
            return Ok(found);
        }
        Ok(merged(items.len(), refused, found))
    }

    /// Decide a request the near-cache did not refuse, together with the
    /// requests of its parts gathered behind the exchange in flight, if
    /// any.
    async fn gathered(
        &self,
        coalescer: &Coalescer,
        arrival: &mut Arrival<'_>,
    ) -> Result<Decisions, CheckError> {
        let key = coalescer.in_flight(&arrival.parts, arrival.counting, arrival.by);
        // A request that leads at once decides at the instant it arrived;
        // one handed the lead after waiting, at the clock's reading then.
        let (others, now_ms) = match coalescer.join(&key, &arrival.costs, arrival.deadline) {
            Joined::Lead => (Vec::new(), arrival.now_ms),
            // Waited for here, not in a function of its own: every level
            // of future is set up and polled for each request gathered.
            Joined::Wait(turn) => {
                self.metrics.coalesced();
                let turn = if arrival.read_again {
                    let bounded = arrival.deadline.bound(wait_for_turn(turn));
                    bounded.await.map(Result::ok)
                } else {
                    Ok(wait_for_turn(turn).await.ok())
                };
                match waited(turn, &self.metrics) {
                    Waited::Lead(others) => (others, self.clock.now_ms()),
                    Waited::Decided(decided) => return decided,
                    Waited::FallBack(error) => {
                        return Box::pin(self.fall_back_now(error, arrival)).await;
                    }
                }
            }
        };
        let mut lead = Lead {
            turn: Some((coalescer, key)),
            others,
        };
        arrival.now_ms = now_ms;
        self.lead(&mut lead, arrival).await
        // Dropping `lead` passes the turn to the next batch, once this
        // batch's take-back (if any) has landed: the next batch then reads
        // counts without this one's refused costs in them.
    }

    /// The failure mode's decision for a request, alone, at the clock's
    /// reading now.
    async fn fall_back_now(
        &self,
        error: StoreError,
        arrival: &Arrival<'_>,
    ) -> Result<Decisions, CheckError> {
        let (parts, costs) = (&arrival.parts, &arrival.costs);
        let now_ms = self.clock.now_ms();
        self.fallback
            .decide(error, parts, costs, arrival.counting, now_ms)
            .await
    }
}

/// How a request counts: one that can never pass (an item the screen
/// refused, a cost above every chance) must not be counted, even for the
/// instant before its take-back: it is answered as a peek.
#[inline]
fn counting_for(items: &[Item<'_>], refused: &[(usize, Decision)], counting: Counting) -> Counting {
    if counting != Counting::IfAdmitted {
        return counting;
    }
    let never_passes = |item: &Item<'_>| item.cost > item.policy.max_cost();
    if !refused.is_empty() || items.iter().any(never_passes) {
        return Counting::Never;
    }
    counting
}

/// What a gathered request's wait came to.
enum Waited {
    /// The batch to lead (its other requests).
    Lead(Vec<Member>),
    /// Its answer, another leader's.
    Decided(Result<Decisions, CheckError>),
    /// No answer: the failure mode decides, by this error.
    FallBack(StoreError),
}

/// What a gathered request's `turn` comes to: `Err` when it ran out of
/// time waiting (its place was given up with the wait: a counted answer
/// arriving then is taken back, a lead passed on), `None` when its batch
/// was dropped unanswered.
fn waited(turn: Result<Option<Turn>, StoreError>, metrics: &Metrics) -> Waited {
    match turn {
        Ok(Some(Turn::Decided(result, share))) => {
            // Read: the caller is told now.
            if let Some(share) = share {
                share.claim();
            }
            Waited::Decided(result)
        }
        Ok(Some(Turn::Lead(hand_off))) => Waited::Lead(hand_off.take()),
        // Nothing drops a batch unanswered today (a leader that gives up
        // passes the lead on, and a batch is answered before it is let
        // go). Nothing counted it: the failure mode decides, told so
        // rather than told of a timeout that did not happen.
        Ok(None) => Waited::FallBack(StoreError::Unreachable(
            "the batch this check waited in ended unanswered".to_owned(),
        )),
        // As for a store call that ran out of time.
        Err(error) => {
            metrics.store_error(&error);
            Waited::FallBack(error)
        }
    }
}

/// The screen's refusals and the exchange's decisions, in the items' order.
fn merged(items: usize, refused: Vec<(usize, Decision)>, found: Decisions) -> Decisions {
    if refused.is_empty() {
        return found;
    }
    let mut found = found.into_iter();
    let mut refused = refused.into_iter().peekable();
    (0..items)
        .map(|index| match refused.next_if(|(at, _)| *at == index) {
            Some((_, decision)) => decision,
            None => found.next().unwrap_or_else(refused_by_error),
        })
        .collect()
}

/// A gathered request's turn. No timer of its own: the exchange it waits
/// behind is bounded by its leader's deadline, which falls before its own
/// (that leader found nothing in flight: it arrived first, under the same
/// timeout); then its batch's leader, the batch's latest request, answers
/// it at its own deadline if that batch's exchange is not back by then
/// (`answering_late_members`). A timer per gathered check, armed and
/// cleared, was a fifth of a hot key's instructions. A request that read
/// its near-cache entry again on the way spent part of its time first, so
/// a leader that started after it may end later: that request waits with
/// a timer ([`Arrival::read_again`]). An error when the batch was dropped
/// unanswered.
///
/// One case is not bounded: a leader whose future is neither polled nor
/// dropped (its caller holds it unpolled) holds its key's turn, and the
/// requests behind it wait until it is polled or dropped.
///
/// Unconstrained by tokio's cooperative budget: an answer that is there is
/// always taken, never dropped unread for a budget-starved poll. The
/// receiver's own future, not an `async fn` around it: every level of
/// future a gathered request waits in is set up and polled for each one.
fn wait_for_turn(turn: oneshot::Receiver<Turn>) -> Unconstrained<oneshot::Receiver<Turn>> {
    tokio::task::unconstrained(turn)
}

/// Never needed (every item is decided by the screen or by the exchange);
/// a logic error then refuses rather than panics.
pub(super) fn refused_by_error() -> Decision {
    Decision {
        allowed: false,
        counted: false,
        retry_after_ms: None,
        limits: Vec::new(),
        source: Source::Fallback,
        shadow: false,
        would_allow: false,
        decided_at_ms: 0,
    }
}
