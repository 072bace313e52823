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
        if !allowed {
            // Estimates only decay, so once a limit admits it keeps
            // admitting: the request waits for the slowest limit.
            let this_limit = retry_after_ms(*limit, &after, now_ms, cost);
            wait = wait.zip(this_limit).map(|(a, b)| a.max(b));
        }
        let remaining = estimate.remaining(limit.limit());
        let next_unit_ms = if remaining > 0 {
            0
        } else {
            // A limit is at least 1, so one unit always fits eventually.
            retry_after_ms(*limit, &after, now_ms, 1).unwrap_or(0)
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
mod tests {
    use super::*;

    const MINUTE: u64 = 60_000;

    fn per_minute(limit: u64) -> Limit {
        Limit::new(limit, MINUTE, 1).unwrap()
    }

    #[test]
    fn the_23_45_example() {
        // Limit 500/min; at 23:45 of a minute, prev = 400 and curr = 250.
        let now = 1_000 * MINUTE + 45_000;
        let estimate = estimate(per_minute(500).window(), &[400, 250], now);
        assert_eq!(estimate.as_f64(), 350.0);
        assert!(admits(per_minute(500), &[400, 250], now, 1));

        let verdict = decide(
            &[per_minute(500)],
            &[vec![400, 250]],
            now,
            1,
            Counting::IfAdmitted,
        );
        assert!(verdict.allowed && verdict.counted);
        assert_eq!(verdict.limits[0].estimate.as_f64(), 351.0);
        assert_eq!(verdict.remaining(), 149);
        assert_eq!(verdict.retry_after_ms, Some(0));
    }

    #[test]
    fn precision_five_weights_only_the_oldest_sub_bucket() {
        // 100 per 10 s in 5 sub-buckets of 2 s; 30% into the current one.
        let limit = Limit::new(100, 10_000, 5).unwrap();
        let now = 7 * 10_000 + 4 * 2_000 + 600;
        let counts = [20, 10, 10, 10, 10, 30];
        // 20 * 0.7 + 10 + 10 + 10 + 10 + 30 = 84
        assert_eq!(estimate(limit.window(), &counts, now).as_f64(), 84.0);
        assert!(admits(limit, &counts, now, 16));
        assert!(!admits(limit, &counts, now, 17));
        // 17 fits once the oldest sub-bucket weighs at most 100 - 70 - 17:
        // 20 * (1 - f) <= 13 at f = 0.35, 700 ms into the sub-bucket.
        assert_eq!(retry_after_ms(limit, &counts, now, 17), Some(100));
        assert_eq!(retry_after_ms(limit, &counts, now, 101), None);
    }

    #[test]
    fn counts_leave_the_window_a_window_after_their_sub_bucket_ends() {
        let minute = per_minute(10).window();
        let now = 7 * MINUTE + 15_000;
        assert_eq!(empty_after_ms(minute, &[0, 0], now), 0);
        // Only the previous minute: gone when this one ends.
        assert_eq!(empty_after_ms(minute, &[4, 0], now), 45_000);
        // This minute's: gone when the next one ends.
        assert_eq!(empty_after_ms(minute, &[4, 1], now), 105_000);
        // 10 s in 5 sub-buckets of 2 s, 600 ms into the current one: the
        // newest counted sub-bucket, three before the current, ended 4.6 s
        // ago and weighs for 10 s after its end.
        let tenths = Limit::new(100, 10_000, 5).unwrap().window();
        let now = 7 * 10_000 + 4 * 2_000 + 600;
        assert_eq!(empty_after_ms(tenths, &[1, 0, 3, 0, 0, 0], now), 5_400);
        assert_eq!(empty_after_ms(tenths, &[1, 0, 0, 0, 0, 0], now), 1_400);
        // Counted at the very start of a sub-bucket: a whole one more.
        assert_eq!(empty_after_ms(minute, &[0, 1], 7 * MINUTE), 2 * MINUTE);
        let verdict = decide(&[per_minute(10)], &[[0, 0]], now, 1, Counting::Never);
        assert_eq!(verdict.limits[0].empty_after_ms, 0, "a peek counts nothing");
        let verdict = decide(&[per_minute(10)], &[[0, 0]], now, 1, Counting::IfAdmitted);
        assert_eq!(verdict.limits[0].empty_after_ms, 2 * MINUTE - now % MINUTE);
    }

    #[test]
    fn boundary_equality_is_admitted_exactly() {
        // prev = 3, f = 1/3: 3 * 2/3 = 2 exactly, which floats get wrong.
        let limit = Limit::new(3, 3_000, 1).unwrap();
        let now = 3_000 * 7 + 1_000;
        assert!(admits(limit, &[3, 0], now, 1));
        assert!(!admits(limit, &[3, 0], now - 1, 1));
        assert_eq!(retry_after_ms(limit, &[3, 0], now - 1, 1), Some(1));
    }

    #[test]
    fn rejected_check_counts_nothing_and_says_when_to_retry() {
        let limit = per_minute(5);
        let now = 10 * MINUTE + 30_000;
        let verdict = decide(&[limit], &[vec![0, 5]], now, 1, Counting::IfAdmitted);
        assert!(!verdict.allowed && !verdict.counted);
        assert_eq!(verdict.limits[0].estimate.as_f64(), 5.0);
        assert_eq!(verdict.remaining(), 0);
        assert_eq!(verdict.limits[0].next_unit_ms, 42_000);
        // The 5 become the previous bucket at the next minute and must decay
        // to 4: 5 * (1 - f) <= 4 at f = 0.2, 12 s into it, 42 s from now.
        assert_eq!(verdict.retry_after_ms, Some(42_000));
    }

    #[test]
    fn several_limits_count_only_if_all_admit() {
        let per_second = Limit::new(2, 1_000, 1).unwrap();
        let now = 50 * MINUTE + 500;
        let counts = vec![vec![0, 0], vec![0, 1]];
        let verdict = decide(
            &[per_second, per_minute(100)],
            &counts,
            now,
            2,
            Counting::IfAdmitted,
        );
        assert!(verdict.allowed);
        let counts = vec![vec![0, 1], vec![0, 1]];
        let verdict = decide(
            &[per_second, per_minute(100)],
            &counts,
            now,
            2,
            Counting::IfAdmitted,
        );
        assert!(!verdict.allowed && !verdict.counted);
        assert_eq!(verdict.limits[1].estimate.as_f64(), 1.0);
        // The minute limit never objected. The per-second one needs its 1
        // request gone entirely (1 * (1 - f) + 2 <= 2 only at f = 1), so
        // the request waits until the start of the second after next.
        assert_eq!(verdict.retry_after_ms, Some(1_500));
    }

    #[test]
    fn peek_and_report_count_as_told() {
        let limit = per_minute(5);
        let now = 3 * MINUTE;
        let peek = decide(&[limit], &[vec![0, 4]], now, 1, Counting::Never);
        assert!(peek.allowed && !peek.counted);
        assert_eq!(peek.remaining(), 1);
        let report = decide(&[limit], &[vec![0, 5]], now, 2, Counting::Always);
        assert!(!report.allowed && report.counted);
        assert_eq!(report.limits[0].estimate.as_f64(), 7.0);
        assert_eq!(report.remaining(), 0);
    }

    #[test]
    fn cost_above_the_limit_never_passes() {
        let verdict = decide(
            &[per_minute(5)],
            &[vec![0, 0]],
            MINUTE,
            6,
            Counting::IfAdmitted,
        );
        assert!(!verdict.allowed);
        assert_eq!(verdict.retry_after_ms, None);
    }

    #[test]
    fn current_ceiling_is_what_the_older_counts_leave() {
        let limit = per_minute(10);
        // prev 8 at f = 0.5 weighs 4: the current counter can reach 6.
        assert_eq!(current_ceiling(limit, &[8, 3], MINUTE + 30_000), 6);
        assert_eq!(current_ceiling(limit, &[30, 3], MINUTE), 0);
    }

    #[test]
    fn slide_drops_old_counters_and_zeroes_new_ones() {
        assert_eq!(slide(&[1, 2, 3], 10, 10).as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(slide(&[1, 2, 3], 10, 11).as_deref(), Some(&[2, 3, 0][..]));
        assert_eq!(slide(&[1, 2, 3], 10, 99).as_deref(), Some(&[0, 0, 0][..]));
        assert_eq!(
            slide(&[1, 2, 3], 10, u64::MAX).as_deref(),
            Some(&[0, 0, 0][..])
        );
        assert_eq!(slide(&[1, 2, 3], 10, 9), None);
    }
}
