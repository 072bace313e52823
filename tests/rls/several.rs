//! Requests of several descriptors under concurrency. Each descriptor's
//! counter is added to atomically, but not together with the others', so a
//! request refused by one descriptor holds an addition in the others until
//! it takes it back, and concurrent requests read it meanwhile: a burst may
//! admit fewer than its smallest limit (erring towards refusing, as the
//! README says), never more. A request that its take-back shows was refused
//! only by such passing additions is tried once more, which mends most of
//! that; the tries still race each other, so it is not promised. What is,
//! whatever the interleaving: no limit passed, nothing of a refused request
//! left counted, and once a burst is over a descriptor alone is refused
//! only on its own counts.
//!
//! `five` is 5 a minute, `client` 3 and `one` 1 (see `CONFIG`).

use std::time::Duration;

use slidegate::{AnyStore, MemcachedOptions, MemcachedStore};

use super::{CONFIG, Code, RateLimitRequest, TestRls, codes, descriptor, request};
use crate::common;
use crate::common::proxy::CountingProxy;

/// A request of both descriptors, for the keys of `value`.
fn both(value: &str) -> RateLimitRequest {
    request(
        "test",
        vec![
            descriptor(&[("five", value)]),
            descriptor(&[("client", value)]),
        ],
    )
}

fn alone(rule: &str, value: &str) -> RateLimitRequest {
    request("test", vec![descriptor(&[(rule, value)])])
}

/// Send `requests`, all at once, to the instances in turn; how many were
/// admitted.
async fn burst(instances: &[&TestRls], requests: Vec<RateLimitRequest>) -> usize {
    let mut clients = Vec::new();
    for instance in instances {
        clients.push(instance.client().await);
    }
    let mut calls = tokio::task::JoinSet::new();
    for (index, request) in requests.into_iter().enumerate() {
        let mut client = clients[index % clients.len()].clone();
        calls.spawn(async move { client.should_rate_limit(request).await });
    }
    let mut admitted = 0;
    while let Some(answer) = calls.join_next().await {
        let answer = answer.unwrap().expect("answered by the store");
        admitted += usize::from(answer.into_inner().overall_code() == Code::Ok);
    }
    admitted
}

/// How many requests of `rule` alone are admitted, asked one after
/// another, before the first refusal (at most `bound` + 1 asked).
async fn admitted_alone(rls: &TestRls, rule: &str, value: &str, bound: usize) -> usize {
    let mut client = rls.client().await;
    for admitted in 0..=bound {
        if codes(&mut client, alone(rule, value)).await.0 != Code::Ok {
            return admitted;
        }
    }
    bound + 1
}

/// A patient RLS on memcached through a proxy, on one connection: its
/// requests reach memcached in the order they are sent, and the proxy can
/// hold back the replies.
async fn behind_a_proxy() -> (CountingProxy, TestRls) {
    let namespace = common::unique_namespace();
    behind_a_proxy_in(&namespace).await
}

/// Two such instances, counting in one namespace.
async fn behind_proxies() -> [(CountingProxy, TestRls); 2] {
    let namespace = common::unique_namespace();
    [
        behind_a_proxy_in(&namespace).await,
        behind_a_proxy_in(&namespace).await,
    ]
}

async fn behind_a_proxy_in(namespace: &str) -> (CountingProxy, TestRls) {
    let proxy = CountingProxy::start(common::shared_memcached().addr()).await;
    let options = MemcachedOptions {
        connections: 1,
        namespace: namespace.to_owned(),
        ..common::memcached_options(vec![proxy.addr.clone()])
    };
    let store = MemcachedStore::connect(&options).await.unwrap();
    let rls = TestRls::start_patient(AnyStore::Memcached(store), CONFIG).await;
    (proxy, rls)
}

/// Ten requests of both descriptors, every memcached reply held back long
/// enough that all their additions land before any is answered: at least
/// five of them read `five` over its limit (their own addition on top of
/// five others), though it never holds more than three admitted. After the
/// burst, `five` alone has exactly its room left. (The burst's refusals
/// used to be remembered, `five` at 5 of 5, under the key a request of
/// `five` alone reads: it was then refused from the near-cache while the
/// store held 3, for as long as the entry was trusted.)
#[tokio::test]
async fn a_descriptor_alone_is_not_refused_by_what_a_burst_of_several_remembered() {
    let (proxy, rls) = behind_a_proxy().await;

    proxy.delay_replies(400);
    let admitted = burst(&[&rls], (0..10).map(|_| both("burst")).collect()).await;
    proxy.delay_replies(0);
    assert!(admitted <= 3, "{admitted} admitted, past client's 3");

    let five = admitted_alone(&rls, "five", "burst", 5).await;
    let client = admitted_alone(&rls, "client", "burst", 3).await;
    println!("burst of 10 admitted {admitted}; then alone: five {five}, client {client}");
    assert_eq!(
        (five, client),
        (5 - admitted, 3 - admitted),
        "alone, each descriptor has the room its own counts leave"
    );
}

/// A request of `five` alone, sent while five requests of `five` and `one`
/// (`one` already full) hold their additions in `five`, from another
/// instance whose memcached replies are held back: it reads `five` at 5 of
/// 5 and is refused, though `five` has admitted nothing. Its own replies
/// are held back longer, so its take-back comes after theirs and finds
/// `five` empty: it is tried once more, and admitted. (It used to stay
/// refused: with room, refused by additions already taken back.)
#[tokio::test]
async fn a_request_refused_only_by_additions_since_taken_back_is_tried_again() {
    let [(burst_proxy, burst_rls), (alone_proxy, alone_rls)] = behind_proxies().await;
    let mut burst_client = burst_rls.client().await;
    // `one` is full, and not remembered: its request was admitted.
    assert_eq!(
        codes(&mut burst_client, alone("one", "k")).await.0,
        Code::Ok
    );

    burst_proxy.delay_replies(600);
    alone_proxy.delay_replies(1_200);
    let refused_by_one = request(
        "test",
        vec![descriptor(&[("five", "k")]), descriptor(&[("one", "k")])],
    );
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let (mut client, request) = (burst_client.clone(), refused_by_one.clone());
        burst.spawn(async move { codes(&mut client, request).await.0 });
    }
    // Their additions go out at once; the replies are what is held back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut alone_client = alone_rls.client().await;
    let five_alone = codes(&mut alone_client, alone("five", "k")).await.0;
    while let Some(code) = burst.join_next().await {
        assert_eq!(code.unwrap(), Code::OverLimit, "one is full");
    }
    burst_proxy.delay_replies(0);
    alone_proxy.delay_replies(0);
    assert_eq!(five_alone, Code::Ok, "five had room: 0 of 5 admitted");
    let more = admitted_alone(&burst_rls, "five", "k", 5).await;
    assert_eq!(more, 4, "five holds exactly the one it admitted");
}

/// Rounds of 120 concurrent requests of both descriptors over two
/// instances, as Envoy's fleet would send them. In every round, whatever
/// the interleaving: no more than the smallest limit is admitted, and once
/// the round is over each descriptor has exactly its room left, asked
/// alone on either instance (nothing of the refused requests stays
/// counted, and nothing they saw is remembered against it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_several_descriptors_never_pass_a_limit_and_leave_only_what_they_admitted() {
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = MemcachedStore::connect(&options).await.unwrap();
        instances.push(TestRls::start_patient(AnyStore::Memcached(store), CONFIG).await);
    }
    let (first, second) = (&instances[0], &instances[1]);
    const ROUNDS: usize = 12;
    let mut admitted_by_round = Vec::new();
    let mut wrong_rooms = Vec::new();
    for round in 0..ROUNDS {
        let value = format!("round-{round}");
        let requests = (0..120).map(|_| both(&value)).collect();
        let admitted =
            tokio::time::timeout(Duration::from_secs(60), burst(&[first, second], requests))
                .await
                .expect("a round is answered");
        assert!(
            admitted <= 3,
            "round {round}: {admitted} admitted, past client's 3"
        );
        admitted_by_round.push(admitted);
        // Alone, `five` on one instance and `client` on the other.
        let five = admitted_alone(first, "five", &value, 5).await;
        let client = admitted_alone(second, "client", &value, 3).await;
        if (five, client) != (5 - admitted, 3 - admitted) {
            wrong_rooms.push((round, admitted, five, client));
        }
    }
    let short = admitted_by_round
        .iter()
        .filter(|&&admitted| admitted < 3)
        .count();
    println!(
        "admitted by round: {admitted_by_round:?} ({short} of {ROUNDS} under 3); \
         rounds whose room alone was wrong (round, admitted, five alone, client alone): {wrong_rooms:?}"
    );
    assert_eq!(
        wrong_rooms,
        [],
        "alone, each has the room its own counts leave"
    );
}
