//! Decisions per policy over the last minute, for the status page: six
//! 10-second slices of counters per policy, bumped with atomics so that
//! counting costs a check no lock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::by_name::ByName;
use crate::limiter::{Decision, Source};

const SLICES: usize = 6;
const SLICE_MS: u64 = 10_000;

/// What the page shows of a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Allowed,
    Refused,
    Exempt,
    /// Admitted by a shadow policy whose limits refuse it.
    Shadow,
}

impl Kind {
    const COUNT: usize = 4;

    pub fn of(decision: &Decision) -> Kind {
        match (decision.source, decision.allowed) {
            (Source::Exempt, _) => Kind::Exempt,
            (_, true) if decision.shadow && !decision.would_allow => Kind::Shadow,
            (_, true) => Kind::Allowed,
            (_, false) => Kind::Refused,
        }
    }
}

/// Counts of the last minute, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Minute {
    /// Admitted by the limits.
    pub allowed: u64,
    pub refused: u64,
    pub exempt: u64,
    /// Admitted by a shadow policy whose limits refuse them: what it would
    /// refuse once enforced.
    pub shadow: u64,
}

#[derive(Default)]
struct Slice {
    period: AtomicU64,
    counts: [AtomicU64; Kind::COUNT],
}

#[derive(Default)]
struct Ring([Slice; SLICES]);

impl Ring {
    fn count(&self, kind: Kind, now_ms: u64) {
        let period = now_ms / SLICE_MS;
        let slice = &self.0[(period % SLICES as u64) as usize];
        let held = slice.period.load(Ordering::Relaxed);
        // The first to see a slice of a minute ago restarts it. A decision
        // counted by another thread in between may be lost: this is a
        // status display, not a limit.
        if held != period
            && slice
                .period
                .compare_exchange(held, period, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for count in &slice.counts {
                count.store(0, Ordering::Relaxed);
            }
        }
        slice.counts[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn minute(&self, now_ms: u64) -> Minute {
        let period = now_ms / SLICE_MS;
        let mut sums = [0u64; Kind::COUNT];
        for slice in &self.0 {
            let held = slice.period.load(Ordering::Relaxed);
            if held <= period && period - held < SLICES as u64 {
                for (sum, count) in sums.iter_mut().zip(&slice.counts) {
                    *sum += count.load(Ordering::Relaxed);
                }
            }
        }
        Minute {
            allowed: sums[0],
            refused: sums[1],
            exempt: sums[2],
            shadow: sums[3],
        }
    }
}

/// Every policy's ring. Policies are the configuration's (and `inline`),
/// so the map stays as small as the configuration.
#[derive(Default)]
pub struct RecentDecisions {
    by_policy: ByName<Ring>,
}

impl RecentDecisions {
    pub fn count(&self, policy: &str, kind: Kind, now_ms: u64) {
        self.by_policy
            .with(policy, |_| Ring::default(), |ring| ring.count(kind, now_ms));
    }

    /// Forget a policy no longer configured.
    pub fn forget(&self, policy: &str) {
        self.by_policy.remove(policy);
    }

    pub fn minute(&self, policy: &str, now_ms: u64) -> Minute {
        self.by_policy
            .get(policy)
            .map(|ring| ring.minute(now_ms))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_of_counts_slides() {
        let recent = RecentDecisions::default();
        recent.count("api", Kind::Allowed, 0);
        recent.count("api", Kind::Refused, 15_000);
        recent.count("api", Kind::Exempt, 59_999);
        let minute = recent.minute("api", 59_999);
        assert_eq!((minute.allowed, minute.refused, minute.exempt), (1, 1, 1));
        assert_eq!(recent.minute("api", 65_000).allowed, 0);
        assert_eq!(recent.minute("other", 0), Minute::default());
        recent.count("api", Kind::Allowed, 125_000);
        assert_eq!(recent.minute("api", 125_000).allowed, 1, "slice reused");
    }
}
