//! Per part and per request, for the leader: each part's limits and its
//! counts before the batch, each request's decisions from its verdicts,
//! and the answers of refused requests once the take-back has landed.

use smallvec::SmallVec;

use super::super::Decision;
use super::super::counters::{self, CountsByLimit, Layouts};
use super::super::exchange::gather::{Counted, Lead};
use super::super::reckon::Verdicts;
use super::super::request::{Arrival, Decisions};
use crate::policy::Limit;
use crate::store::{BatchCounts, CounterBatch};
use crate::window::Verdict;

/// Answer the refused requests set aside by `answer_admitted`, once the
/// take-back has landed; the batch is then answered whole.
pub(super) fn answer_refused(
    lead: &mut Lead<'_>,
    refused: Vec<(usize, Verdicts)>,
    decision_of: &impl Fn(Verdict) -> Decision,
) {
    for (index, verdicts) in refused {
        if let Some(member) = lead.others.get_mut(index) {
            member.answer(Ok(decisions_of(verdicts, decision_of)), Counted::NOTHING);
        }
    }
    lead.others.clear();
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

/// Each part's limits.
pub(super) fn limits_of<'a>(arrival: &Arrival<'a>) -> SmallVec<[&'a [Limit]; 1]> {
    match arrival.parts.as_slice() {
        [part] => SmallVec::from_buf([part.limits()]),
        parts => parts.iter().map(|part| part.limits()).collect(),
    }
}

/// Each part's counts before the batch, from what its exchange found.
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
