//! The sliding-window arithmetic: counts, time and limits in, a decision out.
//! No I/O and no clock reads here.
//!
//! A limit with precision `k` reads `k + 1` counters at instant `t`: the
//! current sub-bucket `b = t / w` (with `w = window / k`) and the `k` before
//! it. In this module they are a slice ordered oldest first:
//! `counts[0]` is bucket `b - k`, `counts[k]` is bucket `b`. The oldest one
//! is weighted by `1 - f`, with `f = (t mod w) / w`, the others count in full:
//!
//! ```text
//! estimate = counts[0] * (1 - f) + counts[1] + ... + counts[k]
//! ```
//!
//! All arithmetic is exact: an [`Estimate`] is kept multiplied by `w`, so
//! `estimate + cost <= limit` is decided on integers, with no rounding at
//! the boundary, and the retry time is exact to the millisecond.

use crate::policy::{Limit, Window};
use smallvec::SmallVec;

/// A window estimate, exact: `scaled / bucket_ms` requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    scaled: u128,
    bucket_ms: u64,
}

impl Estimate {
    /// The estimate as a number of requests (for display; decisions use the
    /// exact form).
    pub fn as_f64(&self) -> f64 {
        self.scaled as f64 / self.bucket_ms as f64
    }

    /// Whether `cost` more units fit under `limit`.
    pub fn fits(&self, cost: u64, limit: u64) -> bool {
        self.scaled + u128::from(cost) * u128::from(self.bucket_ms)
            <= u128::from(limit) * u128::from(self.bucket_ms)
    }

    /// `max(0, floor(limit - estimate))`.
    pub fn remaining(&self, limit: u64) -> u64 {
        let capacity = u128::from(limit) * u128::from(self.bucket_ms);
        (capacity.saturating_sub(self.scaled) / u128::from(self.bucket_ms)) as u64
    }
}

/// The estimate of `window` at `now_ms` from its counters (oldest first).
pub fn estimate(window: Window, counts: &[u64], now_ms: u64) -> Estimate {
    let bucket_ms = window.bucket_ms();
    let elapsed = u128::from(now_ms % bucket_ms);
    let (oldest, full) = counts.split_first().unwrap_or((&0, &[]));
    let full: u128 = full.iter().map(|&count| u128::from(count)).sum();
    let bucket = u128::from(bucket_ms);
    Estimate {
        scaled: u128::from(*oldest) * (bucket - elapsed) + full * bucket,
        bucket_ms,
    }
}

/// Whether a request of `cost` is admitted by `limit` given its counters
/// before the request.
pub fn admits(limit: Limit, counts: &[u64], now_ms: u64, cost: u64) -> bool {
    estimate(limit.window(), counts, now_ms).fits(cost, limit.limit())
}

/// The largest value the current counter may reach under `limit` given the
/// older counters: `floor(limit - older part of the estimate)`, or 0. No
/// admitted request can have left the current counter above it.
pub fn current_ceiling(limit: Limit, counts: &[u64], now_ms: u64) -> u64 {
    let older = counts.split_last().map_or(&[][..], |(_, older)| older);
    let mut without_current = older.to_vec();
    without_current.push(0);
    estimate(limit.window(), &without_current, now_ms).remaining(limit.limit())
}

/// How long from `now_ms` until a request of `cost` is admitted by `limit`,
/// if nothing else is counted meanwhile: 0 if it is admitted now, `None` if
/// it never can be (`cost > limit`).
///
/// The estimate only decays: within a sub-bucket the oldest counter's weight
/// falls linearly, and at each boundary the window slides one counter on.
/// So the earliest instant is found by solving, sub-bucket by sub-bucket,
/// `oldest * (w - x) + (full + cost) * w <= limit * w` for the smallest
/// offset `x`; after `k + 1` boundaries every known count has left.
pub fn retry_after_ms(limit: Limit, counts: &[u64], now_ms: u64, cost: u64) -> Option<u64> {
    if cost > limit.limit() {
        return None;
    }
    let bucket = u128::from(limit.window().bucket_ms());
    let elapsed = u128::from(now_ms) % bucket;
    // The counters after the oldest, summed once and shed one per boundary
    // crossed, keep this linear in the precision.
    let mut full: u128 = counts.iter().skip(1).map(|&count| u128::from(count)).sum();
    for crossed in 0..=counts.len() {
        let oldest = u128::from(counts.get(crossed).copied().unwrap_or(0));
        if crossed > 0 {
            full -= oldest;
        }
        let needed = full + u128::from(cost);
        let Some(room) = u128::from(limit.limit()).checked_sub(needed) else {
            continue;
        };
        let start = if crossed == 0 { elapsed } else { 0 };
        // oldest * (w - x) <= room * w  <=>  x >= w - floor(room * w / oldest);
        // with no oldest count, nothing is left to decay in this sub-bucket.
        let earliest = match (room * bucket).checked_div(oldest) {
            Some(most_weight) => start.max(bucket.saturating_sub(most_weight)),
            None => start,
        };
        if earliest < bucket {
            let wait = crossed as u128 * bucket + earliest - elapsed;
            return Some(u64::try_from(wait).unwrap_or(u64::MAX));
        }
    }
    // Unreachable: past the last boundary the estimate is 0 and cost <= limit.
    None
}

/// How long from `now_ms` until every count in `counts` (oldest first) has
/// left the window: 0 when nothing is counted. A sub-bucket's counts weigh
/// in full for a window after it ends, then nothing, so it is the newest
/// counted sub-bucket that sets the time: `counts[i]` ends `i` sub-buckets
/// after the oldest, which itself weighs nothing once the current one ends.
pub fn empty_after_ms(window: Window, counts: &[u64], now_ms: u64) -> u64 {
    let Some(newest) = counts.iter().rposition(|&count| count > 0) else {
        return 0;
    };
    let bucket = window.bucket_ms();
    let current_end = (now_ms - now_ms % bucket).saturating_add(bucket);
    let sub_buckets_after = u64::try_from(newest).unwrap_or(u64::MAX);
    current_end.saturating_add(bucket.saturating_mul(sub_buckets_after)) - now_ms
}

/// One limit's bucket counts moved to a later bucket: inline up to four
/// (a window at precision 3), so a hot reject slides them without the heap.
pub type SlidCounts = smallvec::SmallVec<[u64; 4]>;

/// The counters of `counts` (read with `counts[k]` as bucket `from`) as seen
/// from bucket `to`: counters that slid out are dropped, newer ones are
/// unknown and taken as 0, so a lower bound stays a lower bound. `None` if
/// `to` is before `from`.
pub fn slide(counts: &[u64], from: u64, to: u64) -> Option<SlidCounts> {
    let shift = usize::try_from(to.checked_sub(from)?).unwrap_or(usize::MAX);
    Some(
        (0..counts.len())
            .map(|index| {
                index
                    .checked_add(shift)
                    .and_then(|source| counts.get(source))
                    .copied()
                    .unwrap_or(0)
            })
            .collect(),
    )
}

/// Whether a request is counted: a check counts only admitted requests, a
/// peek never counts, a report always does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counting {
    IfAdmitted,
    Never,
    Always,
}

/// One limit's state after a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LimitState {
    pub limit: Limit,
    /// The estimate after the call: it includes this request's cost when the
    /// request was counted.
    pub estimate: Estimate,
    /// `max(0, floor(limit - estimate))`.
    pub remaining: u64,
    /// How long until this limit admits one more unit: 0 while `remaining`
    /// is above 0 (the `t` of the `RateLimit` header on a refusal).
    pub next_unit_ms: u64,
    /// How long until every count now in the window has left it, this
    /// request's included when counted: 0 only when nothing is counted
    /// (the `t` of the `RateLimit` header on an admitted answer).
    pub empty_after_ms: u64,
}

/// The decision for one request over every limit of a policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Every limit admits the request (for a report: the counts, including
    /// it, are still within every limit).
    pub allowed: bool,
    /// Whether the request's cost was added to the counters.
    pub counted: bool,
    /// 0 when allowed; otherwise how long until the same request would be
    /// admitted; `None` if it never can be.
    pub retry_after_ms: Option<u64>,
    pub limits: Vec<LimitState>,
    /// The instant decided for: the counters are this instant's buckets, and
    /// `retry_after_ms` counts from it.
    pub decided_at_ms: u64,
}

impl Verdict {
    /// The smallest `remaining` over the limits.
    pub fn remaining(&self) -> u64 {
        smallest_remaining(&self.limits)
    }
}

/// The smallest `remaining` over some limits' states (0 for none).
pub fn smallest_remaining(limits: &[LimitState]) -> u64 {
    limits
        .iter()
        .map(|state| state.remaining)
        .min()
        .unwrap_or(0)
}

/// Decide a request of `cost` at `now_ms` against `limits`, given each
/// limit's counters before the request (`counts[i]` for `limits[i]`).
pub fn decide<C: AsRef<[u64]>>(
    limits: &[Limit],
    counts: &[C],
    now_ms: u64,
    cost: u64,
    counting: Counting,
) -> Verdict {
    let allowed = limits
        .iter()
        .zip(counts)
        .all(|(limit, counts)| admits(*limit, counts.as_ref(), now_ms, cost));
    let counted = match counting {
        Counting::IfAdmitted => allowed,
        Counting::Never => false,
        Counting::Always => true,
    };
    let mut wait = Some(0);
    let mut states = Vec::with_capacity(limits.len());
    for (limit, counts) in limits.iter().zip(counts) {
        // Inline up to precision 7: no allocation per limit.
        let mut after = SmallVec::<[u64; 8]>::from_slice(counts.as_ref());
        if counted && let Some(current) = after.last_mut() {
            *current = current.saturating_add(cost);
        }
        let estimate = estimate(limit.window(), &after, now_ms);
        let this_limit = (!allowed).then(|| retry_after_ms(*limit, &after, now_ms, cost));
        if let Some(this_limit) = this_limit {
            // Estimates only decay, so once a limit admits it keeps
            // admitting: the request waits for the slowest limit.
            wait = wait.zip(this_limit).map(|(a, b)| a.max(b));
        }
        let remaining = estimate.remaining(limit.limit());
        let next_unit_ms = match this_limit {
            _ if remaining > 0 => 0,
            // A refused request of one unit waits for the same instant:
            // not solved twice on every hot reject.
            Some(one_unit) if cost == 1 => one_unit.unwrap_or(0),
            // A limit is at least 1, so one unit always fits eventually.
            _ => retry_after_ms(*limit, &after, now_ms, 1).unwrap_or(0),
        };
        states.push(LimitState {
            limit: *limit,
            estimate,
            remaining,
            next_unit_ms,
            empty_after_ms: empty_after_ms(limit.window(), &after, now_ms),
        });
    }
    Verdict {
        allowed,
        counted,
        retry_after_ms: wait,
        limits: states,
        decided_at_ms: now_ms,
    }
}

#[cfg(test)]
mod tests;
