//! Property tests of the pure engine against a brute-force reference.
//!
//! The reference knows nothing of counters: it keeps the log of admitted
//! requests and, at any instant, sums it into the estimate straight from the
//! definition; it finds retry times by trying every millisecond. The engine
//! is driven exactly as the limiter drives it: counters per bucket, read
//! before the request, incremented only when the verdict says so.

use std::collections::HashMap;

use proptest::prelude::*;
use slidegate::policy::{Limit, Window};
use slidegate::window::{self, Counting};

/// The log of admitted requests: (instant in ms, cost).
#[derive(Default)]
struct Reference {
    admitted: Vec<(u64, u64)>,
}

impl Reference {
    /// The estimate at `now`, times the sub-bucket length, from the log.
    fn scaled_estimate(&self, window: Window, now: u64) -> u128 {
        let bucket_ms = window.bucket_ms();
        let precision = u64::from(window.precision());
        let current = now / bucket_ms;
        let elapsed = now % bucket_ms;
        self.admitted
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|&(at, cost)| {
                let age = current - at / bucket_ms;
                let weight = if age < precision {
                    bucket_ms
                } else if age == precision {
                    bucket_ms - elapsed
                } else {
                    0
                };
                u128::from(cost) * u128::from(weight)
            })
            .sum()
    }

    fn admits(&self, limits: &[Limit], now: u64, cost: u64) -> bool {
        limits.iter().all(|limit| {
            let bucket_ms = u128::from(limit.window().bucket_ms());
            self.scaled_estimate(limit.window(), now) + u128::from(cost) * bucket_ms
                <= u128::from(limit.limit()) * bucket_ms
        })
    }

    /// The first millisecond from `now` at which the request fits, found by
    /// trying them all; every count has left after two windows.
    fn retry_after(&self, limits: &[Limit], now: u64, cost: u64) -> Option<u64> {
        let horizon = limits
            .iter()
            .map(|l| 2 * l.window().window_ms() + 2)
            .max()?;
        (0..=horizon).find(|&wait| self.admits(limits, now + wait, cost))
    }
}

/// The engine's side: counters per (window, bucket), as a store keeps them.
#[derive(Default)]
struct Counters(HashMap<(Window, u64), u64>);

impl Counters {
    fn read(&self, limit: &Limit, now: u64) -> Vec<u64> {
        let window = limit.window();
        let current = window.bucket_of(now);
        (0..=u64::from(window.precision()))
            .rev()
            .map(|back| match current.checked_sub(back) {
                Some(bucket) => self.0.get(&(window, bucket)).copied().unwrap_or(0),
                None => 0,
            })
            .collect()
    }

    fn add(&mut self, limit: &Limit, now: u64, cost: u64) {
        let window = limit.window();
        *self.0.entry((window, window.bucket_of(now))).or_default() += cost;
    }
}

/// Small windows (so the brute force stays quick) with every precision
/// that divides them.
fn limit() -> impl Strategy<Value = Limit> {
    (
        prop::sample::select(vec![1u64, 7, 10, 12, 30, 60, 100]),
        1u64..=12,
    )
        .prop_flat_map(|(window_ms, limit)| {
            let divisors: Vec<u32> = (1..=window_ms as u32)
                .filter(|k| window_ms % u64::from(*k) == 0)
                .collect();
            prop::sample::select(divisors)
                .prop_map(move |precision| Limit::new(limit, window_ms, precision).unwrap())
        })
}

/// One to three limits with distinct windows.
fn limits() -> impl Strategy<Value = Vec<Limit>> {
    prop::collection::vec(limit(), 1..=3).prop_map(|mut limits| {
        let mut seen = Vec::new();
        limits.retain(|limit| {
            let fresh = !seen.contains(&limit.window());
            seen.push(limit.window());
            fresh
        });
        limits
    })
}

/// Requests: how long after the previous one, and their cost.
fn requests() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..40, 1u64..=4), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Step by step, the engine admits exactly what the reference admits,
    /// reports the same estimates, counts only what it admits, and gives the
    /// retry time the brute force finds.
    #[test]
    fn engine_agrees_with_reference(limits in limits(), start in 0u64..1_000_000, requests in requests()) {
        let mut reference = Reference::default();
        let mut counters = Counters::default();
        let mut now = start;
        for (gap, cost) in requests {
            now += gap;
            let counts: Vec<Vec<u64>> = limits.iter().map(|l| counters.read(l, now)).collect();
            let verdict = window::decide(&limits, &counts, now, cost, Counting::IfAdmitted);

            prop_assert_eq!(verdict.allowed, reference.admits(&limits, now, cost));
            prop_assert_eq!(verdict.counted, verdict.allowed, "a rejected request was counted");
            if verdict.allowed {
                reference.admitted.push((now, cost));
                for limit in &limits {
                    counters.add(limit, now, cost);
                }
                prop_assert_eq!(verdict.retry_after_ms, Some(0));
            } else {
                prop_assert_eq!(verdict.retry_after_ms, reference.retry_after(&limits, now, cost));
            }
            for (limit, state) in limits.iter().zip(&verdict.limits) {
                let scaled = reference.scaled_estimate(limit.window(), now);
                let bucket_ms = limit.window().bucket_ms() as f64;
                prop_assert_eq!(state.estimate.as_f64(), scaled as f64 / bucket_ms);
                let capacity = u128::from(limit.limit()) * u128::from(limit.window().bucket_ms());
                let remaining = (capacity.saturating_sub(scaled) / u128::from(limit.window().bucket_ms())) as u64;
                prop_assert_eq!(state.remaining, remaining);
            }
        }
    }

    /// A rejected request leaves every counter as it was: the estimates it
    /// reports are those before it, and deciding again gives the same answer.
    #[test]
    fn rejected_request_changes_no_counter(limits in limits(), counts in prop::collection::vec(0u64..15, 1001), now in 1_000u64..1_000_000, cost in 1u64..6) {
        let counts: Vec<Vec<u64>> = limits.iter().map(|l| counts[..=l.window().precision() as usize].to_vec()).collect();
        let verdict = window::decide(&limits, &counts, now, cost, Counting::IfAdmitted);
        prop_assume!(!verdict.allowed);
        prop_assert!(!verdict.counted);
        for ((limit, counts), state) in limits.iter().zip(&counts).zip(&verdict.limits) {
            prop_assert_eq!(state.estimate, window::estimate(limit.window(), counts, now));
        }
        prop_assert_eq!(window::decide(&limits, &counts, now, cost, Counting::IfAdmitted), verdict);
    }

    /// Raising a limit never turns an admit into a reject.
    #[test]
    fn raising_a_limit_never_rejects_more(limit in limit(), raise in 0u64..10, counts in prop::collection::vec(0u64..15, 101), now in 0u64..1_000_000, cost in 1u64..6) {
        let counts = &counts[..=limit.window().precision() as usize];
        let raised = Limit::new(limit.limit() + raise, limit.window().window_ms(), limit.window().precision()).unwrap();
        if window::admits(limit, counts, now, cost) {
            prop_assert!(window::admits(raised, counts, now, cost));
        }
    }

    /// Waiting exactly `retry_after_ms` with no other traffic admits the same
    /// request; waiting 1 ms less does not.
    #[test]
    fn retry_after_is_exact(limits in limits(), start in 0u64..1_000_000, history in requests(), cost in 1u64..8) {
        // Build some history, admitted or not, then ask for the retry time.
        let mut reference = Reference::default();
        let mut counters = Counters::default();
        let mut now = start;
        for (gap, past_cost) in history {
            now += gap;
            if reference.admits(&limits, now, past_cost) {
                reference.admitted.push((now, past_cost));
                for limit in &limits {
                    counters.add(limit, now, past_cost);
                }
            }
        }
        let counts: Vec<Vec<u64>> = limits.iter().map(|l| counters.read(l, now)).collect();
        let verdict = window::decide(&limits, &counts, now, cost, Counting::Never);
        match verdict.retry_after_ms {
            None => prop_assert!(limits.iter().any(|l| cost > l.limit())),
            Some(wait) => {
                let later: Vec<Vec<u64>> = limits.iter().map(|l| counters.read(l, now + wait)).collect();
                prop_assert!(window::decide(&limits, &later, now + wait, cost, Counting::Never).allowed);
                prop_assert!(reference.admits(&limits, now + wait, cost));
                if wait > 0 {
                    let before: Vec<Vec<u64>> = limits.iter().map(|l| counters.read(l, now + wait - 1)).collect();
                    prop_assert!(!window::decide(&limits, &before, now + wait - 1, cost, Counting::Never).allowed);
                    prop_assert!(!reference.admits(&limits, now + wait - 1, cost));
                }
            }
        }
    }

    /// The estimate with nothing new counted never rises as time passes.
    #[test]
    fn estimate_only_decays(limit in limit(), counts in prop::collection::vec(0u64..15, 101), now in 0u64..1_000_000, step in 1u64..300) {
        let counts = &counts[..=limit.window().precision() as usize];
        let window = limit.window();
        let later_counts = window::slide(counts, window.bucket_of(now), window.bucket_of(now + step)).unwrap();
        let before = window::estimate(window, counts, now).as_f64();
        let after = window::estimate(window, &later_counts, now + step).as_f64();
        prop_assert!(after <= before, "{before} -> {after}");
    }
}
