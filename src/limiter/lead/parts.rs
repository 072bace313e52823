//! Per part and per request, for the leader: each part's limits and its
//! counts before the batch, each request's decisions from its verdicts,
//! the answers of admitted requests, each with its share of what the
//! leader holds, and of refused ones once the take-back has landed.

use std::sync::Arc;

use smallvec::SmallVec;

use super::super::boundary;
use super::super::counters::{self, CountsByLimit, Layouts};
use super::super::exchange::Held;
use super::super::exchange::gather::Lead;
use super::super::reckon::{Reckoning, Verdicts, reckon, reckon_one, reckon_part};
use super::super::request::{Arrival, Decisions};
use super::super::{Decision, Source};
use crate::policy::Limit;
use crate::store::reservation::{Added, SharedAdded};
use crate::store::{BatchCounts, CounterBatch, Store};
use crate::window::{Counting, Verdict};

/// Answer the refused requests set aside by `answer_admitted`, once the
/// take-back has landed; the batch is then answered whole.
pub(super) fn answer_refused(lead: &mut Lead<'_>, refused: Vec<(usize, Decisions)>) {
    for (index, decisions) in refused {
        if let Some(member) = lead.others.get_mut(index) {
            // Refused: it holds nothing, and a caller gone is told nothing.
            let _ = member.answer(Ok(decisions), None);
        }
    }
    lead.others.clear();
}

/// What `answer_admitted` answers from: the other requests' verdicts (one
/// per part of each), the reckoning it amends for callers gone, and what
/// the leader holds.
pub(super) struct Answering<'r, 'h, S: Store> {
    pub(super) verdicts: Verdicts,
    pub(super) reckoning: &'r mut Reckoning,
    pub(super) held: &'r mut Held<'h, S>,
    pub(super) counting: Counting,
}

/// Hand each other request its decisions, in one pass: the ones that
/// count now; the ones refused a count (which hold nothing) are
/// returned, by place, to be answered once the take-back has landed.
/// A counted answer carries its share of what the leader holds,
/// given back if its caller drops it unread; one whose caller already
/// left is taken back with the refused ones.
pub(super) fn answer_admitted<S: Store>(
    store: &Arc<S>,
    lead: &mut Lead<'_>,
    batches: &[CounterBatch],
    answering: Answering<'_, '_, S>,
    decision_of: &impl Fn(Verdict) -> Decision,
) -> Vec<(usize, Decisions)> {
    let Answering {
        verdicts,
        reckoning,
        held,
        counting,
    } = answering;
    let parts = batches.len();
    let mut verdicts = verdicts.into_iter();
    let mut refused = Vec::new();
    // One returns for the whole batch, shared by its counted answers.
    let mut shared: Option<SharedAdded> = None;
    for (index, member) in lead.others.iter_mut().enumerate() {
        let decisions = next_decisions(&mut verdicts, parts, decision_of);
        let all_counted = decisions.iter().all(|decision| decision.counted);
        if counting == Counting::IfAdmitted && !all_counted {
            refused.push((index, decisions));
            continue;
        }
        let share = (counting == Counting::IfAdmitted).then(|| {
            let returns = shared.get_or_insert_with(|| {
                let adds = batches.iter().map(|batch| batch.adds.clone());
                Added::shared(store.clone(), adds)
            });
            held.hand_over(&member.costs, returns.clone())
        });
        if let Err(Some(share)) = member.answer(Ok(decisions), share) {
            let back = share.surrender();
            for (index, &cost) in back.iter().enumerate() {
                reckoning.kept[index] -= cost;
                reckoning.take_back[index] += cost;
            }
        }
    }
    refused
}

/// A verdict's decision, told apart when its admission crossed a bucket
/// boundary and `stood`.
pub(super) fn decision_of(stood: bool) -> impl Fn(Verdict) -> Decision {
    move |verdict| {
        let decision = Decision::new(verdict, Source::Store);
        if stood && decision.allowed {
            boundary::stands(decision)
        } else {
            decision
        }
    }
}

/// Whether what a leader holds, once every other request has its share,
/// is its own count or nothing (a request that counts if admitted), or
/// all it added (one that counts whatever).
pub(super) fn holds_its_own<S: Store>(held: &Held<'_, S>, arrival: &Arrival<'_>) -> bool {
    arrival.counting != Counting::IfAdmitted
        || held
            .amounts()
            .iter()
            .zip(&arrival.costs)
            .all(|(&held, &own)| held == 0 || held == own)
}

/// The next request's decisions, from its `parts` verdicts: built in
/// place for one part.
fn next_decisions(
    verdicts: &mut impl Iterator<Item = Verdict>,
    parts: usize,
    decision_of: &impl Fn(Verdict) -> Decision,
) -> Decisions {
    if parts == 1 {
        let verdict = verdicts.next();
        return verdict.map_or_else(Decisions::new, |verdict| {
            SmallVec::from_buf([decision_of(verdict)])
        });
    }
    verdicts.take(parts).map(decision_of).collect()
}

/// The last request's verdicts (the leader's own), taken off the end of
/// the batch's: in place for one part.
pub(super) fn last_verdicts(verdicts: &mut Verdicts, parts: usize) -> Verdicts {
    if parts == 1
        && let Some(verdict) = verdicts.pop()
    {
        return SmallVec::from_buf([verdict]);
    }
    let first = verdicts.len().saturating_sub(parts);
    verdicts.drain(first..).collect()
}

/// A request's decisions from its verdicts: built in place for one part.
pub(super) fn decisions_of(
    mut verdicts: Verdicts,
    decision_of: &impl Fn(Verdict) -> Decision,
) -> Decisions {
    if verdicts.len() == 1
        && let Some(verdict) = verdicts.pop()
    {
        return SmallVec::from_buf([decision_of(verdict)]);
    }
    verdicts.into_iter().map(decision_of).collect()
}

/// The batch reckoned: the other requests in arrival order, then this
/// one (see [`reckon`]); a lone check without the batch's books.
pub(super) fn reckoned(
    lead: &Lead<'_>,
    arrival: &Arrival<'_>,
    counts: &[CountsByLimit],
    now_ms: u64,
) -> Reckoning {
    let (parts, costs, counting) = (&arrival.parts[..], &arrival.costs[..], arrival.counting);
    // One part (a check, or a hot key's batch): its limits without a list.
    if let ([part], [counts], [cost]) = (parts, counts, costs) {
        let limits = part.limits();
        if lead.others.is_empty() {
            return reckon_one(limits, counts, now_ms, *cost, counting);
        }
        let costs = lead.others.iter().map(|member| member.costs[0]);
        let costs = costs.chain(std::iter::once(*cost));
        return reckon_part(limits, counts, now_ms, costs, counting);
    }
    let others = lead.others.iter().map(|member| member.costs.as_slice());
    let requests = others.chain(std::iter::once(costs));
    reckon(&limits_of(arrival), counts, now_ms, requests, counting)
}

/// Each part's limits.
pub(super) fn limits_of<'a>(arrival: &Arrival<'a>) -> SmallVec<[&'a [Limit]; 1]> {
    match arrival.parts.as_slice() {
        [part] => SmallVec::from_buf([part.limits()]),
        parts => parts.iter().map(|part| part.limits()).collect(),
    }
}

/// Each part's counts before the batch, from what its exchange found.
/// Inlined for the reason `batches` is.
#[inline(always)]
pub(super) fn counts_of(
    layouts: &[Layouts],
    batches: &[CounterBatch],
    found: SmallVec<[BatchCounts; 1]>,
) -> SmallVec<[CountsByLimit; 1]> {
    // One part (a check): no collecting.
    let mut found = found;
    if let ([layouts], [batch]) = (layouts, batches)
        && let Some(found) = found.pop()
    {
        return SmallVec::from_buf([counters::counts_before(layouts, batch, found)]);
    }
    layouts
        .iter()
        .zip(batches)
        .zip(found)
        .map(|((layouts, batch), found)| counters::counts_before(layouts, batch, found))
        .collect()
}
