//! Several servers: keys routed by digest over a fixed list, and a list
//! that discovery changes, where nodes that stay keep their connections,
//! removed ones drain and a failed poll keeps the list in use.

use std::sync::Arc;
use std::time::Duration;

use slidegate::store::memcached::DigestRendezvous;
use slidegate::store::{CounterKey, KeyDigest};
use slidegate::{Limiter, ManualClock, MemcachedOptions, MemcachedStore, Source};

use super::{MINUTE, policy, store_at};
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;

/// With three servers, every counter of a key sits on the one server the
/// pinned rendezvous hash names, and the keys spread over all three.
#[tokio::test]
async fn keys_route_by_digest_over_several_servers() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let addrs: Vec<String> = servers.iter().map(Memcached::addr).collect();
    let now = common::today_ms() + 1_000;
    let store = Arc::new(store_at(addrs.clone()).await);
    let limiter = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    let api = policy(&[(10, MINUTE, 1), (100, 60 * MINUTE, 4)]);
    let mut per_server = [0usize; 3];
    for index in 0..300 {
        let key = format!("client-{index}");
        assert!(limiter.check(&key, &api, 1).await.unwrap().allowed);
        let wire_keys: Vec<String> = api
            .limits()
            .iter()
            .map(|limit| {
                store.wire_key(&CounterKey {
                    digest: KeyDigest::of("api", &key),
                    window: limit.window(),
                    bucket: limit.window().bucket_of(now),
                })
            })
            .collect();
        let owner = DigestRendezvous::pick(wire_keys[0].as_bytes(), &addrs);
        for (server, memcached) in servers.iter().enumerate() {
            for wire_key in &wire_keys {
                let held = memcached
                    .raw(&format!("mg {wire_key} v\r\n"), "\r\n")
                    .starts_with("VA");
                assert_eq!(
                    held,
                    server == owner,
                    "{key}: {wire_key} on server {server}"
                );
            }
        }
        per_server[owner] += 1;
    }
    assert!(
        per_server.iter().all(|&n| n > 60),
        "unbalanced: {per_server:?}"
    );
}

/// The README on discovery: "nodes that stay keep their connections ...
/// removed ones close once their last request is done", and "a poll that
/// fails ... keeps the list in use". The configuration endpoint here is a
/// plain memcached holding the cluster config as the
/// `AmazonElastiCache:cluster` item (as engines before 1.4.14 do); each
/// node sits behind a proxy that counts its open connections and can hold
/// a request on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_keeps_staying_connections_drains_removed_ones_and_survives_failed_polls() {
    use common::wait::{PATIENCE, until_version, wait_for};

    let (a, b) = (Memcached::start(), Memcached::start());
    let (proxy_a, proxy_b) = (
        CountingProxy::start(a.addr()).await,
        CountingProxy::start(b.addr()).await,
    );
    let mut endpoint = Memcached::start();
    let publish = |version: u64, proxies: &[(&str, &CountingProxy)]| {
        let nodes: Vec<String> = proxies
            .iter()
            .map(|(host, proxy)| {
                let port = proxy.addr.rsplit(':').next().unwrap();
                format!("{host}|127.0.0.1|{port}")
            })
            .collect();
        let body = format!("{version}\n{}\n", nodes.join(" "));
        let set = format!(
            "set AmazonElastiCache:cluster 0 0 {}\r\n{body}\r\n",
            body.len()
        );
        assert_eq!(endpoint.raw(&set, "\r\n"), "STORED\r\n");
    };
    publish(
        1,
        &[
            ("node-a.cache.local", &proxy_a),
            ("node-b.cache.local", &proxy_b),
        ],
    );
    let options = MemcachedOptions {
        discovery: Some(endpoint.addr()),
        discovery_interval: Duration::from_millis(50),
        // The held request waits out a discovery poll: longer than the
        // harness's 2 s on a busy machine, if need be.
        timeout: PATIENCE,
        ..common::memcached_options(Vec::new())
    };
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    until_version(&store, 1).await;
    wait_for("both nodes' connections up", PATIENCE, || {
        std::future::ready(store.topology().nodes.iter().all(|node| node.live() == 2))
    })
    .await;
    let limiter = Arc::new(Limiter::builder(store.clone()).timeout(PATIENCE).build());
    let api = Arc::new(policy(&[(1_000_000, MINUTE, 1)]));
    let on_node = |wanted: &str| {
        (0..1000)
            .map(|index| format!("client-{index}"))
            .find(|key| {
                store
                    .node_name_of(&KeyDigest::of("api", key))
                    .is_some_and(|node| node.starts_with(wanted))
            })
            .unwrap()
    };
    let (key_a, key_b) = (on_node("node-a"), on_node("node-b"));
    let redials_of_a = || {
        store
            .topology()
            .nodes
            .iter()
            .find(|node| node.name.starts_with("node-a"))
            .map(|node| node.redials.clone())
    };
    let redials_before = redials_of_a();
    assert_eq!(proxy_a.open_connections(), 2);

    // A request to B is on the wire when B leaves the cluster.
    proxy_b.hold();
    let in_flight = {
        let (limiter, api, key_b) = (limiter.clone(), api.clone(), key_b.clone());
        tokio::spawn(async move { limiter.check(&key_b, &api, 1).await.unwrap() })
    };
    proxy_b.holding_a_request().await;
    publish(2, &[("node-a.cache.local", &proxy_a)]);
    until_version(&store, 2).await;
    proxy_b.release();
    // Had B's connection closed under it, the check would have fallen back.
    let answered = in_flight.await.unwrap();
    assert_eq!(
        answered.source,
        Source::Store,
        "the request in flight was answered by B"
    );
    wait_for(
        "B's connections closed after its last request",
        PATIENCE,
        || std::future::ready(proxy_b.open_connections() == 0),
    )
    .await;
    // A stayed: the same two connections, never redialled.
    assert_eq!(proxy_a.open_connections(), 2);
    assert_eq!(proxy_a.most_open_connections(), 2);
    assert_eq!(redials_of_a(), redials_before);
    assert_eq!(
        limiter.check(&key_a, &api, 1).await.unwrap().source,
        Source::Store
    );

    // The endpoint goes away: polls fail, the list in use stays.
    endpoint.kill();
    wait_for("a failed poll", PATIENCE, || {
        let failed = store
            .topology()
            .polls
            .iter()
            .any(|&(result, count)| result == "failed" && count > 0);
        std::future::ready(failed)
    })
    .await;
    let topology = store.topology();
    assert_eq!(topology.version, Some(2));
    assert_eq!(topology.nodes.len(), 1);
    assert_eq!(
        limiter.check(&key_a, &api, 1).await.unwrap().source,
        Source::Store
    );
    assert_eq!(
        limiter.check(&key_b, &api, 1).await.unwrap().source,
        Source::Store
    );
}
