//! What a call costs and what it puts on the wire: round trips and
//! commands per call, the TTL a bucket is written with, keys that reach
//! memcached only as digests, and the size of a check's future.

use std::sync::Arc;

use slidegate::store::{CounterKey, KeyDigest};
use slidegate::{ManualClock, Source};

use super::{MINUTE, policy, store_at};
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;

/// Round trips counted by a proxy between the store and memcached, and what
/// memcached itself saw (`stats`): an admitted check is one round trip, the
/// first reject two (the rollback), a hot reject none at all.
#[tokio::test]
async fn round_trips_per_call() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 30_000);
    let limiter = common::patient_limiter(store_at(vec![proxy.addr.clone()]).await)
        .clock(clock)
        .build();
    let api = policy(&[(3, MINUTE, 1)]);
    let fine = policy(&[(10, 1_000, 1), (3_000, 10 * MINUTE, 10)]);

    // Each step: (what, round trips through the proxy, memcached stats
    // deltas), printed with --nocapture and asserted below.
    let mut steps = Vec::new();
    let mut measure =
        |what: &'static str, before: (u64, std::collections::HashMap<String, u64>)| {
            let after = memcached.stats();
            let delta = |name: &str| after[name] - before.1[name];
            // Our own `stats\r\n` (7 bytes) is the only other thing memcached reads.
            let step = (
                what,
                proxy.round_trips() - before.0,
                delta("cmd_get"),
                delta("decr_hits"),
                delta("bytes_read") - 7,
            );
            println!(
                "{:<32} round trips {:>2}   memcached: cmd_get +{:<3} decr_hits +{:<3} bytes_read +{}",
                step.0, step.1, step.2, step.3, step.4
            );
            steps.push(step);
        };

    let before = (proxy.round_trips(), memcached.stats());
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    measure("admitted check", before);

    limiter.check("k", &api, 2).await.unwrap();
    let before = (proxy.round_trips(), memcached.stats());
    assert_eq!(
        limiter.check("k", &api, 1).await.unwrap().source,
        Source::Store
    );
    measure("first reject", before);

    let before = (proxy.round_trips(), memcached.stats());
    for _ in 0..100 {
        let hot = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!((hot.allowed, hot.source), (false, Source::NearCache));
    }
    measure("100 hot rejects", before);

    let before = (proxy.round_trips(), memcached.stats());
    limiter.peek("other", &api, 1).await.unwrap();
    measure("peek", before);
    let before = (proxy.round_trips(), memcached.stats());
    limiter.report("other", &api, 1).await.unwrap();
    measure("report", before);

    // Two limits, one at precision 10: 1 + 10 older buckets read and two
    // current ones incremented, still in one write.
    let before = (proxy.round_trips(), memcached.stats());
    assert!(limiter.check("k2", &fine, 1).await.unwrap().allowed);
    measure("admitted check, 2 limits, k=10", before);

    let round_trips: Vec<u64> = steps.iter().map(|step| step.1).collect();
    assert_eq!(round_trips, [1, 2, 0, 1, 1, 1]);
    let reads: Vec<u64> = steps.iter().map(|step| step.2).collect();
    assert_eq!(reads, [1, 1, 0, 2, 1, 11]);
    assert_eq!(
        steps[1].3, 1,
        "the first reject's rollback is one decrement"
    );
    assert_eq!(steps[2].4, 0, "hot rejects: memcached read nothing at all");
}

/// The TTL memcached holds for a bucket: two windows plus a margin; over 30
/// days, sent as an absolute time and still read back as ~80 days.
#[tokio::test]
async fn buckets_live_two_windows() {
    let memcached = common::shared_memcached();
    let now = common::today_ms() + 1_000;
    let store = Arc::new(store_at(vec![memcached.addr()]).await);
    let limiter = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    for (window_ms, expected_ttl) in [(MINUTE, 122), (40 * 86_400_000, 80 * 86_400 + 2)] {
        let api = policy(&[(5, window_ms, 1)]);
        limiter.check("k", &api, 1).await.unwrap();
        let limit = api.limits()[0];
        let key = store.wire_key(&CounterKey {
            digest: KeyDigest::of("api", "k"),
            window: limit.window(),
            bucket: limit.window().bucket_of(now),
        });
        let answer = memcached.raw(&format!("mg {key} t v\r\n"), "\r\n1\r\n");
        let ttl: i64 = answer
            .split_whitespace()
            .find_map(|token| token.strip_prefix('t')?.parse().ok())
            .unwrap_or_else(|| panic!("no TTL in {answer:?}"));
        // The absolute expiry was computed from the manual clock, which is
        // behind the real one by up to a day.
        let slack = if window_ms > MINUTE { 86_400 + 5 } else { 2 };
        assert!(
            (expected_ttl - slack..=expected_ttl).contains(&ttl),
            "window {window_ms} ms: TTL {ttl}, expected about {expected_ttl}"
        );
    }
}

/// Keys that look like protocol text reach memcached only as digests: a
/// sentinel item survives them, and every key in the namespace is plain.
#[tokio::test]
async fn client_keys_never_reach_the_wire_as_text() {
    let memcached = Memcached::start();
    assert_eq!(
        memcached.raw("set sentinel 0 0 2\r\nok\r\n", "\r\n"),
        "STORED\r\n"
    );
    let limiter = common::patient_limiter(store_at(vec![memcached.addr()]).await).build();
    let api = policy(&[(5, MINUTE, 1)]);
    let long = format!("{}\r\nflush_all\r\n", "y".repeat(1000));
    for key in [
        "\r\nflush_all\r\n",
        "k\r\ndelete sentinel\r\n",
        "k noreply\r\nset sentinel 0 0 1\r\nx\r\n",
        "mn\r\nmd sentinel q\r\n",
        long.as_str(),
    ] {
        limiter.check(key, &api, 1).await.unwrap();
    }
    assert_eq!(
        memcached.raw("get sentinel\r\n", "END\r\n"),
        "VALUE sentinel 0 2\r\nok\r\nEND\r\n"
    );
    let dump = memcached.raw("lru_crawler metadump all\r\n", "END\r\n");
    // metadump URL-encodes keys; ours only ever need ':' decoded.
    let keys: Vec<String> = dump
        .lines()
        .filter_map(|line| line.strip_prefix("key="))
        .map(|rest| rest.split(' ').next().unwrap_or("").replace("%3A", ":"))
        .filter(|key| key != "sentinel")
        .collect();
    assert_eq!(keys.len(), 5);
    for key in keys {
        assert!(
            key.len() <= 250
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:-".contains(&b)),
            "{key}"
        );
    }
}

/// A check's future is what every caller's task holds and what each level
/// of the decision moves whole when it creates the next: an async wrapper
/// that keeps the future it was given beside the one it awaits doubles it.
/// It was 7,256 bytes with two such wrappers (the profile showed memmove as
/// the first user-space cost, 11% of the library's CPU at 256 callers);
/// 2,520 without. The bound leaves a compiler's slack, not a wrapper's.
#[tokio::test]
async fn a_check_future_stays_small() {
    let store = Arc::new(store_at(vec![common::shared_memcached().addr()]).await);
    let limiter = common::patient_limiter(store).build();
    let policy = policy(&[(5, 60_000, 1)]);
    let check = limiter.check("small", &policy, 1);
    let bytes = std::mem::size_of_val(&check);
    println!("a check's future: {bytes} bytes");
    assert!(bytes <= 3_584, "a check's future is {bytes} bytes");
}

/// The README's "256 concurrent callers on one key cost 0.02 Memcached
/// commands a check": 8 bursts of 256 simultaneous admitted checks of one
/// key on one instance share their exchanges, and cost at most 0.25
/// commands a check (each would cost 2 alone). The figure is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_admitted_key_costs_a_fraction_of_a_command_a_check() {
    const CALLERS: usize = 256;
    const BURSTS: usize = 8;
    let memcached = Memcached::start();
    let limiter = Arc::new(common::patient_limiter(store_at(vec![memcached.addr()]).await).build());
    let hot = Arc::new(policy(&[(1_000_000, MINUTE, 1)]));
    assert!(limiter.check("warm", &hot, 1).await.unwrap().allowed);
    let before = memcached.item_commands();
    for _ in 0..BURSTS {
        for check in common::spawn_checks(&limiter, "hot", &hot, CALLERS) {
            let decision = check.await.unwrap();
            assert!(decision.allowed && decision.source == Source::Store);
        }
    }
    let commands = memcached.item_commands() - before;
    let per_check = commands as f64 / (CALLERS * BURSTS) as f64;
    eprintln!(
        "{BURSTS} bursts of {CALLERS} checks of one hot key: {commands} memcached commands \
         ({per_check:.3} a check)"
    );
    assert!(per_check <= 0.25, "{per_check:.3} commands a check");
}
