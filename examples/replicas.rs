//! What `memcached.replicas = 2` costs against 1, measured in one run
//! against the same three memcached nodes, so the ratios hold on a noisy
//! shared machine. `bench/replicas.sh` starts the nodes and runs this; the
//! chapter "When a node goes away" quotes what it prints.
//!
//!     bench/replicas.sh [--seconds S] [--tasks N] [--rounds R]
//!     cargo run --release --example replicas -- --memcached A,B,C \
//!         [--seconds S] [--tasks N] [--rounds R]
//!
//! Phases, each for 1 replica and for 2, alternated over `--rounds`:
//! - commands: admitted checks of distinct keys, one at a time; memcached
//!   commands per check from the nodes' `stats` (reads and arithmetic);
//! - latency: the median of those checks' times; and the same through a
//!   proxy in front of each node that holds everything it forwards for
//!   `DELAY` each way, so that the network's time, not the machine's,
//!   makes the check's: the replicas are asked together, so a check takes
//!   one delayed round trip (2 x `DELAY`) with 2 replicas as with 1, where
//!   one after the other would take two;
//! - throughput: `--tasks` concurrent checks over 10,000 keys for
//!   `--seconds`;
//! - hot key: every task on one key under a limit it never reaches
//!   (coalescing);
//! - hot rejects: every task on one key over its limit (the near-cache).
//!
//! Every phase is bounded by checks and by time; every address must be on
//! loopback.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, Policy};

const SEQUENTIAL_CHECKS: u64 = 2_000;
/// What each proxy holds a forwarded chunk for, each way.
const DELAY: Duration = Duration::from_millis(2);
/// Checks one at a time through the delaying proxies.
const DELAYED_CHECKS: u64 = 100;
const KEYS: u64 = 10_000;
/// The most checks one timed phase may make, whatever its time.
const MAX_CHECKS: u64 = 5_000_000;

struct Args {
    nodes: Vec<String>,
    seconds: f64,
    tasks: usize,
    rounds: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        nodes: Vec::new(),
        seconds: 2.0,
        tasks: 64,
        rounds: 2,
    };
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--memcached" => args.nodes = value()?.split(',').map(str::to_owned).collect(),
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--tasks" => args.tasks = value()?.parse().map_err(|e| format!("{e}"))?,
            "--rounds" => args.rounds = value()?.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.nodes.len() < 2 {
        return Err("--memcached needs at least two nodes (host:port,host:port,...)".to_owned());
    }
    if let Some(far) = args.nodes.iter().find(|node| !node.starts_with("127.")) {
        return Err(format!("{far} is not on loopback"));
    }
    Ok(args)
}

/// What one phase measured for one number of replicas.
#[derive(Clone, Copy, Default)]
struct Measured {
    checks: u64,
    admitted: u64,
    commands: u64,
    seconds: f64,
    median_us: f64,
}

impl Measured {
    fn per_check(&self) -> f64 {
        self.commands as f64 / self.checks.max(1) as f64
    }

    fn per_second(&self) -> f64 {
        self.checks as f64 / self.seconds.max(1e-9)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    // [phase][replicas - 1], summed over rounds.
    let mut sums = [[Measured::default(); 2]; 4];
    let mut medians: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut delayed: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut proxies = Vec::new();
    for node in &args.nodes {
        proxies.push(delaying_proxy(node.clone()).await?);
    }
    for round in 0..args.rounds {
        // Alternate which goes first, so neither always meets a warmer
        // or a busier machine.
        let order: [usize; 2] = if round % 2 == 0 { [1, 2] } else { [2, 1] };
        for replicas in order {
            let at = replicas - 1;
            let sequential = sequential(&args, replicas).await?;
            medians[at].push(sequential.median_us);
            delayed[at].push(through_delay(&proxies, replicas).await?);
            add(&mut sums[0][at], sequential);
            add(
                &mut sums[1][at],
                timed(&args, replicas, Load::Spread).await?,
            );
            add(
                &mut sums[2][at],
                timed(&args, replicas, Load::HotKey).await?,
            );
            add(
                &mut sums[3][at],
                timed(&args, replicas, Load::HotRejects).await?,
            );
        }
    }
    let middle = |values: &[f64]| {
        let mut values = values.to_vec();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    let median = |at: usize| {
        let mut values = medians[at].clone();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    println!(
        "# replicas 2 against 1: {} nodes, {} tasks, {} s a phase, {} rounds",
        args.nodes.len(),
        args.tasks,
        args.seconds,
        args.rounds
    );
    println!("| phase | replicas = 1 | replicas = 2 | 2 / 1 |");
    println!("|---|---|---|---|");
    let [one, two] = sums[0];
    println!(
        "| memcached commands per admitted check (distinct keys, one at a time) | {:.2} | {:.2} | {:.2} |",
        one.per_check(),
        two.per_check(),
        two.per_check() / one.per_check()
    );
    println!(
        "| median check latency, one at a time (us) | {:.0} | {:.0} | {:.2} |",
        median(0),
        median(1),
        median(1) / median(0)
    );
    println!(
        "| median check latency through a {} ms delay each way (ms) | {:.2} | {:.2} | {:.2} |",
        DELAY.as_millis(),
        middle(&delayed[0]) / 1e3,
        middle(&delayed[1]) / 1e3,
        middle(&delayed[1]) / middle(&delayed[0])
    );
    let names = [
        "throughput, 10,000 keys (checks/s)",
        "hot key, coalesced (checks/s)",
        "hot rejects, near-cache (checks/s)",
    ];
    for (phase, name) in names.iter().enumerate() {
        let [one, two] = sums[phase + 1];
        println!(
            "| {name} | {:.0} | {:.0} | {:.2} |",
            one.per_second(),
            two.per_second(),
            two.per_second() / one.per_second()
        );
        // Per 1,000 checks, and in all: a near-cache's revalidation is a
        // few reads a second whatever the checks, so per check it is tiny
        // and follows the throughput.
        println!(
            "| ... memcached commands per 1,000 checks (in all) | {:.3} ({}) | {:.3} ({}) | {:.2} |",
            1_000.0 * one.per_check(),
            one.commands,
            1_000.0 * two.per_check(),
            two.commands,
            two.per_check() / one.per_check().max(1e-12)
        );
    }
    let [one, two] = sums[3];
    println!(
        "| hot rejects: admitted of checked | {} of {} | {} of {} | |",
        one.admitted, one.checks, two.admitted, two.checks
    );
    Ok(())
}

fn add(sum: &mut Measured, one: Measured) {
    sum.checks += one.checks;
    sum.admitted += one.admitted;
    sum.commands += one.commands;
    sum.seconds += one.seconds;
}

async fn limiter(args: &Args, replicas: usize) -> Result<Limiter<MemcachedStore>, String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let options = MemcachedOptions {
        servers: args.nodes.clone(),
        replicas,
        namespace: format!(
            "bench{}r{replicas}n{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
        ..MemcachedOptions::default()
    };
    let store = MemcachedStore::connect(&options)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Limiter::builder(store).build())
}

/// Admitted checks of distinct keys, one at a time.
async fn sequential(args: &Args, replicas: usize) -> Result<Measured, Box<dyn std::error::Error>> {
    let limiter = limiter(args, replicas).await?;
    let policy = Policy::new("seq", vec![Limit::new(1_000, 60_000, 1)?])?;
    // Connections up before the count starts.
    limiter.check("warm", &policy, 1).await?;
    let before = commands(&args.nodes)?;
    let began = Instant::now();
    let mut times = Vec::with_capacity(SEQUENTIAL_CHECKS as usize);
    let mut admitted = 0;
    for key in 0..SEQUENTIAL_CHECKS {
        let start = Instant::now();
        admitted += u64::from(limiter.check(&format!("k{key}"), &policy, 1).await?.allowed);
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    let seconds = began.elapsed().as_secs_f64();
    times.sort_by(f64::total_cmp);
    Ok(Measured {
        checks: SEQUENTIAL_CHECKS,
        admitted,
        commands: commands(&args.nodes)? - before,
        seconds,
        median_us: times[times.len() / 2],
    })
}

#[derive(Clone, Copy)]
enum Load {
    Spread,
    HotKey,
    HotRejects,
}

/// The median time, in microseconds, of checks one at a time through the
/// delaying proxies.
async fn through_delay(
    proxies: &[String],
    replicas: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let args = Args {
        nodes: proxies.to_vec(),
        seconds: 0.0,
        tasks: 1,
        rounds: 1,
    };
    let limiter = limiter(&args, replicas).await?;
    let policy = Policy::new("delayed", vec![Limit::new(1_000, 60_000, 1)?])?;
    limiter.check("warm", &policy, 1).await?;
    let mut times = Vec::new();
    for key in 0..DELAYED_CHECKS {
        let start = Instant::now();
        limiter.check(&format!("d{key}"), &policy, 1).await?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// A loopback proxy to `upstream` that holds each chunk it forwards for
/// [`DELAY`], each way; its address.
async fn delaying_proxy(upstream: String) -> Result<String, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(delay_copy(client_read, server_write));
            tokio::spawn(delay_copy(server_read, client_write));
        }
    });
    Ok(addr)
}

/// Copy `from` to `to`, each chunk held for [`DELAY`].
async fn delay_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let Ok(read) = from.read(&mut buffer).await else {
            return;
        };
        if read == 0 {
            return;
        }
        tokio::time::sleep(DELAY).await;
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// `--tasks` tasks checking for `--seconds`.
async fn timed(
    args: &Args,
    replicas: usize,
    load: Load,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let limiter = Arc::new(limiter(args, replicas).await?);
    let limit = match load {
        Load::HotRejects => 10,
        _ => 1_000_000_000,
    };
    let policy = Arc::new(Policy::new("timed", vec![Limit::new(limit, 60_000, 1)?])?);
    limiter.check("warm", &policy, 1).await?;
    if let Load::HotRejects = load {
        for _ in 0..=limit {
            limiter.check("hot", &policy, 1).await?;
        }
    }
    let before = commands(&args.nodes)?;
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let began = Instant::now();
    let tasks: Vec<_> = (0..args.tasks)
        .map(|task| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            let (stop, checks, admitted) = (stop.clone(), checks.clone(), admitted.clone());
            tokio::spawn(async move {
                let mut next = task as u64;
                while !stop.load(Ordering::Relaxed)
                    && checks.fetch_add(1, Ordering::Relaxed) < MAX_CHECKS
                {
                    let key = match load {
                        Load::Spread => format!("k{}", next % KEYS),
                        Load::HotKey | Load::HotRejects => "hot".to_owned(),
                    };
                    next = next.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    if let Ok(decision) = limiter.check(&key, &policy, 1).await {
                        admitted.fetch_add(u64::from(decision.allowed), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // Until the time is up or the checks' bound is reached, whichever
    // comes first: the rate is of the time the checks took.
    let phase = Duration::from_secs_f64(args.seconds);
    while began.elapsed() < phase && checks.load(Ordering::Relaxed) < MAX_CHECKS {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    let seconds = began.elapsed().as_secs_f64();
    Ok(Measured {
        checks: checks.load(Ordering::Relaxed).min(MAX_CHECKS),
        admitted: admitted.load(Ordering::Relaxed),
        commands: commands(&args.nodes)? - before,
        seconds,
        median_us: 0.0,
    })
}

/// Commands that touched items on every node (reads and arithmetic), from
/// memcached's `stats`. An `ma` that creates its counter (auto-vivify)
/// counts in none of the command counters, only in `total_items`.
fn commands(nodes: &[String]) -> Result<u64, Box<dyn std::error::Error>> {
    let mut total = 0;
    for node in nodes {
        let mut stream = TcpStream::connect(node)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"stats\r\n")?;
        let mut reader = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line.starts_with("END") {
                break;
            }
            let mut fields = line.trim_end().split(' ');
            let (Some("STAT"), Some(name), Some(value)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if [
                "cmd_get",
                "cmd_set",
                "incr_hits",
                "incr_misses",
                "decr_hits",
                "decr_misses",
                "cmd_touch",
                "total_items",
            ]
            .contains(&name)
            {
                total += value.parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}
