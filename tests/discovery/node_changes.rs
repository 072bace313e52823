//! Nodes that join, leave and move: only their keys change nodes and no
//! request fails under load, a replaced node is followed to its new
//! address, and a removed node takes back what it owes before it closes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use slidegate::store::KeyDigest;
use slidegate::{FailureMode, Limiter, ManualClock, MemcachedStore, Source, Store};
use tokio::net::TcpListener;

use super::{Endpoint, POLL, check_all, node_of, options, roomy, wait_for_version};
use crate::common;
use crate::common::Memcached;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_added_and_removed_move_only_their_keys_and_no_request_fails() {
    let nodes: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let endpoint = Endpoint::start(None).await;
    endpoint.serve(1, &[&nodes[0], &nodes[1]]);
    let store = Arc::new(
        MemcachedStore::connect(&options(&endpoint.addr))
            .await
            .unwrap(),
    );
    wait_for_version(&store, 1).await;
    assert_eq!(store.topology().nodes.len(), 2);
    store.ping().await.unwrap();

    let clock = ManualClock::new(common::today_ms() + 10_000);
    let limiter = Arc::new(
        common::patient_limiter(store.clone())
            .clock(clock.clone())
            .failure_mode(FailureMode::Deny)
            .build(),
    );
    let policy = roomy();
    let keys: Vec<String> = (0..600).map(|index| format!("client-{index}")).collect();
    assert!(
        check_all(&limiter, &policy, &keys)
            .await
            .iter()
            .all(|&count| count == 1)
    );
    let before: Vec<String> = keys.iter().map(|key| node_of(&store, key)).collect();

    // Load runs through the change: not one request may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (limiter, policy, stop) = (limiter.clone(), policy.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut answered, mut failed) = (0u64, 0u64);
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                let key = format!("load-{}", answered % 97);
                match limiter.check(&key, &policy, 1).await {
                    Ok(decision) if decision.source == Source::Store => answered += 1,
                    _ => failed += 1,
                }
            }
            (answered, failed)
        })
    };

    // A third node: only the keys that now pick it move, about a third.
    endpoint.serve(2, &[&nodes[0], &nodes[1], &nodes[2]]);
    wait_for_version(&store, 2).await;
    let added = format!("node-{}.cache.local:{}", nodes[2].port, nodes[2].port);
    let after: Vec<String> = keys.iter().map(|key| node_of(&store, key)).collect();
    let moved: Vec<usize> = (0..keys.len()).filter(|&i| before[i] != after[i]).collect();
    assert!(
        moved.iter().all(|&i| after[i] == added),
        "a key moved between two old nodes"
    );
    let share = moved.len() as f64 / keys.len() as f64;
    eprintln!(
        "node added: {} of {} keys moved ({:.1} %)",
        moved.len(),
        keys.len(),
        share * 100.0
    );
    assert!((0.22..=0.45).contains(&share), "share moved {share}");
    // Keys that stayed keep their counts; moved keys start from zero on
    // their new node (the documented undercount).
    let counts = check_all(&limiter, &policy, &keys).await;
    for (index, count) in counts.iter().enumerate() {
        let expected = if moved.contains(&index) { 1 } else { 2 };
        assert_eq!(*count, expected, "{}", keys[index]);
    }

    // The first node leaves: its keys move, the others stay.
    let removed = format!("node-{}.cache.local:{}", nodes[0].port, nodes[0].port);
    endpoint.serve(3, &[&nodes[1], &nodes[2]]);
    wait_for_version(&store, 3).await;
    let last: Vec<String> = keys.iter().map(|key| node_of(&store, key)).collect();
    for index in 0..keys.len() {
        if after[index] != removed {
            assert_eq!(last[index], after[index], "{} moved", keys[index]);
        } else {
            assert_ne!(last[index], removed);
        }
    }
    assert_eq!(store.topology().nodes.len(), 2);

    stop.store(true, Ordering::Relaxed);
    let (answered, failed) = load.await.unwrap();
    eprintln!(
        "under load through two node changes: {answered} answered by the store, {failed} failed"
    );
    assert!(answered > 0);
    assert_eq!(failed, 0);
}

/// ElastiCache replaces a node: same host name (so the same share of keys),
/// a new IP, a higher config version. Its keys are decided by the store
/// again within a discovery interval or so, at the new address; the other
/// node keeps its connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_node_is_followed_to_its_new_address() {
    let mut old = Memcached::start();
    let other = Memcached::start();
    let endpoint = Endpoint::start(None).await;
    endpoint.serve(1, &[&old, &other]);
    let store = Arc::new(
        MemcachedStore::connect(&options(&endpoint.addr))
            .await
            .unwrap(),
    );
    wait_for_version(&store, 1).await;
    let limiter = Limiter::builder(store.clone())
        .timeout(Duration::from_secs(2))
        .build();
    let policy = roomy();
    let replaced_name = format!("node-{}.cache.local:{}", old.port, old.port);
    let key = (0..1_000)
        .map(|index| format!("client-{index}"))
        .find(|key| node_of(&store, key) == replaced_name)
        .expect("a key on the node to be replaced");
    assert_eq!(
        limiter.check(&key, &policy, 1).await.unwrap().source,
        Source::Store
    );

    // The replacement answers on another loopback address, same port: the
    // same `host:port` name, a new IP.
    old.kill();
    let replacement = Memcached::start();
    let new_ip = "127.0.0.2";
    let forwarder = TcpListener::bind((new_ip, old.port)).await.unwrap();
    let upstream = replacement.addr();
    let forwarding = tokio::spawn(async move {
        while let Ok((mut client, _)) = forwarder.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    let patient_fallback = limiter.check(&key, &policy, 1).await.unwrap();
    assert_eq!(
        patient_fallback.source,
        Source::Fallback,
        "the old address is dead"
    );

    {
        let mut served = endpoint.served.lock().unwrap();
        served.version = 2;
        served.nodes[0] = format!("node-{0}.cache.local|{new_ip}|{0}", old.port);
    }
    let replaced_at = Instant::now();
    common::wait::until(
        "the replaced node to be followed",
        Duration::from_secs(10),
        || async {
            let decision = limiter.check(&key, &policy, 1).await.unwrap();
            (decision.source == Source::Store).then_some(())
        },
    )
    .await;
    let followed_in = replaced_at.elapsed();
    let topology = store.topology();
    println!(
        "a replaced node decided its keys again {followed_in:?} after the new config was served \
         (discovery interval {POLL:?}): {topology:?}"
    );
    assert_eq!(topology.version, Some(2));
    let replaced = &topology.nodes[0];
    assert_eq!(
        replaced.name, replaced_name,
        "the same name keeps the same keys"
    );
    assert_eq!(replaced.addr, format!("{new_ip}:{}", old.port));
    assert!(replaced.redials.contains(&("moved", 2)), "{replaced:?}");
    assert_eq!(node_of(&store, &key), replaced_name);
    assert!(
        topology.nodes[1]
            .redials
            .iter()
            .all(|&(_, count)| count == 0),
        "the other node kept its connections: {topology:?}"
    );
    forwarding.abort();
}

/// A node removed while it still owes a take-back: a check whose caller
/// gave up after its addition was written is taken back when the reply
/// comes, and the node's connection must live that long, though discovery
/// dropped the node meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_node_takes_back_what_it_owes_before_it_closes() {
    let leaving = Memcached::start();
    let staying = Memcached::start();
    let proxy = common::proxy::CountingProxy::start(leaving.addr()).await;
    let proxy_port = proxy.addr.rsplit(':').next().unwrap().to_owned();
    let endpoint = Endpoint::start(None).await;
    {
        let mut served = endpoint.served.lock().unwrap();
        served.version = 1;
        served.nodes = vec![
            format!("leaving.cache.local|127.0.0.1|{proxy_port}"),
            format!("node-{0}.cache.local|127.0.0.1|{0}", staying.port),
        ];
    }
    let store = Arc::new(
        MemcachedStore::connect(&options(&endpoint.addr))
            .await
            .unwrap(),
    );
    wait_for_version(&store, 1).await;
    let now = common::today_ms() + 1_000;
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(now))
        .timeout(Duration::from_millis(200))
        .failure_mode(FailureMode::Allow)
        .build();
    let policy = roomy();
    let key = (0..1_000)
        .map(|index| format!("client-{index}"))
        .find(|key| node_of(&store, key) == format!("leaving.cache.local:{proxy_port}"))
        .expect("a key on the node to be removed");
    let window = policy.limits()[0].window();
    let counter = store.wire_key(&slidegate::store::CounterKey {
        digest: KeyDigest::of("disc", &key),
        window,
        bucket: window.bucket_of(now),
    });

    // Written, and given up on before its reply: the reply brings its
    // take-back.
    proxy.delay_replies(1_000);
    let decision = limiter.check(&key, &policy, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback, "{decision:?}");
    // The node leaves before the reply comes.
    {
        let mut served = endpoint.served.lock().unwrap();
        served.version = 2;
        served.nodes.remove(0);
    }
    wait_for_version(&store, 2).await;

    let counted = || {
        let answer = leaving.raw(&format!("get {counter}\r\n"), "END\r\n");
        answer
            .lines()
            .nth(1)
            .filter(|_| answer.starts_with("VALUE"))
            .map(|value| value.trim().to_owned())
    };
    common::wait::wait_for("the addition taken back", Duration::from_secs(10), || {
        std::future::ready(counted().as_deref() == Some("0"))
    })
    .await;
}
