//! A fixed number of checks, for counting the instructions a check costs
//! under `valgrind --tool=callgrind` (bench/instructions.sh). Instruction
//! counts do not move with the machine's load, so two builds compare on a
//! shared, noisy machine where checks per second cannot tell 10% apart.
//!
//!     instructions --memcached 127.0.0.1:11211 --checks 20000 --callers 64 [--hot] [--keys N] [--no-coalesce]
//!
//! Every check has a key of its own unless `--keys N` cycles through N
//! (the benchmark's 10,000), or `--hot` gives all one.
//!
//! Prints the checks made; the script divides callgrind's total by them
//! (after subtracting a run with no checks, the set-up's cost).

use std::sync::Arc;

use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, Policy, Source};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut memcached = String::from("127.0.0.1:11211");
    let (mut checks, mut callers, mut keys) = (20_000u64, 64u64, u64::MAX);
    let mut coalesce = true;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--memcached" => memcached = value()?,
            "--checks" => checks = value()?.parse()?,
            "--callers" => callers = value()?.parse()?,
            "--hot" => keys = 1,
            "--keys" => keys = value()?.parse()?,
            "--no-coalesce" => coalesce = false,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let options = MemcachedOptions {
        servers: vec![memcached],
        namespace: format!("instr{}", std::process::id()),
        // Generous: callgrind runs the process some 50 times slower.
        timeout: std::time::Duration::from_secs(5),
        ..MemcachedOptions::default()
    };
    let store = MemcachedStore::connect(&options).await?;
    let limiter = Arc::new(
        Limiter::builder(store)
            .timeout(std::time::Duration::from_secs(5))
            .coalesce(coalesce)
            .build(),
    );
    // Connected before counting: a check the failure mode decided would
    // measure nothing of the store path.
    let connected = std::time::Instant::now();
    while limiter.ready().await.is_err() {
        if connected.elapsed() > std::time::Duration::from_secs(10) {
            return Err("memcached did not answer within 10 s".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let policy = Arc::new(Policy::new(
        "instr",
        vec![Limit::new(1_000_000_000_000, 60_000, 1)?],
    )?);
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            tokio::spawn(async move {
                let mut made = 0u64;
                for index in (caller..checks).step_by(callers as usize) {
                    let key = index % keys;
                    let decision = limiter.check(&format!("k{key}"), &policy, 1).await;
                    assert!(
                        decision.is_ok_and(
                            |decision| decision.allowed && decision.source == Source::Store
                        ),
                        "every check is admitted by the store"
                    );
                    made += 1;
                }
                made
            })
        })
        .collect();
    let mut made = 0;
    for task in tasks {
        made += task.await?;
    }
    println!("{made}");
    Ok(())
}
