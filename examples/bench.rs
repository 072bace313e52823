//! Throughput of the limiter next to the raw client it runs on, in one run
//! against one memcached, so the ratio holds on a noisy shared machine.
//!
//!     memcached -d -l 127.0.0.1 -p 11211 -U 0 -u root   # or any memcached on loopback
//!     cargo run --release --example bench -- 127.0.0.1:11211 [callers] [checks]
//!
//! Phases (each bounded by the number of checks and by 10 s):
//!   raw        the same mg + ma batch a check sends, straight through the
//!              memcache crate: what the store and client cost alone
//!   admitted   Limiter::check on Memcached, every check admitted
//!   hot reject Limiter::check of keys over their limit (near-cache)
//!   memory     Limiter::check on the in-memory store: our own overhead

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memcache::exp::{Arithmetic, AsyncMetaClient, Get, Op};
use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, MemoryStore, Policy, Store};

const PHASE_LIMIT: Duration = Duration::from_secs(10);
const KEYS: u64 = 10_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let server = args.next().unwrap_or_else(|| "127.0.0.1:11211".to_owned());
    let callers: u64 = args.next().map_or(Ok(32), |n| n.parse())?;
    let checks: u64 = args.next().map_or(Ok(200_000), |n| n.parse())?;
    let host = server.split(':').next().unwrap_or_default();
    if !(host.starts_with("127.") || host == "localhost" || host == "[::1]") {
        return Err("load goes to loopback only: give a 127.x.x.x address".into());
    }
    println!(
        "{checks} checks per phase (at most {PHASE_LIMIT:?}), {callers} concurrent callers, {KEYS} keys, memcached {server}"
    );

    let options = MemcachedOptions {
        servers: vec![server.clone()],
        namespace: format!("bench{}", std::process::id()),
        timeout: Duration::from_secs(1),
        connections: 2,
        ..MemcachedOptions::default()
    };
    let roomy = Arc::new(Policy::new(
        "bench",
        vec![Limit::new(1_000_000_000_000, 60_000, 1)?],
    )?);

    let raw_client = AsyncMetaClient::builder()
        .max_idle(callers as usize)
        .connect_async(server.as_str())
        .await?;
    let raw_check = move |i: u64| {
        let client = raw_client.clone();
        async move {
            let key = i % KEYS;
            let batch = [
                Op::from(Get::new(format!("rawbench:{key}:1"))),
                Op::from(
                    Arithmetic::new(format!("rawbench:{key}:2"))
                        .delta(1)
                        .initial(1, 130),
                ),
            ];
            client
                .run_batch(batch)
                .await
                .is_ok_and(|results| results.iter().all(Result::is_ok))
        }
    };
    let raw_check = Arc::new(raw_check);

    // Raw, limiter, raw again: the two raw runs bracket the limiter's, so
    // drift (memcached warming up, filling) shows instead of hiding in the
    // ratio.
    let raw_before = run("raw mg+ma batch", callers, checks, {
        let raw_check = raw_check.clone();
        move |i| raw_check(i)
    })
    .await;
    let limiter = Arc::new(Limiter::new(MemcachedStore::connect(&options).await?));
    let admitted = run(
        "limiter, admitted",
        callers,
        checks,
        checker(limiter.clone(), roomy.clone(), false),
    )
    .await;
    let raw_after = run("raw mg+ma batch again", callers, checks, move |i| {
        raw_check(i)
    })
    .await;
    let raw = (raw_before + raw_after) / 2.0;

    let tight = Arc::new(Policy::new("tight", vec![Limit::new(1, 60_000, 1)?])?);
    for key in 0..KEYS {
        limiter.check(&format!("hot-{key}"), &tight, 1).await?;
        limiter.check(&format!("hot-{key}"), &tight, 1).await?;
    }
    let calls_before = limiter.metrics().store_calls;
    let hot = run(
        "limiter, hot reject",
        callers,
        checks,
        checker(limiter.clone(), tight, true),
    )
    .await;
    let hot_calls = limiter.metrics().store_calls - calls_before;

    let memory = Arc::new(Limiter::new(MemoryStore::new()));
    let in_memory = run(
        "limiter on memory",
        callers,
        checks,
        checker(memory, roomy, false),
    )
    .await;

    println!();
    println!("admitted on memcached / raw client : {:.2}", admitted / raw);
    println!("hot reject / raw client            : {:.1}", hot / raw);
    println!("store round trips during hot rejects: {hot_calls}");
    println!(
        "limiter on memory / raw client     : {:.1}",
        in_memory / raw
    );
    Ok(())
}

/// A check of `key-{i % KEYS}` that reports whether it went as expected.
fn checker<S: Store>(
    limiter: Arc<Limiter<S>>,
    policy: Arc<Policy>,
    hot: bool,
) -> impl Fn(u64) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync + 'static {
    move |i| {
        let (limiter, policy) = (limiter.clone(), policy.clone());
        Box::pin(async move {
            let key = if hot {
                format!("hot-{}", i % KEYS)
            } else {
                format!("key-{}", i % KEYS)
            };
            match limiter.check(&key, &policy, 1).await {
                Ok(decision) => decision.allowed != hot,
                Err(_) => false,
            }
        })
    }
}

/// Run `total` calls of `call` over `callers` tasks; print and return calls/s.
async fn run<F, Fut>(name: &str, callers: u64, total: u64, call: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let call = Arc::new(call);
    let cpu_before = cpu_time();
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (call, next, failures) = (call.clone(), next.clone(), failures.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total || started.elapsed() > PHASE_LIMIT {
                        break;
                    }
                    if !call(i).await {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let elapsed = started.elapsed();
    let done = next.load(Ordering::Relaxed).min(total);
    let rate = done as f64 / elapsed.as_secs_f64();
    let cpu_per_check = (cpu_time() - cpu_before).as_secs_f64() * 1e6 / done.max(1) as f64;
    println!(
        "{name:<22} {rate:>10.0} checks/s  {cpu_per_check:>5.1} us CPU/check in this process  ({done} in {:.2} s, {} unexpected)",
        elapsed.as_secs_f64(),
        failures.load(Ordering::Relaxed)
    );
    rate
}

/// User plus system CPU time of this process so far. On a machine whose
/// cores memcached shares, CPU spent here is CPU memcached does not get.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}
