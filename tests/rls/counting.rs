//! What a request counts, and what that costs: a refused request counts
//! under none of its descriptors and takes its additions back in one
//! exchange, `hits_addend` is the cost, concurrent calls admit exactly the
//! limit, and the metrics count per domain and rule.

use slidegate::AnyStore;
use slidegate::server;

use super::{
    CONFIG, Code, RateLimitDescriptor, TestRls, ask, codes, descriptor, memcached, memory, request,
};
use crate::common::{self, in_process};

/// slidegate decides a request's descriptors together: one that is over its
/// limit refuses the request, and then none of them is counted.
/// envoyproxy/ratelimit counts every descriptor of every request (rejected
/// ones included, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is set, and
/// even then a descriptor under its limit is counted when another refuses the
/// request), so there the `five` counter below would stand at 4, not 1.
#[tokio::test]
async fn a_refused_request_is_counted_by_no_descriptor() {
    for (name, store) in [("memory", memory()), ("memcached", memcached().await)] {
        let rls = TestRls::start(store, CONFIG).await;
        let mut client = rls.client().await;
        let both = || {
            request(
                "test",
                vec![descriptor(&[("five", "k")]), descriptor(&[("one", "k")])],
            )
        };
        assert_eq!(codes(&mut client, both()).await.0, Code::Ok);
        for _ in 0..3 {
            let response = ask(&mut client, both()).await;
            assert_eq!(
                response.overall_code(),
                Code::OverLimit,
                "{name}: {response:?} {:?}",
                rls.app.limiter().metrics()
            );
            assert_eq!(
                response.statuses[0].code(),
                Code::Ok,
                "five alone would pass"
            );
            assert_eq!(
                response.statuses[0].limit_remaining, 4,
                "and was not counted"
            );
        }
        // `five` was counted once: four more pass alone.
        let five = || request("test", vec![descriptor(&[("five", "k")])]);
        for _ in 0..4 {
            assert_eq!(codes(&mut client, five()).await.0, Code::Ok);
        }
        assert_eq!(codes(&mut client, five()).await.0, Code::OverLimit);
        // The HTTP face's "who is limited" and status page count HTTP
        // checks and forward-auth only, as the README says: these RLS
        // refusals are not listed.
        let http = in_process::serve_forever(server::serve, rls.app.clone()).await;
        let limited = common::http::get(http, "/v1/limited").await;
        assert_eq!(limited.status, 200, "{}", limited.body);
        assert_eq!(limited.json()["keys"], serde_json::json!([]), "{name}");
    }
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_zero_per_descriptor_only_checks() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mut heavy = request("test", vec![descriptor(&[("five", "h")])]);
    heavy.hits_addend = 3;
    let response = ask(&mut client, heavy.clone()).await;
    assert_eq!(response.statuses[0].limit_remaining, 2);
    assert_eq!(
        codes(&mut client, heavy).await.0,
        Code::OverLimit,
        "3 + 3 > 5"
    );

    // Per descriptor, hits_addend overrides the request's; 0 counts nothing.
    let mut per_descriptor = descriptor(&[("five", "h")]);
    per_descriptor.hits_addend = Some(0);
    let mut check_only = request("test", vec![per_descriptor.clone()]);
    check_only.hits_addend = 5;
    for _ in 0..3 {
        let response = ask(&mut client, check_only.clone()).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 2);
    }
    per_descriptor.hits_addend = Some(2);
    let response = ask(&mut client, request("test", vec![per_descriptor])).await;
    assert_eq!(response.statuses[0].limit_remaining, 0);
}

/// 100 concurrent calls on one descriptor with a limit of 5, from 4 HTTP/2
/// connections, on a real memcached: exactly 5 pass. Then the near-cache
/// answers the hot key without the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_admit_exactly_the_limit() {
    let rls = TestRls::start(memcached().await, CONFIG).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rls.client().await);
    }
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..100 {
        let mut client = clients[index % 4].clone();
        calls.spawn(async move {
            let request = request("test", vec![descriptor(&[("five", "hot")])]);
            client
                .should_rate_limit(request)
                .await
                .map(|r| r.into_inner().overall_code())
        });
    }
    let mut ok = 0;
    while let Some(result) = calls.join_next().await {
        if result.unwrap().unwrap() == Code::Ok {
            ok += 1;
        }
    }
    assert_eq!(ok, 5);

    let before = rls.app.limiter().metrics();
    for _ in 0..10 {
        let response = ask(
            &mut clients[0],
            request("test", vec![descriptor(&[("five", "hot")])]),
        )
        .await;
        assert_eq!(response.overall_code(), Code::OverLimit);
    }
    let after = rls.app.limiter().metrics();
    assert_eq!(
        after.store_calls, before.store_calls,
        "hot rejects cost no round trip"
    );
    assert_eq!(after.near_cache_hits() - before.near_cache_hits(), 10);
}

#[tokio::test]
async fn metrics_count_per_domain_and_rule() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    for value in ["a", "b", "c"] {
        ask(
            &mut client,
            request("test", vec![descriptor(&[("one", value)])]),
        )
        .await;
        ask(
            &mut client,
            request("test", vec![descriptor(&[("one", value)])]),
        )
        .await;
    }
    let addr = in_process::serve_forever(server::serve, rls.app.clone()).await;
    let metrics = common::metrics::scrape(addr).await;
    for (series, value) in [
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="total_hits"}"#,
            6.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="within_limit"}"#,
            3.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="over_limit"}"#,
            3.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="vip",result="total_hits"}"#,
            0.0,
        ),
        (r#"slidegate_rls_requests_total{outcome="answered"}"#, 6.0),
    ] {
        assert_eq!(metrics.value(series), value, "{series}");
    }
    assert!(
        metrics
            .series()
            .all(|(series, _)| !series.contains("\"a\"")),
        "request values never become labels"
    );
}

/// A refused request of many descriptors takes back all their additions
/// in one pipelined exchange (one round trip through a counting proxy on a
/// single connection), not one round trip per descriptor, and leaves every
/// counter as it was.
#[tokio::test]
async fn a_refused_request_takes_back_all_its_additions_in_one_exchange() {
    let (proxy, _rls, mut client) = round_trips_counted().await;

    let mut descriptors: Vec<RateLimitDescriptor> = (0..8)
        .map(|index| descriptor(&[("five", &format!("fresh-{index}"))]))
        .collect();
    descriptors.push(used());
    let before = proxy.round_trips();
    let (overall, statuses) = codes(&mut client, request("test", descriptors)).await;
    let round_trips = proxy.round_trips() - before;
    println!("refused request of 9 descriptors: {round_trips} round trips");
    assert_eq!(overall, Code::OverLimit);
    assert_eq!(statuses[..8], [Code::Ok; 8]);
    assert_eq!(round_trips, 2, "one to check, one to take back");

    // Nothing stayed counted: each fresh key still has its five.
    for index in [0, 7] {
        let fresh = || {
            request(
                "test",
                vec![descriptor(&[("five", &format!("fresh-{index}"))])],
            )
        };
        for _ in 0..5 {
            assert_eq!(codes(&mut client, fresh()).await.0, Code::Ok);
        }
        assert_eq!(codes(&mut client, fresh()).await.0, Code::OverLimit);
    }
}

const QUOTA_MODE: &str = r#"
domain: q
descriptors:
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

/// A request its quota-mode descriptors refuse (all of them over, as
/// envoyproxy/ratelimit reads them) is counted by none of its descriptors,
/// as one a binding descriptor refuses. They used to be decided last, after
/// the binding and shadow descriptors had counted the request.
#[tokio::test]
async fn a_request_its_quota_descriptors_refuse_is_counted_by_none() {
    for (name, store) in [("memory", memory()), ("memcached", memcached().await)] {
        let rls = TestRls::start(store, QUOTA_MODE).await;
        let mut client = rls.client().await;
        let all = || {
            request(
                "q",
                vec![
                    descriptor(&[("five", "k")]),
                    descriptor(&[("shadow", "k")]),
                    descriptor(&[("quota", "k")]),
                ],
            )
        };
        assert_eq!(codes(&mut client, all()).await.0, Code::Ok, "{name}");
        for _ in 0..3 {
            let response = ask(&mut client, all()).await;
            assert_eq!(
                response.overall_code(),
                Code::OverLimit,
                "{name}: {response:?}"
            );
            assert_eq!(
                response.statuses[0].limit_remaining, 4,
                "{name}: five, uncounted"
            );
            assert_eq!(
                response.statuses[1].limit_remaining, 4,
                "{name}: shadow, uncounted"
            );
        }
        // Counted once, by the admitted request: four more pass alone.
        let five = || request("q", vec![descriptor(&[("five", "k")])]);
        for _ in 0..4 {
            assert_eq!(codes(&mut client, five()).await.0, Code::Ok, "{name}");
        }
        assert_eq!(
            codes(&mut client, five()).await.0,
            Code::OverLimit,
            "{name}"
        );
    }
}

/// A request refused by a read-only descriptor (`hits_addend: 0`, over its
/// limit) reads its other descriptors in one pipelined exchange, not one
/// round trip each: so it is answered within the timeout however many it
/// names. They used to be read one after another.
#[tokio::test]
async fn a_refused_request_reads_its_other_descriptors_together() {
    let (proxy, _rls, mut client) = round_trips_counted().await;
    let mut check_only = used();
    check_only.hits_addend = Some(0);
    let mut descriptors = vec![check_only];
    descriptors.extend((0..8).map(|index| descriptor(&[("five", &format!("read-{index}"))])));
    let before = proxy.round_trips();
    let (overall, statuses) = codes(&mut client, request("test", descriptors)).await;
    let round_trips = proxy.round_trips() - before;
    println!("request of 9 descriptors refused by a read-only one: {round_trips} round trips");
    assert_eq!(overall, Code::OverLimit);
    assert_eq!(statuses[1..], [Code::Ok; 8]);
    assert!(
        round_trips <= 2,
        "{round_trips} round trips: one to read the first, one the rest"
    );
}

/// An RLS on memcached through a counting proxy on one connection, and its
/// client; `one/used` is at its limit of 1.
async fn round_trips_counted() -> (
    common::proxy::CountingProxy,
    TestRls,
    super::RateLimitServiceClient<tonic::transport::Channel>,
) {
    let proxy = common::proxy::CountingProxy::start(common::shared_memcached().addr()).await;
    let options = slidegate::MemcachedOptions {
        connections: 1,
        ..common::memcached_options(vec![proxy.addr.clone()])
    };
    let store = slidegate::MemcachedStore::connect(&options).await.unwrap();
    let rls = TestRls::start(AnyStore::Memcached(store), CONFIG).await;
    let mut client = rls.client().await;
    assert_eq!(
        codes(&mut client, request("test", vec![used()])).await.0,
        Code::Ok
    );
    (proxy, rls, client)
}

/// A descriptor of the 1-a-minute rule.
fn used() -> RateLimitDescriptor {
    descriptor(&[("one", "used")])
}
