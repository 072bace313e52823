//! Several Memcached nodes, one lost under load: only the keys on that node
//! fall back to the failure mode, the others keep exact counts, and when
//! the node returns its keys are decided by the store again.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use common::proxy::CountingProxy;
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

/// A node that comes back is used on the first of its connections that is
/// up again. The others may still be waiting out their redial backoff (in
/// CI a restart once fell between two connections' dials): a check must not
/// fail on one of those while a live connection to the same node works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_node_is_used_on_its_first_live_connection() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    options.timeout = Duration::from_millis(200);
    options.connections = 4;
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = Limiter::builder(store.clone()).build();
    let policy = Policy::new("back", vec![Limit::new(1_000_000, 3_600_000, 1).unwrap()]).unwrap();
    let live = || store.topology().nodes[0].live();
    wait_for("4 connections up", || live() == 4).await;

    // The node goes away; the connections redial with growing backoff.
    proxy.cut();
    wait_for("every connection down", || live() == 0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        limiter.check("k", &policy, 1).await.unwrap().source,
        Source::Fallback
    );

    // It comes back while one connection redials; the other three dial
    // into the refusal and back off again.
    proxy.let_in(1);
    wait_for("one connection up", || live() == 1).await;
    // Past the refused connections' brief moment up, into their backoff.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(live(), 1);
    proxy.open();
    for attempt in 0..40 {
        let decision = limiter.check("k", &policy, 1).await.unwrap();
        assert_eq!(
            decision.source,
            Source::Store,
            "check {attempt} after the node came back, {} of 4 connections up",
            live()
        );
    }
}

/// Poll `done` every millisecond for up to 10 s.
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "waited 10 s for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
