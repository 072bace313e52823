//! The multiplexed connection under faults, against real memcached
//! processes: killed mid-stream, frozen (SIGSTOP) past the stall bound, a
//! listener that never answers, a proxy that delays replies, and thousands
//! of callers that give up at random. Whatever happens, calls come back,
//! the stream stays in step, and memcached ends up counting exactly what
//! callers were told was counted.
//!
//! This file holds the store, the policy and the reads of memcached's
//! counts that the tests share; the tests are in the modules below, by the
//! fault.

#[path = "../common/mod.rs"]
mod common;

mod frozen;
mod many_callers;
mod stalls;
mod take_backs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use slidegate::store::{CounterKey, KeyDigest};
use slidegate::{Limit, MemcachedStore, Policy};

const MINUTE: u64 = 60_000;

fn per_minute(limit: u64) -> Arc<Policy> {
    Arc::new(Policy::new("api", vec![Limit::new(limit, MINUTE, 1).unwrap()]).unwrap())
}

async fn store(addr: String, timeout: Duration) -> Arc<MemcachedStore> {
    let mut options = common::memcached_options(vec![addr]);
    options.timeout = timeout;
    Arc::new(MemcachedStore::connect(&options).await.unwrap())
}

/// The value memcached holds for the current bucket of `key`.
fn counter_value(memcached: &Memcached, store: &MemcachedStore, key: &str, now: u64) -> u64 {
    let limit = per_minute(1).limits()[0];
    let wire_key = store.wire_key(&CounterKey {
        digest: KeyDigest::of("api", key),
        window: limit.window(),
        bucket: limit.window().bucket_of(now),
    });
    let answer = memcached.raw(&format!("mg {wire_key} v\r\nmn\r\n"), "MN\r\n");
    let mut lines = answer.lines();
    match lines.next() {
        Some("EN") => 0,
        Some(header) if header.starts_with("VA") => lines
            .next()
            .and_then(|line| line.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected answer {answer:?}")),
        _ => panic!("unexpected answer {answer:?}"),
    }
}

/// Wait until memcached's count stops moving (rollbacks and take-backs of
/// abandoned requests are still in flight when the callers return).
async fn settled_value(memcached: &Memcached, store: &MemcachedStore, key: &str, now: u64) -> u64 {
    let mut last = counter_value(memcached, store, key, now);
    let mut stable = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while stable < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let value = counter_value(memcached, store, key, now);
        stable = if value == last { stable + 1 } else { 0 };
        last = value;
    }
    last
}
