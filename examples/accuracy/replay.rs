//! Drive the real `Limiter` through a trace with a manual clock, beside the
//! fixed window and the exact log, and judge every decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::{Decision, FailureMode, Limit, Limiter, ManualClock, Policy, Store};

use crate::judge::{FixedWindow, Judge, Tally};
use crate::trace::Trace;

/// The precisions replayed, side by side, on every trace.
pub const PRECISIONS: [u32; 3] = [1, 4, 10];

/// One trace's results: a tally per decider, in the order of `LABELS`.
pub struct Outcome {
    pub trace: Trace,
    pub requests: u64,
    pub tallies: Vec<Tally>,
    /// Decisions where precision 1 with its near-cache answered otherwise
    /// than precision 1 without one (must be 0: the near-cache is exact).
    pub near_cache_changed: u64,
    /// Rejects the near-cache of precision 1 answered.
    pub near_cache_hits: u64,
    pub elapsed: Duration,
}

pub const LABELS: [&str; 6] = [
    "slidegate, precision 1",
    "slidegate, precision 4",
    "slidegate, precision 10",
    "fixed window",
    "exact sliding log",
    "precision 1, every request counted",
];

/// The index of the exact log in `LABELS`, and of Cloudflare's counting
/// model: the same estimate with every request counted (`Limiter::report`),
/// judged against an exact log of every request.
pub const EXACT: usize = 4;
/// The index of the fixed window in `LABELS`.
const FIXED: usize = 3;
pub const EVERY_REQUEST: usize = 5;

/// One request of the watched client, for the plot: each decider's view of
/// the window just before the request.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t_ms: u64,
    pub estimate_p1: f64,
    pub exact_p1: u64,
    pub estimate_p10: f64,
    /// The fixed window's counter, and what it really admitted in the window.
    pub fixed: u64,
    pub exact_fixed: u64,
}

/// What to watch for the plot: a client, over the trace's first `until_ms`.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    pub client: u32,
    pub until_ms: u64,
}

pub fn estimate_before(decision: &Decision, cost: u64) -> f64 {
    let after = decision
        .limits
        .first()
        .map_or(0.0, |state| state.estimate.as_f64());
    if decision.counted {
        after - cost as f64
    } else {
        after
    }
}

/// Replay `trace` on limiters over `store` (one per precision, plus
/// precision 1 without near-cache, which checks that the near-cache never
/// changes a decision).
pub async fn replay<S: Store>(
    trace: &Trace,
    store: Arc<S>,
    watch: Option<Watch>,
) -> Result<(Outcome, Vec<Sample>), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let clock = ManualClock::new(trace.start_ms);
    let limiter = |near_cache: bool| {
        let mut builder = Limiter::builder(store.clone())
            .clock(clock.clone())
            // A store error must stop the replay, not be decided for.
            .failure_mode(FailureMode::Deny)
            .timeout(Duration::from_secs(5));
        if !near_cache {
            builder = builder.near_cache_capacity(0);
        }
        builder.build()
    };
    let limiters = [
        limiter(true),
        limiter(true),
        limiter(true),
        limiter(false),
        limiter(true),
    ];
    let policies = PRECISIONS
        .iter()
        .map(|&precision| {
            let limit = Limit::new(trace.limit, trace.window_ms, precision)?;
            Ok(Policy::new(format!("p{precision}"), vec![limit])?)
        })
        .collect::<Result<Vec<Policy>, Box<dyn std::error::Error>>>()?;
    // The twin without near-cache counts under its own scope, so that the
    // two precision-1 limiters do not share counters.
    let twin = Policy::new("p1twin", policies[0].limits().to_vec())?;
    let every_request = Policy::new("p1all", policies[0].limits().to_vec())?;

    let clients = trace.clients();
    let keys: Vec<String> = (0..clients)
        .map(|client| format!("client-{client}"))
        .collect();
    let mut judges: Vec<Judge> = (0..EVERY_REQUEST)
        .map(|_| Judge::new(trace.window_ms, trace.limit, clients))
        .collect();
    judges.push(Judge::counting_all(trace.window_ms, trace.limit, clients));
    let mut fixed = FixedWindow::new(trace.window_ms, trace.limit, clients);
    let mut samples = Vec::new();
    let mut requests = 0;
    let mut near_cache_changed = 0;

    for request in trace.requests() {
        requests += 1;
        clock.set(request.t_ms);
        let key = keys[request.client as usize].as_str();
        let cost = request.cost;
        let (p1, p4, p10, uncached, counted) = tokio::join!(
            limiters[0].check(key, &policies[0], cost),
            limiters[1].check(key, &policies[1], cost),
            limiters[2].check(key, &policies[2], cost),
            limiters[3].check(key, &twin, cost),
            // A report counts the request whatever the decision, and its
            // `allowed` says whether the counts are within the limit.
            limiters[4].report(key, &every_request, cost),
        );
        let decisions = [p1?, p4?, p10?];
        near_cache_changed += u64::from(decisions[0].allowed != uncached?.allowed);

        // The independent exact log decides first: it is every decider's
        // reference for `differs`.
        let exact_judge = &mut judges[EXACT];
        let exact_count = exact_judge.exact(request.client, request.t_ms);
        let exact_admits = exact_count + cost <= trace.limit;
        exact_judge.record(
            request.client,
            request.t_ms,
            cost,
            exact_admits,
            exact_count as f64,
            exact_admits,
        );
        let (fixed_admits, fixed_count) = fixed.check(request.client, request.t_ms, cost);

        if let Some(watch) = watch
            && watch.client == request.client
            && request.t_ms < trace.start_ms + watch.until_ms
        {
            samples.push(Sample {
                t_ms: request.t_ms - trace.start_ms,
                estimate_p1: estimate_before(&decisions[0], cost),
                exact_p1: judges[0].exact(request.client, request.t_ms),
                estimate_p10: estimate_before(&decisions[2], cost),
                fixed: fixed_count,
                exact_fixed: judges[FIXED].exact(request.client, request.t_ms),
            });
        }
        for (judge, decision) in judges.iter_mut().zip(&decisions) {
            judge.record(
                request.client,
                request.t_ms,
                cost,
                decision.allowed,
                estimate_before(decision, cost),
                exact_admits,
            );
        }
        judges[FIXED].record(
            request.client,
            request.t_ms,
            cost,
            fixed_admits,
            fixed_count as f64,
            exact_admits,
        );
        // Against the log of every request, the reference is the exact
        // rule on that log, which `record` works out itself.
        let counted = counted?;
        let all_judge = &mut judges[EVERY_REQUEST];
        let offered = all_judge.exact(request.client, request.t_ms);
        all_judge.record(
            request.client,
            request.t_ms,
            cost,
            counted.allowed,
            estimate_before(&counted, cost),
            offered + cost <= trace.limit,
        );
    }
    let near_cache_hits = limiters[0].metrics().near_cache_hits();
    Ok((
        Outcome {
            trace: trace.clone(),
            requests,
            tallies: judges.into_iter().map(|judge| judge.tally).collect(),
            near_cache_changed,
            near_cache_hits,
            elapsed: started.elapsed(),
        },
        samples,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Pattern, Source};
    use slidegate::MemoryStore;

    fn hand_made(limit: u64, window_ms: u64, duration_ms: u64, sources: Vec<Source>) -> Trace {
        Trace {
            name: "hand-made".into(),
            about: String::new(),
            window_ms,
            limit,
            start_ms: 1_000_000,
            duration_ms,
            sources,
        }
    }

    #[tokio::test]
    async fn a_hand_made_trace_is_judged_as_worked_out_by_hand() {
        // Limit 2 per second. Offsets 900, 950 fill the first window; the
        // rest probe the boundary (worked out in the comments).
        let offsets = vec![900.0, 950.0, 1_000.0, 1_100.0, 1_500.0, 1_960.0];
        let trace = hand_made(
            2,
            1_000,
            2_000,
            vec![Source::new(0, 1, Pattern::At(offsets), 0)],
        );
        let watch = Watch {
            client: 0,
            until_ms: 2_000,
        };
        let (outcome, samples) = replay(&trace, Arc::new(MemoryStore::new()), Some(watch))
            .await
            .unwrap();
        assert_eq!(outcome.requests, 6);

        // Precision 1: admits 900, 950; at 1000 prev = 2 weighs 2: reject;
        // at 1100 it weighs 1.8: reject; at 1500 it weighs 1: admit, though
        // 900 and 950 are both still in (500, 1500]: wrongly admitted, one
        // over. At 1960: 2 * 0.04 + 1 = 1.08, reject, though only 1500 is
        // in (960, 1960]: wrongly rejected.
        let p1 = &outcome.tallies[0];
        assert_eq!(
            (p1.admitted, p1.wrongly_admitted, p1.wrongly_rejected),
            (3, 1, 1)
        );
        assert_eq!(p1.most_over, 1);
        // The independent exact log admits 900, 950, 1960.
        assert_eq!(p1.differs, 2);
        // |estimate - exact| / 2: 0, 0, 0, 0.2, 1.0, 0.08, over 2.
        assert!(
            (p1.mean_error() - 0.64 / 6.0).abs() < 1e-9,
            "{}",
            p1.mean_error()
        );
        assert!((p1.error_max - 0.5).abs() < 1e-9);

        // The fixed window admits 900, 950, then 1000 and 1100 in a fresh
        // window: 4 within (500, 1500], two over.
        let fixed = &outcome.tallies[3];
        assert_eq!(
            (
                fixed.admitted,
                fixed.wrongly_admitted,
                fixed.wrongly_rejected
            ),
            (4, 2, 0)
        );
        assert_eq!(fixed.most_over, 2);
        assert_eq!(fixed.differs, 3);

        let exact = &outcome.tallies[EXACT];
        assert_eq!(
            (
                exact.admitted,
                exact.wrongly_admitted,
                exact.wrongly_rejected
            ),
            (3, 0, 0)
        );
        assert_eq!((exact.most_over, exact.differs), (0, 0));

        // Counting every request (Limiter::report), as Cloudflare does:
        // precision 1 sees 0, 1, 2, 1.8 + 1, 1 + 2, 0.08 + 3 before each,
        // the log of every request 0, 1, 2, 3, 4, 3 (errors 0, 0, 0, 0.2,
        // 1, 0.08); both say "over" from 1000 on: no decision is wrong.
        let every = &outcome.tallies[EVERY_REQUEST];
        assert_eq!(
            (
                every.admitted,
                every.wrongly_admitted,
                every.wrongly_rejected
            ),
            (2, 0, 0)
        );
        assert!(
            (every.mean_error() - 0.64 / 6.0).abs() < 1e-9,
            "{}",
            every.mean_error()
        );
        // Against the real rate, over the five requests with a non-empty
        // window (exact 1, 2, 3, 4, 3): (0.2 / 3 + 1 / 4 + 0.08 / 3) / 5.
        let rate_error = (0.2 / 3.0 + 1.0 / 4.0 + 0.08 / 3.0) / 5.0;
        assert!(
            (every.mean_rate_error() - rate_error).abs() < 1e-9,
            "{}",
            every.mean_rate_error()
        );

        // 1100 was rejected from the near-cache, and nothing changed by it.
        assert_eq!(outcome.near_cache_hits, 1);
        assert_eq!(outcome.near_cache_changed, 0);

        let at_1500 = samples[4];
        assert_eq!(at_1500.t_ms, 1_500);
        assert_eq!(
            (at_1500.estimate_p1, at_1500.exact_p1, at_1500.fixed),
            (1.0, 2, 2)
        );
    }

    #[tokio::test]
    async fn the_near_cache_never_changes_a_decision_with_mixed_costs() {
        // Three clients, each with requests of cost 1, 2 and 5 at several
        // times the limit: the near-cache is busy, and a cost-1 request
        // may pass where a cost-5 one was refused.
        let mut sources = Vec::new();
        for client in 0..3 {
            for (index, cost) in [1, 2, 5].into_iter().enumerate() {
                let pattern = Pattern::Poisson { mean_gap_ms: 40.0 };
                sources.push(Source::new(
                    client,
                    cost,
                    pattern,
                    u64::from(client) * 10 + index as u64,
                ));
            }
        }
        let trace = hand_made(10, 1_000, 60_000, sources);
        let (outcome, _) = replay(&trace, Arc::new(MemoryStore::new()), None)
            .await
            .unwrap();
        assert!(outcome.requests > 10_000);
        assert!(
            outcome.near_cache_hits > 1_000,
            "{}",
            outcome.near_cache_hits
        );
        assert_eq!(outcome.near_cache_changed, 0);
        // The exact log, judged against itself, is never wrong.
        let exact = &outcome.tallies[EXACT];
        assert_eq!(
            exact.wrongly_admitted + exact.wrongly_rejected + exact.differs,
            0
        );
        assert!(exact.most_over <= 0);
    }
}
