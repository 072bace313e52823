//! A check whose bucket ends while it is on the wire, held there by a proxy
//! while another instance checks at the boundary: it is decided again in
//! the bucket it finished in.

use std::sync::Arc;
use std::time::Duration;

use slidegate::{Item, Limiter, ManualClock, MemcachedOptions, MemcachedStore};

use super::policy;
use crate::common;
use crate::common::Memcached;
use crate::common::proxy::CountingProxy;

/// A check whose clock read falls in one bucket and whose increment lands
/// after another instance, already in the next bucket, has read that bucket
/// as its older one: the other instance decided without it. Admitting it
/// would let the window hold more than the formula allows at the other's
/// instant, so it must be decided again in the bucket it finished in. The
/// proxy holds the first instance's request on the wire while the second
/// checks, exactly at the boundary.
#[tokio::test]
async fn a_check_that_crosses_a_bucket_boundary_in_flight_is_decided_again() {
    for together in [false, true] {
        let memcached = Memcached::start();
        let proxy = CountingProxy::start(memcached.addr()).await;
        let boundary = common::today_ms() + 30_000;
        let clock = ManualClock::new(boundary - 1);
        // Two instances on the same counters (one namespace), one of them
        // through the proxy.
        let through_proxy = common::memcached_options(vec![proxy.addr.clone()]);
        let direct_to_memcached = MemcachedOptions {
            servers: vec![memcached.addr()],
            ..through_proxy.clone()
        };
        let slow = Arc::new(
            Limiter::builder(MemcachedStore::connect(&through_proxy).await.unwrap())
                .clock(clock.clone())
                .timeout(Duration::from_secs(5))
                .build(),
        );
        let direct =
            common::patient_limiter(MemcachedStore::connect(&direct_to_memcached).await.unwrap())
                .clock(clock.clone())
                .build();
        let api = Arc::new(policy(&[(2, 1_000, 1)]));

        proxy.hold();
        let in_flight = {
            let (slow, api) = (slow.clone(), api.clone());
            tokio::spawn(async move {
                if together {
                    let item = Item {
                        key: "k",
                        policy: &api,
                        cost: 2,
                    };
                    slow.check_all(&[item]).await.unwrap().remove(0)
                } else {
                    slow.check("k", &api, 2).await.unwrap()
                }
            })
        };
        // The slow check has read `boundary - 1` and is on the wire.
        proxy.holding_a_request().await;
        clock.set(boundary);
        let on_time = direct.check("k", &api, 2).await.unwrap();
        assert!(on_time.allowed, "the bucket before was empty when read");
        proxy.release();
        let late = in_flight.await.unwrap();

        assert!(
            !late.allowed,
            "check_all: {together}: both admitted, but at {boundary} the formula counts \
             the late one in the older bucket: 2 * 999/1000 + 2 > 2"
        );
        assert_eq!(
            late.decided_at_ms, boundary,
            "decided again after the boundary"
        );
        // Through the proxy: the check, the rollback of its crossing, the
        // check again, and the rollback of its rejection.
        assert_eq!(proxy.round_trips(), 4, "check_all: {together}");
        // Its increment of the older bucket was taken back: what the window
        // holds now is the on-time check alone.
        let now = direct.peek("k", &api, 1).await.unwrap();
        assert_eq!(
            now.limits[0].estimate.as_f64(),
            2.0,
            "check_all: {together}"
        );
    }
}

/// An admitted check whose bucket ends while it is on the wire costs 3
/// round trips, as the README's "Measuring" says: the check, the rollback
/// of its crossing, and the check again, which admits it in the bucket it
/// finished in.
#[tokio::test]
async fn an_admitted_check_whose_bucket_ends_in_flight_costs_three_round_trips() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let boundary = common::today_ms() + 30_000;
    let clock = ManualClock::new(boundary - 1);
    let limiter = Arc::new(
        Limiter::builder(
            MemcachedStore::connect(&common::memcached_options(vec![proxy.addr.clone()]))
                .await
                .unwrap(),
        )
        .clock(clock.clone())
        .timeout(Duration::from_secs(5))
        .build(),
    );
    let api = Arc::new(policy(&[(100, 1_000, 1)]));
    proxy.hold();
    let in_flight = {
        let (limiter, api) = (limiter.clone(), api.clone());
        tokio::spawn(async move { limiter.check("k", &api, 1).await.unwrap() })
    };
    proxy.holding_a_request().await;
    clock.set(boundary);
    proxy.release();
    let late = in_flight.await.unwrap();
    assert!(late.allowed && late.counted, "{late:?}");
    assert_eq!(
        late.decided_at_ms, boundary,
        "decided again after the boundary"
    );
    assert_eq!(proxy.round_trips(), 3);
    let now = limiter.peek("k", &api, 1).await.unwrap();
    assert_eq!(now.limits[0].estimate.as_f64(), 1.0, "counted once");
}
