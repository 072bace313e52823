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

/// How a refused key asks: alone (`check`), or as the one item of a
/// `check_all` (an RLS request of one descriptor).
#[derive(Clone, Copy, Debug)]
enum Asking {
    Check,
    CheckAll,
}

async fn allowed(
    limiter: &Limiter<MemoryStore>,
    key: &str,
    policy: &Policy,
    asking: Asking,
) -> bool {
    match asking {
        Asking::Check => limiter.check(key, policy, 1).await.unwrap().allowed,
        Asking::CheckAll => {
            let item = slidegate::Item {
                key,
                policy,
                cost: 1,
            };
            limiter.check_all(&[item]).await.unwrap()[0].allowed
        }
    }
}

/// A key the near-cache keeps refusing is still a client the embedded
/// store must keep: its counters stay recently used, so a flood of
/// one-shot keys through a small table evicts theirs, not its own, and
/// when its entry is read again the store still holds its five. (The
/// near-cache used to answer it without touching the store, its counters
/// aged out with the one-shot keys', and each read-again found 0 and let
/// it in again within its minute.)
#[tokio::test]
async fn a_key_the_near_cache_refuses_keeps_its_counters_in_the_embedded_store() {
    let policy = Policy::new("api", vec![Limit::per(5, Duration::from_secs(60)).unwrap()]).unwrap();
    let mut admitted_again_by_asking = Vec::new();
    for asking in [Asking::Check, Asking::CheckAll] {
        let clock = ManualClock::new(T0 + 1_000);
        let limiter = Limiter::builder(MemoryStore::with_capacity(256))
            .clock(clock.clone())
            .near_cache_revalidate(INTERVAL)
            .build();
        for _ in 0..5 {
            assert!(allowed(&limiter, "refused", &policy, asking).await);
        }
        assert!(!allowed(&limiter, "refused", &policy, asking).await);
        // Six seconds of the same minute: the refused key asks every 10 ms
        // while 6,000 one-shot keys arrive, ten between two of its asks.
        let mut admitted_again = 0;
        for one_shot in 0..6_000 {
            assert!(allowed(&limiter, &format!("one-shot-{one_shot}"), &policy, asking).await);
            if one_shot % 10 == 9 {
                clock.advance(Duration::from_millis(10));
                admitted_again += u32::from(allowed(&limiter, "refused", &policy, asking).await);
            }
        }
        let evictions = limiter.store().evictions();
        println!(
            "{asking:?}: admitted again within its minute: {admitted_again}; evictions: {evictions}"
        );
        assert!(evictions > 5_000, "the table was flooded: {evictions}");
        admitted_again_by_asking.push((asking, admitted_again));
    }
    for (asking, admitted_again) in admitted_again_by_asking {
        assert_eq!(admitted_again, 0, "{asking:?}: its five stay counted");
    }
}
