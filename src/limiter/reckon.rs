//! The reckoning: pure. The counts a batch read, the costs of its requests
//! and their arrival order in; which requests are admitted, what goes back
//! to the store and what the near-cache remembers out. No I/O, no clock.
//!
//! A batch is every request gathered behind one exchange (one, for a lone
//! check); all of them ask for the same parts (the same keys and limits),
//! each with a cost per part. Each request is decided exactly as if it had
//! come alone after the ones before it: admitted only if every part admits
//! it, and then counted in every part for the ones after it. A request
//! refused is counted in none, so what its parts added goes back:
//! `kept + take_back == adding`, part by part, and a report (`Always`)
//! takes nothing back.

use smallvec::SmallVec;

use super::counters::{Counts, CountsByLimit};
use super::request::Costs;
use crate::policy::Limit;
use crate::window::{self, Counting, Verdict};

/// Verdicts, one per part of each request, the requests in arrival order:
/// request `i`'s are `[i * parts..][..parts]`. Flat, so that a batch of
/// one part (every hot key's) holds a verdict per request, not a vector
/// of one.
pub(super) type Verdicts = SmallVec<[Verdict; 1]>;

/// How a batch was decided.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) struct Reckoning {
    /// Each request's verdicts, one per part, in arrival order.
    pub verdicts: Verdicts,
    /// Per part: what the batch added.
    pub adding: Costs,
    /// Per part: what the admitted requests keep counted.
    pub kept: Costs,
    /// Per part: `adding - kept`, what goes back.
    pub take_back: Costs,
    /// Per part: the least cost it refused, when it refused one (and the
    /// batch counts only what it admits): what the near-cache remembers.
    pub remember: SmallVec<[Option<u64>; 1]>,
}

impl Reckoning {
    /// Whether the batch counted anything that stays.
    #[inline]
    pub(super) fn kept_any(&self) -> bool {
        self.kept.iter().any(|&kept| kept > 0)
    }

    /// Whether any part gives something back.
    #[inline]
    pub(super) fn takes_back(&self) -> bool {
        self.take_back.iter().any(|&back| back > 0)
    }

    /// Each request's verdicts, one per part, in arrival order.
    #[cfg(test)]
    pub(super) fn by_request(&self) -> std::slice::Chunks<'_, Verdict> {
        self.verdicts.chunks(self.adding.len().max(1))
    }
}

/// Decide `requests` (each a cost per part, in arrival order) against each
/// part's counts before all of them (`counts`, per limit, oldest bucket
/// first) under `limits` (per part), at `now_ms`.
pub(super) fn reckon<'c>(
    limits: &[&[Limit]],
    counts: &[CountsByLimit],
    now_ms: u64,
    requests: impl IntoIterator<Item = &'c [u64]>,
    counting: Counting,
) -> Reckoning {
    let mut reckoning = Reckoning {
        verdicts: SmallVec::new(),
        adding: zeros(limits.len()),
        kept: zeros(limits.len()),
        take_back: zeros(limits.len()),
        remember: if limits.len() == 1 {
            SmallVec::from_buf([None])
        } else {
            smallvec::smallvec![None; limits.len()]
        },
    };
    let mut requests = requests.into_iter().peekable();
    // The first request sees the counts as they are: a lone check (most
    // batches) is decided without copying them.
    let Some(first) = requests.next() else {
        return reckoning;
    };
    let counted = decide_one(limits, counts, now_ms, first, counting, &mut reckoning);
    if requests.peek().is_none() {
        settled(&mut reckoning, counting);
        return reckoning;
    }
    let mut running: SmallVec<[CountsByLimit; 1]> = counts.iter().cloned().collect();
    if counted {
        add_to_current(&mut running, first);
    }
    for costs in requests {
        if decide_one(limits, &running, now_ms, costs, counting, &mut reckoning) {
            add_to_current(&mut running, costs);
        }
    }
    settled(&mut reckoning, counting);
    reckoning
}

/// [`reckon`] of a lone request of one part (most checks), built
/// directly: the same reckoning, without the books a batch keeps.
pub(super) fn reckon_one(
    limits: &[Limit],
    counts: &CountsByLimit,
    now_ms: u64,
    cost: u64,
    counting: Counting,
) -> Reckoning {
    let verdict = window::decide(limits, counts, now_ms, cost, counting);
    let adding = added(cost, counting);
    let kept = if verdict.counted { cost } else { 0 };
    let least = least_refused(None, &verdict, cost, counting);
    Reckoning {
        verdicts: SmallVec::from_buf([verdict]),
        adding: SmallVec::from_buf([adding]),
        kept: SmallVec::from_buf([kept]),
        take_back: SmallVec::from_buf([taken_back(adding, kept, counting)]),
        remember: SmallVec::from_buf([least]),
    }
}

/// [`reckon`] of a batch of one part (a hot key's): each request one
/// cost, decided against the counts as they run, the books kept in
/// locals. The same reckoning, without a batch of several parts' books
/// per request.
pub(super) fn reckon_part(
    limits: &[Limit],
    counts: &CountsByLimit,
    now_ms: u64,
    costs: impl IntoIterator<Item = u64>,
    counting: Counting,
) -> Reckoning {
    let mut running = counts.clone();
    let (mut adding, mut kept, mut least) = (0, 0, None);
    let mut verdicts = SmallVec::new();
    for cost in costs {
        let verdict = window::decide(limits, &running, now_ms, cost, counting);
        adding += added(cost, counting);
        if verdict.counted {
            kept += cost;
            for counts in &mut running {
                add(counts, cost);
            }
        }
        least = least_refused(least, &verdict, cost, counting);
        verdicts.push(verdict);
    }
    Reckoning {
        verdicts,
        adding: SmallVec::from_buf([adding]),
        kept: SmallVec::from_buf([kept]),
        take_back: SmallVec::from_buf([taken_back(adding, kept, counting)]),
        remember: SmallVec::from_buf([least]),
    }
}

/// Decide one request after the ones before it; whether it counted.
fn decide_one(
    limits: &[&[Limit]],
    counts: &[CountsByLimit],
    now_ms: u64,
    costs: &[u64],
    counting: Counting,
    reckoning: &mut Reckoning,
) -> bool {
    // One part (a check): its verdict is the request's.
    if let ([limits], [counts], [cost]) = (limits, counts, costs) {
        let verdict = window::decide(limits, counts, now_ms, *cost, counting);
        let counted = verdict.counted;
        book(reckoning, 0, &verdict, *cost, counted, counting);
        reckoning.verdicts.push(verdict);
        return counted;
    }
    let decide = |counting| -> SmallVec<[Verdict; 2]> {
        limits
            .iter()
            .zip(counts)
            .zip(costs)
            .map(|((limits, counts), &cost)| window::decide(limits, counts, now_ms, cost, counting))
            .collect()
    };
    let mut verdicts = decide(counting);
    let counted = verdicts.iter().all(|verdict| verdict.counted);
    // Counted by none: each part's own verdict, as a peek (a part that
    // admitted did not count).
    if !counted && verdicts.iter().any(|verdict| verdict.counted) {
        verdicts = decide(Counting::Never);
    }
    for (index, (verdict, &cost)) in verdicts.iter().zip(costs).enumerate() {
        book(reckoning, index, verdict, cost, counted, counting);
    }
    for verdict in verdicts {
        reckoning.verdicts.push(verdict);
    }
    counted
}

/// What part `index`'s `verdict` on a request of `cost` adds to the books.
#[inline]
fn book(
    reckoning: &mut Reckoning,
    index: usize,
    verdict: &Verdict,
    cost: u64,
    counted: bool,
    counting: Counting,
) {
    reckoning.adding[index] += added(cost, counting);
    if counted {
        reckoning.kept[index] += cost;
    }
    let least = &mut reckoning.remember[index];
    *least = least_refused(*least, verdict, cost, counting);
}

/// What a request of `cost` adds to a part's counters: nothing for a
/// peek.
#[inline]
fn added(cost: u64, counting: Counting) -> u64 {
    if counting == Counting::Never { 0 } else { cost }
}

/// What goes back of what a part added: what its admitted requests did
/// not keep, for checks; nothing for reports (counted whatever) or peeks
/// (which added nothing).
#[inline]
fn taken_back(adding: u64, kept: u64, counting: Counting) -> u64 {
    if counting == Counting::IfAdmitted {
        adding - kept
    } else {
        0
    }
}

/// The least cost a part refused, `least` so far, once `verdict` on a
/// request of `cost` is seen: a report, counted whatever, leaves nothing
/// to remember.
#[inline]
fn least_refused(
    least: Option<u64>,
    verdict: &Verdict,
    cost: u64,
    counting: Counting,
) -> Option<u64> {
    if verdict.allowed || counting == Counting::Always {
        return least;
    }
    Some(least.map_or(cost, |least| least.min(cost)))
}

/// A zero for each of `parts`: built inline for one, the usual case.
fn zeros(parts: usize) -> Costs {
    if parts == 1 {
        SmallVec::from_buf([0])
    } else {
        smallvec::smallvec![0; parts]
    }
}

/// Each part's take-back, from what it added and kept.
fn settled(reckoning: &mut Reckoning, counting: Counting) {
    for ((back, &adding), &kept) in reckoning
        .take_back
        .iter_mut()
        .zip(&reckoning.adding)
        .zip(&reckoning.kept)
    {
        *back = taken_back(adding, kept, counting);
    }
}

/// A counted request's costs, in the current bucket of every limit of
/// each part.
fn add_to_current(running: &mut [CountsByLimit], costs: &[u64]) {
    for (part, &cost) in running.iter_mut().zip(costs) {
        for counts in part.iter_mut() {
            add(counts, cost);
        }
    }
}

fn add(counts: &mut Counts, cost: u64) {
    if let Some(current) = counts.last_mut() {
        *current = current.saturating_add(cost);
    }
}

/// Whether a refused request of `costs` would be admitted by the counts
/// its take-back left: each part's counts before it, each current counter
/// replaced by its value after the take-back (`after`, per part; unknown
/// for a part whose take-back failed: no).
///
/// Each part's counter is added to atomically, but not together with the
/// others', so concurrent requests of several parts read each other's
/// additions before those are taken back: in a burst, the requests that
/// drew the first places of one limit can be refused by another's, and the
/// burst admits fewer than its smallest limit. If the values after the
/// take-back would admit the request, what refused it were additions that
/// have since gone, and it goes once more. Sound: the new try is decided by
/// its own atomic additions, as any request is. Once: the tries of one
/// burst still race each other, and erring towards refusing is the
/// documented trade-off.
pub(super) fn room_after_take_back(
    limits: &[&[Limit]],
    counts: &[CountsByLimit],
    after: &[Option<Vec<Option<u64>>>],
    now_ms: u64,
    costs: &[u64],
) -> bool {
    after.len() == limits.len()
        && limits.iter().zip(counts).zip(after).zip(costs).all(
            |(((limits, counts), after), &cost)| {
                let Some(currents) = after else {
                    return false;
                };
                admits_with(limits, counts, currents, now_ms, cost)
            },
        )
}

/// Whether `limits` admit `cost` with each limit's current count replaced
/// by the one in `currents` (all known, one per limit).
fn admits_with(
    limits: &[Limit],
    counts: &[Counts],
    currents: &[Option<u64>],
    now_ms: u64,
    cost: u64,
) -> bool {
    if counts.len() != limits.len() || currents.len() != limits.len() {
        return false;
    }
    let mut now: SmallVec<[Counts; 2]> = SmallVec::with_capacity(limits.len());
    for (counts, current) in counts.iter().zip(currents) {
        let (Some(current), Some(_)) = (current, counts.last()) else {
            return false;
        };
        let mut counts = counts.clone();
        if let Some(last) = counts.last_mut() {
            *last = *current;
        }
        now.push(counts);
    }
    window::decide(limits, &now, now_ms, cost, Counting::IfAdmitted).allowed
}

#[cfg(test)]
mod tests;
