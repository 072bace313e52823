//! Counters that survive a lost Memcached node (`memcached.replicas`).
//!
//! Three nodes. For each node in turn, a key whose counters it holds is
//! filled to 60 % of its limit; the node is killed, checked without, and
//! started again empty on the same port (as a restart, or ElastiCache's
//! replacement under the same name, leaves it). With `replicas = 2` the key
//! admits nothing over its limit in the window, and every check is decided
//! by the store; with `replicas = 1` the key gets its whole limit again.
//! The figures are printed (`--nocapture`): the chapter "When a node goes
//! away" quotes them.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use common::wait::{PATIENCE, wait_for};
use slidegate::store::{KeyDigest, Store};
use slidegate::{
    FailureMode, Limit, ManualClock, MemcachedOptions, MemcachedStore, Policy, Source,
};

const LIMIT: u64 = 100;
const FILLED: u64 = 60;
/// Checks while the node is down.
const WHILE_DOWN: u64 = 5;
/// The most checks after the node is back: more than the limit, so that a
/// key that got its whole limit again shows it.
const AFTER_AT_MOST: u64 = 2 * LIMIT;
const HOUR_MS: u64 = 3_600_000;

/// What one key went through when one of its nodes was lost and replaced.
#[derive(Debug)]
struct Figures {
    node: String,
    /// Where the node stood among the key's replicas (0: first).
    rank: usize,
    /// Admitted by the store while the node was down.
    while_down: u64,
    /// Decided by the failure mode while the node was down.
    fallback_while_down: u64,
    /// Admitted by the store after the node came back empty.
    after: u64,
    /// Decided by the failure mode after it came back.
    fallback_after: u64,
}

impl Figures {
    /// What the store admitted in the window, the fill included.
    fn admitted(&self) -> u64 {
        FILLED + self.while_down + self.after
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_admit_nothing_over_the_limit_when_a_node_is_replaced() {
    let figures = lose_each_node(2).await;
    for figures in &figures {
        assert_eq!(
            figures.fallback_while_down + figures.fallback_after,
            0,
            "a replica answered every check: the store decides ({figures:?})"
        );
        assert_eq!(figures.while_down, WHILE_DOWN, "{figures:?}");
        assert!(figures.admitted() <= LIMIT, "over the limit: {figures:?}");
        // Exact, too: the surviving replica kept every count, and nothing
        // was lost but the node's copy.
        assert_eq!(figures.admitted(), LIMIT, "{figures:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_gives_a_replaced_node_s_keys_their_limit_again() {
    let figures = lose_each_node(1).await;
    for figures in &figures {
        assert_eq!(figures.while_down, 0, "{figures:?}");
        assert!(
            figures.admitted() > LIMIT,
            "the replaced node's key admitted no more than its limit: {figures:?}"
        );
    }
}

/// Fill, lose and replace each node in turn; the figures of each.
async fn lose_each_node(replicas: usize) -> Vec<Figures> {
    let mut nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let options = MemcachedOptions {
        replicas,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    // Mid-hour on a fixed clock: the whole test is inside one bucket of
    // the hour's window.
    let clock = ManualClock::new(common::today_ms() + HOUR_MS / 2);
    let limiter = common::patient_limiter(store.clone())
        .clock(clock)
        .near_cache_capacity(0)
        .failure_mode(FailureMode::Allow)
        .build();
    let policy = Policy::new("lost", vec![Limit::new(LIMIT, HOUR_MS, 1).unwrap()]).unwrap();
    let mut all = Vec::new();
    for (lost, node) in nodes.iter_mut().enumerate() {
        let addr = node.addr();
        let (key, rank) = (0..)
            .map(|candidate| format!("r{replicas}-n{lost}-{candidate}"))
            .find_map(|key| {
                let holders = store.replica_names_of(&KeyDigest::of("lost", &key));
                let rank = holders.iter().position(|holder| *holder == addr)?;
                Some((key, rank))
            })
            .unwrap();
        for _ in 0..FILLED {
            let decision = limiter.check(&key, &policy, 1).await.unwrap();
            assert!(decision.allowed && decision.source == Source::Store);
        }

        node.kill();
        let (mut while_down, mut fallback_while_down) = (0, 0);
        for _ in 0..WHILE_DOWN {
            let decision = limiter.check(&key, &policy, 1).await.unwrap();
            match decision.source {
                Source::Store => while_down += u64::from(decision.allowed),
                _ => fallback_while_down += 1,
            }
        }

        node.restart();
        let (mut after, mut fallback_after) = (0, 0);
        let began = Instant::now();
        for _ in 0..AFTER_AT_MOST {
            let decision = limiter.check(&key, &policy, 1).await.unwrap();
            match decision.source {
                Source::Store if decision.allowed => after += 1,
                // Refused by the store: the window is full.
                Source::Store => break,
                _ => {
                    // One replica: its node is being dialled again.
                    fallback_after += 1;
                    assert!(began.elapsed() < PATIENCE, "the store never came back");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        let figures = Figures {
            node: addr,
            rank,
            while_down,
            fallback_while_down,
            after,
            fallback_after,
        };
        eprintln!(
            "replicas = {replicas}, node {lost} ({}) lost (replica {} of the key): {FILLED} of {LIMIT} \
             admitted before; {} while it was down ({} by the failure mode); replaced empty: \
             {} more admitted; the store admitted {} in the window",
            figures.node,
            figures.rank + 1,
            figures.while_down,
            figures.fallback_while_down,
            figures.after,
            figures.admitted()
        );
        all.push(figures);
    }
    drop(limiter);
    all
}

/// With replicas, one node down is degraded (ready, the node named down);
/// as many down as a key has replicas is not ready, since some key has
/// none left. With one, ready while any node answers, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_replicas() {
    for replicas in [1, 2] {
        let mut nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
        let options = MemcachedOptions {
            replicas,
            ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
        };
        let store = MemcachedStore::connect(&options).await.unwrap();
        wait_for("every node up", PATIENCE, || async {
            let readiness = store.readiness().await;
            readiness.result.is_ok() && readiness.nodes.iter().all(|node| node.up)
        })
        .await;
        nodes[0].kill();
        wait_for("one node named down", PATIENCE, || async {
            let readiness = store.readiness().await;
            readiness.nodes.iter().filter(|node| !node.up).count() == 1
        })
        .await;
        let readiness = store.readiness().await;
        assert!(readiness.result.is_ok(), "{replicas}: {readiness:?}");
        nodes[1].kill();
        wait_for("two nodes named down", PATIENCE, || async {
            let readiness = store.readiness().await;
            readiness.nodes.iter().filter(|node| !node.up).count() == 2
        })
        .await;
        let readiness = store.readiness().await;
        match replicas {
            1 => assert!(readiness.result.is_ok(), "{readiness:?}"),
            _ => {
                let error = readiness.result.expect_err("some key has no replica left");
                assert!(error.to_string().contains("2 of 3 nodes down"), "{error}");
            }
        }
    }
}

/// While the first replica is doubted (here: both nodes restarted, so
/// every instance doubts both), the highest count decides: a burst of 100
/// callers on 4 instances, limit 5, never admits more than 5. It may admit
/// fewer (the replicas see the additions in different orders); the figures
/// are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_replicas_are_doubted_a_burst_never_admits_over_the_limit() {
    const INSTANCES: usize = 4;
    const CALLERS: usize = 100;
    const REPETITIONS: usize = 20;
    let mut nodes = [Memcached::start(), Memcached::start()];
    let options = MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    let clock = ManualClock::new(common::today_ms() + 30_000);
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        let store = MemcachedStore::connect(&options).await.unwrap();
        instances.push(Arc::new(
            common::patient_limiter(store)
                .clock(clock.clone())
                .failure_mode(FailureMode::Deny)
                .build(),
        ));
    }
    let policy = Arc::new(Policy::new("doubt", vec![Limit::new(5, 60_000, 1).unwrap()]).unwrap());
    for instance in &instances {
        instance.check("warm", &policy, 1).await.unwrap();
    }
    for node in &mut nodes {
        node.restart();
    }
    // Every instance has dialled both again: each doubts both.
    for instance in &instances {
        wait_for("the nodes back", PATIENCE, || async {
            let readiness = instance.readiness().await;
            readiness.result.is_ok() && readiness.nodes.iter().all(|node| node.up)
        })
        .await;
    }
    let admitted_per_repetition =
        common::admitted_per_burst(&instances, &policy, CALLERS, REPETITIONS, "doubted").await;
    eprintln!("doubted replicas, limit 5, admitted per burst: {admitted_per_repetition:?}");
    assert!(
        admitted_per_repetition
            .iter()
            .all(|&admitted| admitted <= 5),
        "{admitted_per_repetition:?}"
    );
}

/// An instance started after a node was replaced never saw it go: it
/// learns each node's birth (the first second any instance asked it) in
/// its first exchange, and a key's first replica born later than another
/// is not believed alone. The key keeps its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_after_a_replacement_does_not_believe_the_empty_node() {
    let mut nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let options = MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    let policy = Policy::new("lost", vec![Limit::new(LIMIT, HOUR_MS, 1).unwrap()]).unwrap();
    let at = common::today_ms() + HOUR_MS / 2;
    let first = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let key = (0..)
        .map(|candidate| format!("fresh-{candidate}"))
        .find(|key| first.replica_names_of(&KeyDigest::of("lost", key))[0] == nodes[0].addr())
        .unwrap();
    let before = common::patient_limiter(first)
        .clock(ManualClock::new(at))
        .near_cache_capacity(0)
        .build();
    for _ in 0..FILLED {
        assert!(before.check(&key, &policy, 1).await.unwrap().allowed);
    }
    drop(before);
    nodes[0].restart();
    // Later, by the clocks' seconds, than the births the first instance
    // gave the nodes.
    let store = MemcachedStore::connect(&options).await.unwrap();
    let after = common::patient_limiter(store)
        .clock(ManualClock::new(at + 5_000))
        .near_cache_capacity(0)
        .failure_mode(FailureMode::Deny)
        .build();
    let mut admitted = 0;
    for _ in 0..AFTER_AT_MOST {
        let decision = after.check(&key, &policy, 1).await.unwrap();
        if !decision.allowed {
            break;
        }
        assert_eq!(decision.source, Source::Store);
        admitted += 1;
    }
    eprintln!(
        "a fresh instance after the key's first replica was replaced: {FILLED} before, {admitted} more"
    );
    assert_eq!(FILLED + admitted, LIMIT);
}

/// A caller that gives up while one replica is frozen (its host stopped
/// scheduling it) leaves nothing counted: not on the frozen one, whose
/// reply comes to nobody once it runs again, nor on the one that had
/// answered and was waiting with its count for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_on_a_frozen_replica_leaves_nothing_counted() {
    let nodes = [Memcached::start(), Memcached::start()];
    let options = MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    let clock = ManualClock::new(common::today_ms() + HOUR_MS / 2);
    let policy = Policy::new("frozen", vec![Limit::new(LIMIT, HOUR_MS, 1).unwrap()]).unwrap();
    let limiter = common::patient_limiter(MemcachedStore::connect(&options).await.unwrap())
        .clock(clock.clone())
        .near_cache_capacity(0)
        .build();
    // Each node alone, to read its own copy.
    let mut copies = Vec::new();
    for node in &nodes {
        let alone = MemcachedOptions {
            servers: vec![node.addr()],
            replicas: 1,
            ..options.clone()
        };
        let store = MemcachedStore::connect(&alone).await.unwrap();
        copies.push(common::patient_limiter(store).clock(clock.clone()).build());
    }
    assert!(limiter.check("given-up", &policy, 1).await.unwrap().allowed);

    nodes[1].pause();
    let check = limiter.check("given-up", &policy, 1);
    let gave_up = tokio::time::timeout(Duration::from_millis(300), check).await;
    assert!(gave_up.is_err(), "the frozen replica cannot have answered");
    nodes[1].resume();

    for (index, copy) in copies.iter().enumerate() {
        wait_for("only the told check counted", PATIENCE, || async {
            let decision = copy.peek("given-up", &policy, 1).await.unwrap();
            decision.source == Source::Store && decision.remaining() == LIMIT - 1
        })
        .await;
        let decision = copy.peek("given-up", &policy, 1).await.unwrap();
        assert_eq!(decision.remaining(), LIMIT - 1, "node {index}");
    }
}
