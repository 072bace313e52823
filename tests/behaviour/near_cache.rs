//! The near-cache: hot rejects are answered without the store, and
//! concurrent checks admit exactly the limit without it remembering more
//! than what counts.

use std::time::Duration;

use slidegate::{Item, Source, Store};

use super::{MINUTE, Through, estimates, limit, limiter, policy};

pub(super) async fn near_cache_answers_hot_rejects_without_the_store<S: Store>(
    store: S,
    through: Through,
) {
    let (limiter, clock) = limiter(store, 30_000, through);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for _ in 0..6 {
        limiter.check("hot", &api, 1).await.unwrap();
    }
    let calls = limiter.metrics().store_calls;
    for _ in 0..100 {
        let decision = limiter.check("hot", &api, 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.source),
            (false, Source::NearCache)
        );
        assert_eq!(decision.retry_after_ms, Some(42_000));
    }
    assert_eq!(
        limiter.metrics().store_calls,
        calls,
        "hot rejects touched the store"
    );
    assert_eq!(limiter.metrics().near_cache_hits(), 100);
    // Other keys and peeks of other policies are not affected.
    assert!(limiter.check("cold", &api, 1).await.unwrap().allowed);
    // When the remembered counts no longer reject, the store decides again.
    clock.advance(Duration::from_millis(42_000));
    let decision = limiter.check("hot", &api, 1).await.unwrap();
    assert_eq!((decision.allowed, decision.source), (true, Source::Store));
}

pub(super) async fn concurrent_checks_admit_exactly_the_limit<S: Store>(
    store: S,
    through: Through,
) {
    let (limiter, clock) = limiter(store, 30_000, through);
    let limiter = std::sync::Arc::new(limiter);
    let api = std::sync::Arc::new(policy("api", &[limit(5, MINUTE, 1)]));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (limiter, api) = (limiter.clone(), api.clone());
            tokio::spawn(async move { limiter.check("k", &api, 1).await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap().allowed);
    }
    assert_eq!(admitted, 5);
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [5.0]);
    // The 95 rejects each saw the others' increments before their rollbacks;
    // the near-cache must still hold no more than the 5 that count, or it
    // would refuse this request, which is exactly on time.
    clock.advance(Duration::from_millis(42_000));
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert_eq!((decision.allowed, decision.source), (true, Source::Store));
}

/// What this instance counts makes what its near-cache remembered of the
/// key stale: a refusal of a larger cost after a smaller one was admitted
/// (by `check`, or by `check_all`) waits as long as the store's counts
/// say, not as long as the counts remembered before that admission said
/// (which is shorter).
pub(super) async fn a_refusal_after_a_smaller_admission_waits_as_the_store_says<S: Store>(
    store: S,
    through: Through,
) {
    let store = std::sync::Arc::new(store);
    for together in [matches!(through, Through::CheckAll)] {
        let (limiter, clock) = limiter(store.clone(), 0, through);
        let api = policy("api", &[limit(4, 100, 1)]);
        let key = if together { "all" } else { "one" };
        assert!(limiter.check(key, &api, 4).await.unwrap().allowed);
        clock.advance(Duration::from_millis(10));
        let refused = limiter.check(key, &api, 1).await.unwrap();
        assert_eq!((refused.allowed, refused.source), (false, Source::Store));
        // Half a window on, the previous bucket's 4 weigh 2: a cost of 1
        // fits, the store admits it, and the count is 3.
        clock.advance(Duration::from_millis(140));
        let one = if together {
            let item = Item {
                key,
                policy: &api,
                cost: 1,
            };
            limiter.check_all(&[item]).await.unwrap().remove(0)
        } else {
            limiter.check(key, &api, 1).await.unwrap()
        };
        assert_eq!((one.allowed, one.source), (true, Source::Store));
        let three = limiter.check(key, &api, 3).await.unwrap();
        assert!(!three.allowed);
        // 3 + 3 fits once the previous bucket weighs nothing: at its end.
        assert_eq!(
            (three.retry_after_ms, three.remaining(), three.source),
            (Some(50), 1, Source::Store),
            "together: {together}, {three:?}"
        );
    }
}
