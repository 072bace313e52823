//! How far slidegate's sliding-window estimate is from the exact answer,
//! and what it gains over a fixed window: every request of seeded traces
//! goes through the real `Limiter` (a manual clock, precisions 1, 4, 10),
//! a fixed window aligned on the epoch, and an exact sliding log, and every
//! decision is judged. Then two studies (`studies.rs`): the error by
//! precision from 1 to 100, and the attack mix by how close its
//! well-behaved clients come to the limit; they run only with every trace,
//! on the in-memory store. docs/src/design/accuracy.md explains the figures.
//!
//!     cargo run --release --example accuracy                   # every trace, in-memory store
//!     cargo run --release --example accuracy -- --docs         # and rewrite docs/src/design/accuracy.md and its plot
//!     cargo run --release --example accuracy -- --trace steady-110 --scale 0.1
//!     cargo run --release --example accuracy -- --memcached 127.0.0.1:11211 --scale 0.02
//!
//! `--scale` multiplies every trace's duration (1 = the published traces,
//! about 22 million requests in all, 11.3 million in `attack`).

mod catalogue;
mod judge;
mod plot;
mod replay;
mod report;
mod studies;
mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use slidegate::{MemcachedOptions, MemcachedStore, MemoryStore};

use replay::{Outcome, Sample, Watch};

use trace::Trace;

/// The plot follows this trace's first client over its first 10 minutes.
const PLOTTED_TRACE: &str = "steady-110";
const PLOTTED_MS: u64 = 10 * 60_000;
/// The steady trace (percent of the limit) of the precision study.
const STUDIED_STEADY: u64 = 100;

struct Args {
    scale: f64,
    traces: Vec<String>,
    memcached: Option<String>,
    docs: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        scale: 1.0,
        traces: Vec::new(),
        memcached: None,
        docs: false,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--scale" => {
                args.scale = value()?
                    .parse()
                    .map_err(|error| format!("--scale: {error}"))?;
                if !(args.scale > 0.0 && args.scale <= 10.0) {
                    return Err("--scale: give a number in (0, 10]".to_owned());
                }
            }
            "--trace" => args.traces.push(value()?),
            "--memcached" => args.memcached = Some(value()?),
            "--docs" => args.docs = true,
            other => {
                return Err(format!(
                    "unknown argument {other} (see the top of examples/accuracy/main.rs)"
                ));
            }
        }
    }
    if args.docs && (args.scale != 1.0 || !args.traces.is_empty() || args.memcached.is_some()) {
        return Err(
            "--docs publishes the full traces on the in-memory store: give it alone".to_owned(),
        );
    }
    Ok(args)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let traces: Vec<Trace> = catalogue::all(args.scale)
        .into_iter()
        .filter(|trace| args.traces.is_empty() || args.traces.contains(&trace.name))
        .collect();
    if traces.is_empty() {
        return Err("no trace by that name: steady-50, steady-90, steady-100, steady-110, steady-200, bursty, straddle, attack".into());
    }
    if let Some(server) = &args.memcached {
        let host = server.split(':').next().unwrap_or_default();
        if !(host.starts_with("127.") || host == "localhost") {
            return Err("replays go to loopback only: give a 127.x.x.x address".into());
        }
        println!("store: memcached {server}");
    } else {
        println!("store: in-memory");
    }
    let mut outcomes = Vec::new();
    let mut samples = Vec::new();
    for (index, trace) in traces.iter().enumerate() {
        let watch = (trace.name == PLOTTED_TRACE).then_some(Watch {
            client: 0,
            until_ms: PLOTTED_MS,
        });
        let (outcome, watched) = match &args.memcached {
            // Every trace starts at the same instant with the same keys:
            // a namespace per trace keeps their counters apart.
            Some(server) => {
                let store = MemcachedStore::connect(&MemcachedOptions {
                    servers: vec![server.clone()],
                    namespace: format!("accuracy{}-{index}", std::process::id()),
                    timeout: Duration::from_secs(5),
                    ..MemcachedOptions::default()
                })
                .await?;
                replay::replay(trace, Arc::new(store), watch).await?
            }
            None => replay::replay(trace, Arc::new(MemoryStore::new()), watch).await?,
        };
        print!("{}", report::terminal(&outcome));
        if watch.is_some() {
            samples = watched;
        }
        outcomes.push(outcome);
    }
    let summary = report::summary(&outcomes);
    println!("\n{summary}");
    // The studies run with the full set of traces, on the in-memory store.
    let studies = if args.traces.is_empty() && args.memcached.is_none() {
        let steady = catalogue::steady(STUDIED_STEADY, args.scale);
        let precisions = studies::by_precision(&steady).await?;
        let mixes = studies::by_ceiling(args.scale).await?;
        let studies = studies::markdown(&steady.name, &precisions, &mixes);
        println!("\n{studies}");
        Some(studies)
    } else {
        None
    };
    if args.docs {
        write_docs(&outcomes, &samples, &summary, studies.as_deref())?;
    }
    Ok(())
}

fn write_docs(
    outcomes: &[Outcome],
    samples: &[Sample],
    summary: &str,
    studies: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/design");
    let page: PathBuf = docs.join("accuracy.md");
    let mut document =
        std::fs::read_to_string(&page).map_err(|error| format!("{}: {error}", page.display()))?;
    let tables: String = outcomes.iter().map(report::table).collect();
    document = report::splice(&document, "summary", summary)?;
    document = report::splice(&document, "tables", &tables)?;
    if let Some(studies) = studies {
        document = report::splice(&document, "studies", studies)?;
    }
    std::fs::write(&page, document)?;
    let svg = docs.join("accuracy-steady-110.svg");
    plot::draw(
        &svg,
        samples,
        catalogue::LIMIT,
        "One client at 110 % of its limit (120 per minute): the window as each decider sees it",
    )?;
    println!("wrote {} and {}", page.display(), svg.display());
    Ok(())
}
