//! The near-cache between instances: a refusal it remembers is read again
//! from the store within the revalidation interval, whatever this instance
//! checks meanwhile, so a reset on another instance is seen within it.
//! In-process, on one shared `MemoryStore` and a manual clock.

use std::sync::Arc;
use std::time::Duration;

use slidegate::{Limit, Limiter, ManualClock, MemoryStore, Policy, Source};

/// A minute boundary.
const T0: u64 = 1_700_000_040_000;
const INTERVAL: Duration = Duration::from_secs(1);

struct TwoInstances {
    clock: ManualClock,
    remembering: Limiter<Arc<MemoryStore>>,
    policy: Policy,
}

/// Instance A counts 7 of 10 a minute, is refused 5 more (so its
/// near-cache remembers the key), and instance B resets the key.
async fn remembered_then_reset_elsewhere() -> TwoInstances {
    let clock = ManualClock::new(T0 + 10_000);
    let store = Arc::new(MemoryStore::new());
    let instance = || {
        Limiter::builder(store.clone())
            .clock(clock.clone())
            .near_cache_revalidate(INTERVAL)
            .build()
    };
    let (remembering, resetting) = (instance(), instance());
    let policy = Policy::new(
        "api",
        vec![Limit::per(10, Duration::from_secs(60)).unwrap()],
    )
    .unwrap();
    assert!(remembering.check("k", &policy, 7).await.unwrap().allowed);
    let refused = remembering.check("k", &policy, 5).await.unwrap();
    assert!(!refused.allowed && refused.source == Source::Store);
    assert_eq!(resetting.reset("k", &policy).await.unwrap(), 1);
    TwoInstances {
        clock,
        remembering,
        policy,
    }
}

/// After the interval, a check the entry does not refuse (a smaller cost)
/// goes to the store: the entry must not then count as read again.
#[tokio::test]
async fn a_reset_is_seen_within_the_interval_though_smaller_costs_came_first() {
    let two = remembered_then_reset_elsewhere().await;
    two.clock.advance(INTERVAL);
    assert!(
        two.remembering
            .check("k", &two.policy, 1)
            .await
            .unwrap()
            .allowed
    );
    two.clock.advance(Duration::from_millis(500));
    let five = two.remembering.check("k", &two.policy, 5).await.unwrap();
    // The store holds 1: 1 + 5 <= 10.
    assert!(five.allowed, "{five:?}");
    assert_eq!(five.source, Source::Store);
}

/// The same with a peek (an RLS descriptor with `hits_addend: 0`), and
/// with a cost that can never pass: neither may stand for the read.
#[tokio::test]
async fn neither_a_peek_nor_an_impossible_cost_stands_for_the_read() {
    for first in ["peek of 1", "check of 11"] {
        let two = remembered_then_reset_elsewhere().await;
        two.clock.advance(INTERVAL);
        let answer = match first {
            "peek of 1" => two.remembering.peek("k", &two.policy, 1).await,
            _ => two.remembering.check("k", &two.policy, 11).await,
        };
        answer.unwrap();
        two.clock.advance(Duration::from_millis(500));
        let five = two.remembering.check("k", &two.policy, 5).await.unwrap();
        assert!(five.allowed, "after a {first}: {five:?}");
    }
}
