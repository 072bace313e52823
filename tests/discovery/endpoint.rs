//! What the configuration endpoint does to the node list: down at start, it
//! is waited for; malformed, older and empty configs keep the list; engines
//! before 1.4.14 are asked with `get`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slidegate::{FailureMode, Limiter, MemcachedStore, Source, Store};
use tokio::net::TcpListener;

use super::{Endpoint, options, roomy, wait_for_version};
use crate::common;
use crate::common::Memcached;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_down_at_start_is_waited_for() {
    let node = Memcached::start();
    // The endpoint's port is held, so no other test can take it, but
    // nobody answers on it yet: polls time out.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut options = options(&addr);
    options.timeout = Duration::from_millis(200);
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let error = store.ping().await.unwrap_err();
    assert!(
        error.to_string().contains("no Memcached node known yet"),
        "{error}"
    );
    let limiter = common::patient_limiter(store.clone())
        .failure_mode(FailureMode::Deny)
        .build();
    let policy = roomy();
    assert!(limiter.check("k", &policy, 1).await.is_err());
    let allowing = Limiter::builder(store.clone()).build();
    let decision = allowing.check("k", &policy, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback);

    let deadline = Instant::now() + Duration::from_secs(10);
    while !store
        .topology()
        .polls
        .iter()
        .any(|&(result, count)| result == "failed" && count > 0)
    {
        assert!(Instant::now() < deadline, "no poll failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let endpoint = Endpoint::start(Some(listener)).await;
    endpoint.serve(7, &[&node]);
    wait_for_version(&store, 7).await;
    store.ping().await.unwrap();
    let decision = limiter.check("k", &policy, 1).await.unwrap();
    assert_eq!(decision.source, Source::Store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_older_and_empty_configs_keep_the_node_list() {
    let nodes: Vec<Memcached> = (0..2).map(|_| Memcached::start()).collect();
    let endpoint = Endpoint::start(None).await;
    endpoint.serve(5, &[&nodes[0]]);
    let store = MemcachedStore::connect(&options(&endpoint.addr))
        .await
        .unwrap();
    wait_for_version(&store, 5).await;
    let kept = store.topology().nodes;

    endpoint.served.lock().unwrap().malformed = true;
    endpoint.polled(2).await;
    endpoint.serve(4, &[&nodes[0], &nodes[1]]);
    endpoint.polled(2).await;
    endpoint.serve(6, &[]);
    endpoint.polled(2).await;
    let topology = store.topology();
    assert_eq!(topology.version, Some(5));
    assert_eq!(
        topology
            .nodes
            .iter()
            .map(|node| &node.name)
            .collect::<Vec<_>>(),
        kept.iter().map(|node| &node.name).collect::<Vec<_>>()
    );
    let count = |wanted: &str| {
        topology
            .polls
            .iter()
            .find(|(result, _)| *result == wanted)
            .map_or(0, |(_, count)| *count)
    };
    assert!(count("malformed") >= 1, "{topology:?}");
    assert!(count("ignored") >= 2, "{topology:?}");
    store.ping().await.unwrap();
}

/// One `ERROR` to `config get cluster` (a proxy, an engine mid-upgrade)
/// makes the client try the legacy `get`; when that is refused too, the
/// next poll asks `config get` again, rather than staying on the legacy
/// command for good and never following the cluster again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_error_to_config_get_does_not_leave_discovery_on_the_legacy_command() {
    let (first, second) = (Memcached::start(), Memcached::start());
    let endpoint = Endpoint::start(None).await;
    endpoint.serve(3, &[&first]);
    let store = MemcachedStore::connect(&options(&endpoint.addr))
        .await
        .unwrap();
    wait_for_version(&store, 3).await;
    {
        let mut served = endpoint.served.lock().unwrap();
        served.modern_only = true;
        served.config_get_errors = 1;
    }
    endpoint.polled(3).await;
    endpoint.serve(4, &[&first, &second]);
    wait_for_version(&store, 4).await;
    store.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_before_1_4_14_are_asked_with_get() {
    let node = Memcached::start();
    let endpoint = Endpoint::start(None).await;
    endpoint.serve(3, &[&node]);
    endpoint.served.lock().unwrap().legacy_only = true;
    let store = MemcachedStore::connect(&options(&endpoint.addr))
        .await
        .unwrap();
    wait_for_version(&store, 3).await;
    store.ping().await.unwrap();
}
