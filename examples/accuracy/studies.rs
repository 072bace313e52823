//! Two studies beside the tables, each answering a question the targets of
//! issue 9 raise:
//!
//! - How does the estimate's error fall with precision? The tables replay
//!   precisions 1, 4 and 10; this replays more, on steady traffic, beside
//!   `sqrt(precision)`, the fall that Poisson statistics predict.
//! - How does the attack mix's share of wrongly decided requests depend on
//!   its well-behaved clients? The same mix (a tenth of the clients) with
//!   their rates capped at 70 % to 90 % of the limit, decided as
//!   Cloudflare counts (every request), with how many clients ever went
//!   over the limit and how many were ever decided wrongly.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use slidegate::{FailureMode, Limit, Limiter, ManualClock, MemoryStore, Policy};

use crate::catalogue;
use crate::judge::{Judge, Tally};
use crate::replay::estimate_before;
use crate::report::{percent, thousands};
use crate::trace::Trace;

type Error = Box<dyn std::error::Error>;

/// The precisions of the first study.
pub const PRECISIONS: [u32; 7] = [1, 2, 4, 10, 25, 30, 100];
/// The well-behaved ceilings of the second study, in % of the limit.
pub const CEILINGS: [u32; 5] = [70, 75, 80, 85, 90];

fn limiter(clock: &ManualClock) -> Limiter<MemoryStore> {
    Limiter::builder(MemoryStore::new())
        .clock(clock.clone())
        .failure_mode(FailureMode::Deny)
        .timeout(Duration::from_secs(5))
        .build()
}

fn policy(trace: &Trace, precision: u32) -> Result<Arc<Policy>, Error> {
    let limit = Limit::new(trace.limit, trace.window_ms, precision)?;
    Ok(Arc::new(Policy::new(format!("p{precision}"), vec![limit])?))
}

/// Each precision's tally on `trace`, judged on its own admitted history
/// (as the tables' main columns are).
pub async fn by_precision(trace: &Trace) -> Result<Vec<(u32, Tally)>, Error> {
    let clock = ManualClock::new(trace.start_ms);
    let limiter = limiter(&clock);
    let policies = PRECISIONS
        .iter()
        .map(|&precision| policy(trace, precision))
        .collect::<Result<Vec<_>, _>>()?;
    let clients = trace.clients();
    let mut judges: Vec<Judge> = PRECISIONS
        .iter()
        .map(|_| Judge::new(trace.window_ms, trace.limit, clients))
        .collect();
    let keys: Vec<String> = (0..clients).map(|client| format!("c{client}")).collect();
    for request in trace.requests() {
        clock.set(request.t_ms);
        let key = &keys[request.client as usize];
        for (policy, judge) in policies.iter().zip(&mut judges) {
            let decision = limiter.check(key, policy, request.cost).await?;
            judge.record(
                request.client,
                request.t_ms,
                request.cost,
                decision.allowed,
                estimate_before(&decision, request.cost),
                decision.allowed,
            );
        }
    }
    Ok(PRECISIONS
        .iter()
        .copied()
        .zip(judges.into_iter().map(|judge| judge.tally))
        .collect())
}

/// One attack mix decided as Cloudflare counts.
pub struct Mix {
    pub ceiling: u32,
    pub tally: Tally,
    pub well_behaved: u32,
    /// Well-behaved clients whose exact count ever exceeded the limit.
    pub went_over: u32,
    /// Clients decided wrongly at least once.
    pub ever_wrong: u32,
    /// Wrong decisions of well-behaved clients.
    pub wrong_well_behaved: u64,
}

/// The attack mix at a tenth of its clients (400 well-behaved, 4
/// attackers) for each of `CEILINGS`, at precision 1, every request counted.
pub async fn by_ceiling(scale: f64) -> Result<Vec<Mix>, Error> {
    let mut mixes = Vec::new();
    for ceiling in CEILINGS {
        let well_behaved = 400;
        let trace = catalogue::attack_mix(well_behaved, 4, f64::from(ceiling) / 100.0, scale);
        let clock = ManualClock::new(trace.start_ms);
        let limiter = limiter(&clock);
        let policy = policy(&trace, 1)?;
        let clients = trace.clients();
        let mut judge = Judge::counting_all(trace.window_ms, trace.limit, clients);
        let mut over = vec![false; clients];
        let mut wrong = vec![false; clients];
        let mut wrong_well_behaved = 0;
        let keys: Vec<String> = (0..clients).map(|client| format!("c{client}")).collect();
        for request in trace.requests() {
            clock.set(request.t_ms);
            let client = request.client as usize;
            let decision = limiter.report(&keys[client], &policy, request.cost).await?;
            let offered = judge.exact(request.client, request.t_ms);
            let fits = offered + request.cost <= trace.limit;
            over[client] |= !fits;
            if decision.allowed != fits {
                wrong[client] = true;
                wrong_well_behaved += u64::from(request.client < well_behaved);
            }
            judge.record(
                request.client,
                request.t_ms,
                request.cost,
                decision.allowed,
                estimate_before(&decision, request.cost),
                fits,
            );
        }
        let count = |flags: &[bool]| flags.iter().filter(|&&flag| flag).count() as u32;
        mixes.push(Mix {
            ceiling,
            tally: judge.tally,
            well_behaved,
            went_over: count(&over[..well_behaved as usize]),
            ever_wrong: count(&wrong),
            wrong_well_behaved,
        });
    }
    Ok(mixes)
}

/// Both studies, in markdown.
pub fn markdown(trace_name: &str, precisions: &[(u32, Tally)], mixes: &[Mix]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Mean error of the estimate by precision, `{trace_name}` (each precision on its own admitted history):\n"
    );
    out.push_str(
        "| precision | keys per check | mean error | max error | precision 1 over this | sqrt(precision) |\n\
         |---|---|---|---|---|---|\n",
    );
    let first = precisions
        .first()
        .map_or(0.0, |(_, tally)| tally.mean_error());
    for (precision, tally) in precisions {
        let _ = writeln!(
            out,
            "| {precision} | {} | {} | {} | {:.1}x | {:.1} |",
            precision + 1,
            percent(100.0 * tally.mean_error()),
            percent(100.0 * tally.error_max),
            first / tally.mean_error(),
            f64::from(*precision).sqrt(),
        );
    }
    let _ = writeln!(
        out,
        "\nThe attack mix by how fast its well-behaved clients send: 400 of them at 5 % to the ceiling, 4 attackers at 10-100x, 25 minutes, precision 1, every request counted (Cloudflare's model):\n"
    );
    out.push_str(
        "| well-behaved ceiling | requests | wrongly admitted | wrongly rejected | wrongly decided | of them, well-behaved clients' | well-behaved clients ever over the limit | clients ever decided wrongly |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for mix in mixes {
        let tally = &mix.tally;
        let wrong = tally.wrongly_admitted + tally.wrongly_rejected;
        let _ = writeln!(
            out,
            "| {} % | {} | {} | {} | {} | {} | {} of {} | {} |",
            mix.ceiling,
            thousands(tally.requests),
            percent(tally.percent(tally.wrongly_admitted)),
            percent(tally.percent(tally.wrongly_rejected)),
            percent(tally.percent(wrong)),
            thousands(mix.wrong_well_behaved),
            mix.went_over,
            mix.well_behaved,
            mix.ever_wrong,
        );
    }
    out
}
