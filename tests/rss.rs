//! The process's resident memory under a flood of refused keys, in a test
//! binary of its own: it measures the whole process, so no other test may
//! run beside it (in `bounds.rs`, another test's embedded store, its table
//! pages touched by a 16,016-counter peek, was counted as this one's when
//! the two overlapped).

use std::sync::Arc;

/// The process's resident memory, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("resident pages");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// 100,000 distinct keys, each refused by the store once with the largest
/// policy allowed (128 counters: one limit at precision 127), so each is
/// remembered by the near-cache: the near-cache is bounded in bytes, and
/// the process stays under 128 MiB. Meanwhile a check on another key is
/// still decided by the store within the call timeout.
/// (`SLIDEGATE_BOUNDS_KEYS=N` changes the number of keys.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_keys_of_the_largest_policy_keep_rss_bounded() {
    use slidegate::{Limit, Limiter, MemoryStore, Policy, Source};

    let keys: usize = std::env::var("SLIDEGATE_BOUNDS_KEYS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(100_000);
    let limiter = Arc::new(
        Limiter::builder(MemoryStore::new())
            .timeout(std::time::Duration::from_secs(2))
            .build(),
    );
    let largest = Policy::inline(vec![Limit::new(1, 127_000, 127).unwrap()]).unwrap();
    assert_eq!(largest.counters(), 128);
    let before = rss_bytes();

    let flood = |part: usize| {
        let (limiter, policy) = (limiter.clone(), largest.clone());
        tokio::spawn(async move {
            for index in (part..keys).step_by(2) {
                let key = format!("flood-{index}");
                assert!(limiter.check(&key, &policy, 1).await.unwrap().allowed);
                let refused = limiter.check(&key, &policy, 1).await.unwrap();
                assert_eq!((refused.allowed, refused.source), (false, Source::Store));
                // Let the prober in, as a server's other connections would be.
                if index % 64 < 2 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    let floods = [flood(0), flood(1)];
    let other = Policy::inline(vec![Limit::new(1_000_000, 60_000, 1).unwrap()]).unwrap();
    let mut probes = 0;
    let mut slowest = std::time::Duration::ZERO;
    while floods.iter().any(|flood| !flood.is_finished()) {
        let started = std::time::Instant::now();
        let decision = limiter.check("another-key", &other, 1).await.unwrap();
        slowest = slowest.max(started.elapsed());
        assert_eq!(
            decision.source,
            Source::Store,
            "decided within the call timeout"
        );
        probes += 1;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for flood in floods {
        flood.await.unwrap();
    }
    let after = rss_bytes();
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "{keys} refused keys of 128 counters: RSS {:.1} MiB (before {:.1} MiB), near-cache {} entries, {:.1} MiB by weight; {probes} checks of another key meanwhile, slowest {slowest:?}",
        mib(after),
        mib(before),
        limiter.near_cache_len(),
        mib(limiter.near_cache_bytes()),
    );
    assert!(
        limiter.near_cache_bytes() <= slidegate::near_cache::DEFAULT_MAX_BYTES,
        "near-cache within near_cache.max_bytes"
    );
    assert!(after < 128 * 1024 * 1024, "RSS {:.1} MiB", mib(after));
    assert!(probes > 0);
}
