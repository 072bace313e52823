//! Several Memcached nodes, one lost under load: only the keys on that node
//! fall back to the failure mode, the others keep exact counts, and when
//! the node returns its keys are decided by the store again.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use slidegate::store::KeyDigest;
use slidegate::{Limit, Limiter, MemcachedStore, Policy, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_costs_only_its_own_keys() {
    let mut nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let mut options = common::memcached_options(nodes.iter().map(Memcached::addr).collect());
    options.timeout = Duration::from_millis(200);
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = Arc::new(Limiter::builder(store.clone()).build());
    let policy =
        Arc::new(Policy::new("nodes", vec![Limit::new(1_000_000, 3_600_000, 1).unwrap()]).unwrap());
    let keys: Vec<String> = (0..300).map(|index| format!("client-{index}")).collect();
    let node_of: HashMap<&str, String> = keys
        .iter()
        .map(|key| {
            let node = store.node_name_of(&KeyDigest::of("nodes", key)).unwrap();
            (key.as_str(), node)
        })
        .collect();
    let lost = nodes[1].addr();
    let on_lost = keys
        .iter()
        .filter(|key| node_of[key.as_str()] == lost)
        .count();
    eprintln!(
        "{on_lost} of {} keys live on the node to be lost",
        keys.len()
    );
    assert!(on_lost > 50 && on_lost < 150, "{on_lost}");

    let check_all = || {
        let (limiter, policy, keys) = (limiter.clone(), policy.clone(), keys.clone());
        async move {
            let tasks: Vec<_> = keys
                .into_iter()
                .map(|key| {
                    let (limiter, policy) = (limiter.clone(), policy.clone());
                    tokio::spawn(async move {
                        let decision = limiter.check(&key, &policy, 1).await.unwrap();
                        (key, decision)
                    })
                })
                .collect();
            let mut decisions = Vec::new();
            for task in tasks {
                decisions.push(task.await.unwrap());
            }
            decisions
        }
    };
    for (_, decision) in check_all().await {
        assert_eq!(decision.source, Source::Store);
    }

    nodes[1].kill();
    let mut fell_back = 0;
    for (key, decision) in check_all().await {
        if node_of[key.as_str()] == lost {
            assert_eq!(decision.source, Source::Fallback, "{key}");
            fell_back += 1;
        } else {
            // Exact: the first check and this one.
            assert_eq!(decision.source, Source::Store, "{key}");
            assert_eq!(decision.limits[0].estimate.as_f64(), 2.0, "{key}");
        }
    }
    assert_eq!(fell_back, on_lost);

    nodes[1].restart();
    let back_at = Instant::now();
    let probe = keys
        .iter()
        .find(|key| node_of[key.as_str()] == lost)
        .unwrap()
        .clone();
    loop {
        let decision = limiter.check(&probe, &policy, 1).await.unwrap();
        if decision.source == Source::Store {
            break;
        }
        assert!(
            back_at.elapsed() < Duration::from_secs(10),
            "the node's keys never came back to the store"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "the returned node's keys were decided by the store again after {:?}",
        back_at.elapsed()
    );
    for (key, decision) in check_all().await {
        assert_eq!(decision.source, Source::Store, "{key}");
    }
}
