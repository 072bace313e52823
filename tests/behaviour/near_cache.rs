//! The near-cache: hot rejects are answered without the store, and
//! concurrent checks admit exactly the limit without it remembering more
//! than what counts.

use std::time::Duration;

use slidegate::{Source, Store};

use super::{MINUTE, estimates, limit, limiter, policy};
use crate::common;

pub(super) async fn near_cache_answers_hot_rejects_without_the_store<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 30_000);
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

pub(super) async fn concurrent_checks_admit_exactly_the_limit<S: Store>(store: S) {
    let (limiter, clock) = limiter(store, 30_000);
    let limiter = std::sync::Arc::new(limiter);
    let api = std::sync::Arc::new(policy("api", &[limit(5, MINUTE, 1)]));
    let tasks = common::spawn_checks(&limiter, "k", &api, 100);
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
