//! The near-cache and the store: a reset made through one instance reaches
//! a second one through its near-cache, and a hot key's refusals cost one
//! store read per revalidation interval.

use std::time::{Duration, Instant};

use slidegate::{Limit, Limiter, ManualClock, MemcachedStore, Policy, Source};

use super::{Service, check, on_memcached};
use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_a_second_instance_through_its_near_cache() {
    let namespace = common::unique_namespace();
    let text = on_memcached(
        &namespace,
        "[near_cache]\nrevalidate_ms = 1000\n\
         [policies.api]\nlimits = [{ limit = 3, window = \"1h\" }]\n",
    );
    let first = Service::start(&text).await;
    let second = Service::start(&text).await;
    for _ in 0..3 {
        assert_eq!(first.post("/v1/check", check("k", "api")).await.status, 200);
    }
    // The second instance is refused by the store, then by its near-cache.
    let refused = second.post("/v1/check", check("k", "api")).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let hot = second.post("/v1/check", check("k", "api")).await;
    assert_eq!(hot.json()["source"], "near_cache", "{}", hot.body);

    let reset = first.post("/v1/reset", check("k", "api")).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.json()["reset"], true);
    assert_eq!(reset.json()["counters_removed"], 1);
    let reset_at = Instant::now();

    // Bounded poll: the second instance admits once it reads the store again.
    let mut admitted = None;
    while reset_at.elapsed() < Duration::from_secs(15) {
        let answer = second.post("/v1/check", check("k", "api")).await;
        if answer.status == 200 {
            admitted = Some((reset_at.elapsed(), answer));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (took, answer) = admitted.expect("the second instance never admitted after the reset");
    assert_eq!(answer.json()["source"], "store");
    assert_eq!(answer.json()["remaining"], 2, "counted from zero");
    println!(
        "FIGURE reset reached the second instance in {} ms (near_cache.revalidate_ms = 1000)",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");

    // Bad input names its field.
    let unknown = first.post("/v1/reset", check("k", "nope")).await;
    assert_eq!(unknown.status, 400);
    assert!(unknown.error().starts_with("policy: "), "{}", unknown.body);
    let no_key = first
        .post("/v1/reset", serde_json::json!({ "policy": "api" }))
        .await;
    assert!(no_key.error().starts_with("key: "), "{}", no_key.body);
    // The body of a check: a cost a check refuses is refused here too.
    let no_cost = first
        .post(
            "/v1/reset",
            serde_json::json!({ "key": "k", "policy": "api", "cost": 0 }),
        )
        .await;
    assert_eq!(no_cost.status, 400, "{}", no_cost.body);
    assert!(no_cost.error().starts_with("cost: "), "{}", no_cost.body);
    let inline = first
        .post(
            "/v1/reset",
            serde_json::json!({ "key": "k", "limits": [{ "limit": 1, "window": "1m" }] }),
        )
        .await;
    assert_eq!(inline.json()["policy"], "inline", "{}", inline.body);
}

#[tokio::test]
async fn hot_rejects_cost_one_store_read_per_key_per_interval() {
    let clock = ManualClock::new(common::today_ms() + 1_000);
    let store = MemcachedStore::connect(&common::memcached_options(vec![
        common::shared_memcached().addr(),
    ]))
    .await
    .unwrap();
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .near_cache_revalidate(Duration::from_millis(1000))
        .build();
    let policy = Policy::new(
        "api",
        vec![Limit::per(2, Duration::from_secs(3600)).unwrap()],
    )
    .unwrap();
    for _ in 0..2 {
        assert!(limiter.check("hot", &policy, 1).await.unwrap().allowed);
    }
    assert!(!limiter.check("hot", &policy, 1).await.unwrap().allowed);
    let before = limiter.metrics().store_calls;
    // 10 seconds of a hot key refused 200 times a second.
    let (seconds, per_second) = (10u64, 200u64);
    let mut from_store = 0;
    for _ in 0..seconds * per_second {
        clock.advance(Duration::from_millis(1000 / per_second));
        let decision = limiter.check("hot", &policy, 1).await.unwrap();
        assert!(!decision.allowed);
        from_store += u64::from(decision.source == Source::Store);
    }
    let calls = limiter.metrics().store_calls - before;
    println!(
        "FIGURE hot rejects: {calls} store calls for {} refusals over {seconds} s: {:.1} store reads per hot key per second",
        seconds * per_second,
        calls as f64 / seconds as f64
    );
    // One read per interval: not none (a reset must be seen), not more.
    assert_eq!(calls, seconds, "one store read per second");
    assert_eq!(from_store, seconds);
}
