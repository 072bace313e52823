//! slidegate beside its ceilings, in one run against one memcached, so the
//! ratios hold on a noisy shared machine. `bench/run.sh` builds what it
//! needs, starts a memcached on loopback and runs this; docs/src/performance.md
//! explains the table it prints.
//!
//!     bench/run.sh                                   # everything
//!     cargo run --release --example bench -- --memcached 127.0.0.1:11211 \
//!         [--slidegate target/release/slidegate] [--checks N] [--seconds S] \
//!         [--memory-keys N] [--connections N] [--library-only] [--no-coalesce] \
//!         [--memcached-pid PID]
//!
//! With `--memcached-pid` (bench/run.sh gives it) the table has memcached's
//! CPU per check too: on two shared cores a ratio is made of both sides.
//!
//! Every phase is bounded by a number of checks and by time, and every
//! address must be on loopback.

mod args;
mod http;
mod library;
mod measure;
mod raw;
mod rls;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use args::{Args, parse_args};
use library::{limiter_phase, memcache_crate};
use measure::{Around, Row, histogram};
use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, Policy};

const KEYS: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some("--echo-server") {
        let addr = argv.next().ok_or("--echo-server needs an address")?;
        let runtime = tokio::runtime::Runtime::new()?;
        runtime.block_on(http::serve_echo(&addr));
        return Ok(());
    }
    let args = parse_args()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(args))
}

/// A row and what it is compared with: (ceiling name, ratio).
type Entry = (Row, Option<(&'static str, f64)>);

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let limit = Duration::from_secs(args.seconds);
    let mc = args.memcached.as_str();
    let me = std::process::id();
    println!(
        "# slidegate benchmark: memcached {mc}, {} checks or {}s per phase, {} cores\n",
        args.checks,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut table: Vec<Entry> = Vec::new();
    if args.memory_only {
        table.push((memory_phase(&args, mc, me).await, None));
        println!("{}", measure::table(&table));
        return Ok(());
    }

    // The ceilings.
    let one_per_rt = measured(mc, me, raw::one_per_round_trip(mc, 16, args.checks, limit)).await;
    let pipelined = measured(mc, me, raw::pipelined(mc, 2, 64, args.checks, limit)).await;
    let one_per_rt_rate = one_per_rt.rate();
    let (pipelined_rate, pipelined_p99) = (pipelined.rate(), pipelined.p99);

    // The client slidegate 0.1 used, doing the same two commands.
    let crate_rows = [1usize, 16];
    let mut crate_rates = Vec::new();
    for callers in crate_rows {
        let row = measured(mc, me, memcache_crate(mc, callers, args.checks, limit)).await;
        crate_rates.push(row.rate());
        table.push((row, None));
    }

    // Library mode: Limiter::check on the multiplexed store.
    let options = MemcachedOptions {
        servers: vec![args.memcached.clone()],
        namespace: format!("bench{me}"),
        timeout: Duration::from_secs(1),
        connections: args.connections,
        ..MemcachedOptions::default()
    };
    let limiter = Arc::new(
        Limiter::builder(MemcachedStore::connect(&options).await?)
            .coalesce(!args.no_coalesce)
            .build(),
    );
    let roomy = Arc::new(Policy::new(
        "bench",
        vec![Limit::new(1_000_000_000_000, 60_000, 1)?],
    )?);
    let mut library = Vec::new();
    for &callers in &args.callers {
        let row = measured(
            mc,
            me,
            limiter_phase(
                limiter.clone(),
                roomy.clone(),
                callers,
                args.checks,
                limit,
                KEYS,
            ),
        )
        .await;
        library.push(row);
    }
    // One key every caller checks, admitted: what coalescing is for.
    let hot_library = measured(
        mc,
        me,
        limiter_phase(limiter.clone(), roomy.clone(), 256, args.checks, limit, 1),
    )
    .await;
    let hot_library_ratio = hot_library.rate() / pipelined_rate;
    let hot_library_commands = hot_library.commands_per_call;
    let library_p99_256 = args
        .callers
        .iter()
        .position(|&callers| callers == 256)
        .map_or(f64::NAN, |at| library[at].p99);
    for (row, &callers) in library.into_iter().zip(&args.callers) {
        let ratio = match callers {
            1 => ("memcache crate, 1 caller", row.rate() / crate_rates[0]),
            16 => ("1/RT ceiling", row.rate() / one_per_rt_rate),
            _ => ("pipelined ceiling", row.rate() / pipelined_rate),
        };
        table.push((row, Some(ratio)));
    }
    table.push((hot_library, Some(("pipelined ceiling", hot_library_ratio))));
    table.insert(0, (one_per_rt, None));
    table.insert(1, (pipelined, None));
    if args.library_only {
        println!("{}", measure::table(&table));
        return Ok(());
    }

    // HTTP: the ceiling, then slidegate.
    let echo = http::start_echo();
    let echo_row = http_phase(
        mc,
        &echo,
        &http::Load {
            name: "HTTP ceiling: hyper, parse body, answer",
            policy: "roomy",
            keys: KEYS,
            repeat: 1,
            requests_per_thread: 0,
            connections: 64,
            seconds: args.seconds as u32,
            expect_ok: true,
        },
    );
    drop(echo);
    let echo_rate = echo_row.rate();

    let server = http::start_slidegate(&args.slidegate, mc, &format!("benchhttp{me}"));
    let admitted = http_phase(
        mc,
        &server,
        &http::Load {
            name: "HTTP POST /v1/check, admitted",
            policy: "roomy",
            keys: KEYS,
            repeat: 1,
            requests_per_thread: 0,
            connections: 64,
            seconds: args.seconds as u32,
            expect_ok: true,
        },
    );
    let hot_admitted = http_phase(
        mc,
        &server,
        &http::Load {
            name: "HTTP POST /v1/check, one hot admitted key",
            policy: "roomy",
            keys: 1,
            repeat: 1,
            requests_per_thread: 0,
            connections: 64,
            seconds: args.seconds as u32,
            expect_ok: true,
        },
    );
    let hot = http::Load {
        name: "HTTP POST /v1/check, hot rejects",
        policy: "tight",
        keys: 1_000,
        repeat: 1,
        requests_per_thread: 0,
        connections: 64,
        seconds: 1,
        expect_ok: false,
    };
    // One pass fills the near-cache; the measured run is all hot rejects.
    http_phase(mc, &server, &hot);
    let hot = http_phase(
        mc,
        &server,
        &http::Load {
            seconds: args.seconds as u32,
            ..hot
        },
    );
    // Envoy's protocol on the same server, 64 callers like wrk's 64
    // connections; its client runs in this process, so the CPU column is
    // the server's.
    let around = Around::start(mc, server.pid());
    let mut rls = rls::should_rate_limit(&server, 64, args.checks, limit).await;
    around.finish(&mut rls);
    drop(server);

    let python = http::python_limits(mc, (args.checks / 10).max(1000));
    let python_rate = python.as_ref().map(Row::rate);
    let admitted_rate = admitted.rate();
    let python_ratio = python_rate.map(|rate| admitted_rate / rate);
    let hot_ratio = hot.rate() / echo_rate;
    table.push((echo_row, None));
    table.push((admitted, Some(("HTTP ceiling", admitted_rate / echo_rate))));
    table.push((hot, Some(("HTTP ceiling", hot_ratio))));
    let hot_admitted_ratio = hot_admitted.rate() / echo_rate;
    let hot_admitted_commands = hot_admitted.commands_per_call;
    table.push((hot_admitted, Some(("HTTP ceiling", hot_admitted_ratio))));
    let rls_ratio = rls.rate() / admitted_rate;
    table.push((rls, Some(("HTTP /v1/check admitted", rls_ratio))));
    if let Some(python) = python {
        table.push((python, None));
    } else {
        eprintln!("python limits skipped: see above");
    }

    let memory = memory_phase(&args, mc, me).await;
    let memory_rss = memory.peak_rss_kib;
    let distinct = args.memory_keys;
    table.push((memory, None));

    println!("{}", measure::table(&table));
    println!("Targets (ratios from this run):");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let r16 = table
        .iter()
        .find(|(row, _)| row.name.starts_with("Limiter::check") && row.concurrency == "16 callers")
        .map_or(0.0, |(row, _)| row.rate() / one_per_rt_rate);
    let r256 = table
        .iter()
        .find(|(row, _)| row.name.starts_with("Limiter::check") && row.concurrency == "256 callers")
        .map_or(0.0, |(row, _)| row.rate() / pipelined_rate);
    let r1 = table
        .iter()
        .find(|(row, _)| row.name.starts_with("Limiter::check") && row.concurrency == "1 caller")
        .map_or(0.0, |(row, _)| row.rate() / crate_rates[0]);
    println!(
        "- library, 16 callers >= 0.9x the 1/RT ceiling: {r16:.2}x, {}",
        verdict(r16 >= 0.9)
    );
    println!(
        "- library, 256 callers >= 0.8x the pipelined ceiling: {r256:.2}x, {}",
        verdict(r256 >= 0.8)
    );
    println!(
        "- library, 256 callers p99 <= 2x the pipelined p99: {:.0} vs {:.0} us, {}",
        library_p99_256,
        pipelined_p99,
        verdict(library_p99_256 <= 2.0 * pipelined_p99)
    );
    println!(
        "- library, 1 caller no slower than the 0.1 client: {r1:.2}x, {}",
        verdict(r1 >= 1.0)
    );
    let rh = admitted_rate / echo_rate;
    println!(
        "- HTTP admitted >= 0.7x the HTTP ceiling: {rh:.2}x, {}",
        verdict(rh >= 0.7)
    );
    if let Some(ratio) = python_ratio {
        println!(
            "- HTTP admitted >= 15x python limits: {ratio:.1}x, {}",
            verdict(ratio >= 15.0)
        );
    }
    println!(
        "- hot rejects >= 0.9x the HTTP ceiling: {hot_ratio:.2}x, {}",
        verdict(hot_ratio >= 0.9)
    );
    let commands = |per_call: Option<f64>| per_call.unwrap_or(f64::NAN);
    println!(
        "- HTTP, one hot admitted key >= 0.85x the HTTP ceiling at <= 0.3 commands/check: \
         {hot_admitted_ratio:.2}x at {:.2}, {}",
        commands(hot_admitted_commands),
        verdict(hot_admitted_ratio >= 0.85 && commands(hot_admitted_commands) <= 0.3)
    );
    println!(
        "- library, 256 callers, one hot admitted key >= 1.5x the pipelined ceiling at <= 0.25 \
         commands/check: {hot_library_ratio:.2}x at {:.2}, {}",
        commands(hot_library_commands),
        verdict(hot_library_ratio >= 1.5 && commands(hot_library_commands) <= 0.25)
    );
    if let Some(kib) = memory_rss {
        let mib = kib as f64 / 1024.0;
        println!(
            "- {distinct} distinct keys through HTTP, peak RSS < 64 MiB: {mib:.1} MiB, {}",
            verdict(mib < 64.0)
        );
    }
    Ok(())
}

/// Memory: distinct keys through HTTP, each checked twice against a limit
/// of 1, so every key leaves a near-cache entry (100k capacity).
async fn memory_phase(args: &Args, mc: &str, me: u32) -> Row {
    let server = http::start_slidegate(&args.slidegate, mc, &format!("benchmem{me}"));
    let around = Around::start(mc, server.pid());
    let mut memory = http::distinct_keys(
        &server,
        "HTTP, distinct keys x2 (memory)",
        "tight",
        args.memory_keys,
        2,
        64,
    )
    .await;
    around.finish(&mut memory);
    memory
}

/// Run a phase in this process, with memcached's command count and this
/// process's peak RSS around it.
async fn measured(mc: &str, pid: u32, phase: impl Future<Output = Row>) -> Row {
    let around = Around::start(mc, pid);
    let mut row = phase.await;
    around.finish(&mut row);
    row
}

/// A wrk run against a server process, with memcached's command count and
/// the server's peak RSS around it.
fn http_phase(mc: &str, server: &http::Server, load: &http::Load) -> Row {
    let around = Around::start(mc, server.pid());
    let mut row = http::wrk(server, load);
    around.finish(&mut row);
    row
}

async fn run_callers<F, Fut>(callers: usize, total: u64, limit: Duration, call: F) -> Row
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            tokio::spawn(async move {
                let mut latencies = histogram();
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= total || started.elapsed() > limit {
                        return latencies;
                    }
                    let began = Instant::now();
                    call(index).await;
                    let _ = latencies.record(began.elapsed().as_nanos() as u64);
                }
            })
        })
        .collect();
    let mut all = histogram();
    for task in tasks {
        all.add(task.await.expect("caller task"))
            .expect("same bounds");
    }
    Row::from_histogram("", "", &all, started.elapsed())
}
