//! Several Memcached nodes, one lost under load: only the keys on that node
//! fall back to the failure mode, the others keep exact counts, and when
//! the node returns its keys are decided by the store again.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::Memcached;
use common::proxy::CountingProxy;
use common::wait::{PATIENCE, until_the_store_decides};
use slidegate::store::KeyDigest;
use slidegate::{Item, Limit, Limiter, MemcachedStore, Policy, Source};

/// The longest wait between two dials of a lost node (the README's promise).
const REDIAL_BACKOFF_MAX: Duration = Duration::from_millis(500);
/// What a loaded machine may add to it before a check sees the node back.
const SCHEDULING_SLACK: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_costs_only_its_own_keys() {
    let mut nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    // The harness's generous timeouts: a killed node fails its calls at
    // once (its connections are reset), while the live ones must decide
    // every check on a busy machine too.
    let options = common::memcached_options(nodes.iter().map(Memcached::addr).collect());
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = Arc::new(common::patient_limiter(store.clone()).build());
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
    let probe = keys
        .iter()
        .find(|key| node_of[key.as_str()] == lost)
        .unwrap()
        .clone();
    let (_, took) = until_the_store_decides(&limiter, &probe, &policy).await;
    eprintln!("the returned node's keys were decided by the store again after {took:?}");
    // The README: "its keys return to the store within a redial backoff
    // (at most 500 ms)". The slack is for a loaded machine's scheduling;
    // a backoff that grew past 500 ms by as much again still fails.
    assert!(
        took <= REDIAL_BACKOFF_MAX + SCHEDULING_SLACK,
        "the node's keys came back after {took:?}, not within {REDIAL_BACKOFF_MAX:?}"
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
    let limiter = common::patient_limiter(store.clone()).build();
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
    // The one let in is relayed by the proxy and up; a refused one is
    // accepted and closed, and is up for a moment too (long enough, on a
    // loaded machine, to be the one counted). Past that moment, into the
    // refused ones' backoff: one relayed connection, and one up, for 100 ms
    // on end.
    wait_for("the connection let in up", || {
        proxy.open_connections() == 1 && live() == 1
    })
    .await;
    let settled = tokio::time::timeout(PATIENCE, async {
        let mut since = std::time::Instant::now();
        while since.elapsed() < Duration::from_millis(100) {
            if proxy.open_connections() != 1 || live() != 1 {
                since = std::time::Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    settled
        .await
        .expect("never one relayed connection up for 100 ms on end");
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

/// Poll `done` until it holds (bounded by the harness's patience).
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    common::wait::wait_for(what, PATIENCE, || std::future::ready(done())).await;
}

/// `/readyz` with two nodes: ready while either answers, naming the one
/// that does not; 503 only once neither does. A lost node costs only its
/// own keys, so it must not take every replica out of the load balancer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_names_a_lost_node_and_stays_ready_while_another_answers() {
    use slidegate::AnyStore;
    use slidegate::config::AuthConfig;
    use slidegate::server::{self, App};

    let mut nodes: Vec<Memcached> = (0..2).map(|_| Memcached::start()).collect();
    let options = common::memcached_options(nodes.iter().map(Memcached::addr).collect());
    let store = MemcachedStore::connect(&options).await.unwrap();
    let limiter = Limiter::builder(AnyStore::Memcached(store))
        .timeout(Duration::from_secs(2))
        .build();
    let app = Arc::new(App::new(limiter, Vec::new(), AuthConfig::default()));
    let common::in_process::Served {
        addr,
        stop,
        task: served,
    } = common::in_process::serve(server::serve, app).await;
    let state_of = |body: &serde_json::Value, node: &str| {
        body["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|entry| entry["node"] == node))
            .map(|entry| entry["state"].as_str().unwrap_or_default().to_owned())
    };
    let (first, second) = (nodes[0].addr(), nodes[1].addr());

    let ready = readyz_until(addr, "both nodes up", |status, body| {
        status == 200 && state_of(body, &second).as_deref() == Some("up")
    })
    .await;
    assert_eq!(state_of(&ready, &first).as_deref(), Some("up"));

    nodes[1].kill();
    let body = readyz_until(addr, "the lost node named down", |_, body| {
        state_of(body, &second).as_deref() == Some("down")
    })
    .await;
    assert_eq!(
        body["status"], "ready",
        "one node of two still answers: {body}"
    );
    assert_eq!(state_of(&body, &first).as_deref(), Some("up"));

    nodes[0].kill();
    let body = readyz_until(addr, "unready with no node", |status, _| status == 503).await;
    assert_eq!(body["status"], "unavailable");
    assert_eq!(state_of(&body, &first).as_deref(), Some("down"));
    assert_eq!(state_of(&body, &second).as_deref(), Some("down"));
    let _ = stop.send(());
    served.await.unwrap().unwrap();
}

/// `/readyz` polled until its status and body satisfy `done` (at most
/// 10 s); its body then. The status is checked with the body: a 200 that
/// says "ready" and names the nodes.
async fn readyz_until(
    addr: std::net::SocketAddr,
    what: &str,
    done: impl Fn(u16, &serde_json::Value) -> bool,
) -> serde_json::Value {
    let body = common::wait::until(what, Duration::from_secs(10), || async {
        let response = common::http::get(addr, "/readyz").await;
        let body = response.json();
        done(response.status, &body).then_some((response.status, body))
    })
    .await;
    let (status, body) = body;
    assert_eq!(status == 200, body["status"] == "ready", "{body}");
    body
}

/// A request of several keys whose caller gives up while one key's node is
/// slow: the key already answered by a fast node must not stay counted,
/// since the caller was never told it was (Envoy cancels a rate-limit call
/// after its own timeout, 20 ms by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_given_up_midway_leaves_nothing_counted() {
    let fast = Memcached::start();
    let slow = Memcached::start();
    let proxy = CountingProxy::start(slow.addr()).await;
    let options = common::memcached_options(vec![fast.addr(), proxy.addr.clone()]);
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = common::patient_limiter(store.clone()).build();
    let policy = Policy::new("midway", vec![Limit::new(1_000, 3_600_000, 1).unwrap()]).unwrap();
    let on = |node: &str| {
        (0..)
            .map(|index| format!("client-{index}"))
            .find(|key| store.node_name_of(&KeyDigest::of("midway", key)).unwrap() == node)
            .unwrap()
    };
    let (on_fast, on_slow) = (on(&fast.addr()), on(&proxy.addr));
    for key in [&on_fast, &on_slow] {
        common::wait::wait_for("both nodes to answer", PATIENCE, || async {
            let peeked = limiter.peek(key, &policy, 1).await;
            peeked.is_ok_and(|peeked| peeked.source == Source::Store)
        })
        .await;
    }
    let items = [on_fast.as_str(), on_slow.as_str()].map(|key| Item {
        key,
        policy: &policy,
        cost: 1,
    });

    proxy.delay_replies(500);
    let given_up =
        tokio::time::timeout(Duration::from_millis(200), limiter.check_all(&items)).await;
    assert!(given_up.is_err(), "the slow node answered within 200 ms");
    proxy.delay_replies(0);

    // The slow key's reply comes 500 ms after it was sent, and is taken back
    // when it does; the fast key's addition, answered but never claimed,
    // must have been taken back too.
    for key in [&on_fast, &on_slow] {
        common::wait::wait_for("the additions taken back", PATIENCE, || async {
            let peeked = limiter.peek(key, &policy, 1).await.unwrap();
            assert_eq!(peeked.source, Source::Store);
            peeked.remaining() == 1_000
        })
        .await;
    }
}
