//! The library phases, run in this process: `Limiter::check` on the
//! multiplexed store, and the memcache crate's pooled client sending the
//! same two commands as a check.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use memcache::exp::{Arithmetic, AsyncMetaClient, Get, Op};
use slidegate::{Limiter, MemcachedStore, Policy};

use crate::measure::Row;
use crate::{KEYS, run_callers};

/// `callers` tasks calling `check` until `total` calls or `limit`.
pub async fn limiter_phase(
    limiter: Arc<Limiter<MemcachedStore>>,
    policy: Arc<Policy>,
    callers: usize,
    total: u64,
    limit: Duration,
    keys: u64,
) -> Row {
    let unexpected = Arc::new(AtomicU64::new(0));
    let row = run_callers(callers, total, limit, {
        let unexpected = unexpected.clone();
        move |index| {
            let (limiter, policy, unexpected) =
                (limiter.clone(), policy.clone(), unexpected.clone());
            async move {
                let key = format!("key-{}", index % keys);
                match limiter.check(&key, &policy, 1).await {
                    Ok(decision)
                        if decision.allowed && decision.source == slidegate::Source::Store => {}
                    _ => {
                        unexpected.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    })
    .await;
    let name = if keys == 1 {
        "Limiter::check (library), one hot admitted key"
    } else {
        "Limiter::check (library)"
    };
    Row {
        name: name.to_owned(),
        concurrency: format!("{callers} caller{}", if callers == 1 { "" } else { "s" }),
        unexpected: unexpected.load(Ordering::Relaxed),
        ..row
    }
}

/// The memcache crate's pooled client (what slidegate 0.1 used) sending
/// the same two commands as a check.
pub async fn memcache_crate(mc: &str, callers: usize, total: u64, limit: Duration) -> Row {
    let client = AsyncMetaClient::builder()
        .max_idle(callers)
        .connect_async(mc)
        .await
        .expect("connect the memcache crate's client");
    let row = run_callers(callers, total, limit, move |index| {
        let client = client.clone();
        async move {
            let key = index % KEYS;
            let batch = [
                Op::from(Get::new(format!("cratebench:{key}:1"))),
                Op::from(
                    Arithmetic::new(format!("cratebench:{key}:2"))
                        .delta(1)
                        .initial(1, 130),
                ),
            ];
            let _ = client.run_batch(batch).await;
        }
    })
    .await;
    Row {
        name: "memcache crate pooled client (0.1's)".to_owned(),
        concurrency: format!("{callers} caller{}", if callers == 1 { "" } else { "s" }),
        ..row
    }
}
