//! How the window counts: up to the limit and no further, refusals not
//! counted, the previous bucket weighed, sub-buckets, several limits at
//! once, peeks and reports, costs, windows over thirty days, and what a
//! client that keeps asking gets.

use std::sync::Arc;
use std::time::Duration;

use slidegate::{Clock, Source, Store};

use super::{MINUTE, Through, estimates, limit, limiter, policy};

pub(super) async fn admits_up_to_the_limit_then_rejects<S: Store>(store: S, through: Through) {
    let (limiter, _) = limiter(store, 30_000, through);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for expected_remaining in (0..5).rev() {
        let decision = limiter.check("client-42", &api, 1).await.unwrap();
        assert!(decision.allowed && decision.counted);
        assert_eq!(decision.source, Source::Store);
        assert_eq!(decision.remaining(), expected_remaining);
        assert_eq!(decision.retry_after_ms, Some(0));
    }
    let rejected = limiter.check("client-42", &api, 1).await.unwrap();
    assert!(!rejected.allowed && !rejected.counted);
    assert_eq!(rejected.source, Source::Store);
    assert_eq!(estimates(&rejected), [5.0]);
    // Half a minute in: the 5 become the previous bucket in 30 s and must
    // decay to 4, 12 s into that minute.
    assert_eq!(rejected.retry_after_ms, Some(42_000));
}

pub(super) async fn rejected_requests_are_not_counted<S: Store>(store: S, through: Through) {
    let (limiter, clock) = limiter(store, 30_000, through);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    for _ in 0..5 {
        assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    }
    for _ in 0..20 {
        assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
    }
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [5.0]);

    clock.advance(Duration::from_millis(42_000 - 1));
    assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
    clock.advance(Duration::from_millis(1));
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert!(decision.allowed, "waiting exactly retry_after_ms admits");
    assert_eq!(decision.source, Source::Store);
    assert_eq!(estimates(&decision), [5.0]);
}

pub(super) async fn previous_bucket_is_weighted<S: Store>(store: S, through: Through) {
    let (limiter, clock) = limiter(store, 0, through);
    let api = policy("api", &[limit(10, MINUTE, 1)]);
    for _ in 0..4 {
        limiter.check("k", &api, 1).await.unwrap();
    }
    // A quarter into the next minute, the 4 weigh 3.
    clock.advance(Duration::from_millis(MINUTE + 15_000));
    let decision = limiter.peek("k", &api, 1).await.unwrap();
    assert_eq!(estimates(&decision), [3.0]);
    assert_eq!(decision.remaining(), 7);
    let decision = limiter.check("k", &api, 7).await.unwrap();
    assert!(decision.allowed);
    assert_eq!(estimates(&decision), [10.0]);
    // Two windows on, nothing is left.
    clock.advance(Duration::from_millis(2 * MINUTE));
    assert_eq!(estimates(&limiter.peek("k", &api, 1).await.unwrap()), [0.0]);
}

pub(super) async fn sub_buckets_and_reports_follow_the_worked_example<S: Store>(
    store: S,
    through: Through,
) {
    // 100 per 10 s in 5 sub-buckets of 2 s: counts 20, 10, 10, 10, 10, 30.
    let (limiter, clock) = limiter(store, 0, through);
    let api = policy("api", &[limit(100, 10_000, 5)]);
    for cost in [20, 10, 10, 10, 10] {
        let report = limiter.report("k", &api, cost).await.unwrap();
        assert!(report.allowed && report.counted);
        clock.advance(Duration::from_millis(2_000));
    }
    limiter.report("k", &api, 30).await.unwrap();
    // 30% into the current sub-bucket: 20 * 0.7 + 40 + 30 = 84.
    clock.advance(Duration::from_millis(600));
    assert_eq!(
        estimates(&limiter.peek("k", &api, 1).await.unwrap()),
        [84.0]
    );
    let refused = limiter.check("k", &api, 17).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_ms, Some(100));
    let admitted = limiter.check("k", &api, 16).await.unwrap();
    assert!(admitted.allowed);
    assert_eq!(estimates(&admitted), [100.0]);
}

pub(super) async fn several_limits_count_only_if_all_admit<S: Store>(store: S, through: Through) {
    let (limiter, clock) = limiter(store, 500, through);
    let api = policy("api", &[limit(2, 1_000, 1), limit(3, MINUTE, 1)]);
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(
        estimates(&refused),
        [2.0, 2.0],
        "the minute limit did not count it"
    );

    clock.advance(Duration::from_millis(2_000));
    let third = limiter.check("k", &api, 1).await.unwrap();
    assert!(third.allowed);
    assert_eq!(estimates(&third), [1.0, 3.0]);
    clock.advance(Duration::from_millis(2_000));
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed, "now the minute limit refuses");
    assert_eq!(estimates(&refused), [0.0, 3.0]);
}

pub(super) async fn peek_counts_nothing<S: Store>(store: S, through: Through) {
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(3, MINUTE, 1)]);
    for _ in 0..10 {
        let peek = limiter.peek("k", &api, 1).await.unwrap();
        assert!(peek.allowed && !peek.counted);
        assert_eq!(estimates(&peek), [0.0]);
    }
    assert_eq!(
        estimates(&limiter.check("k", &api, 3).await.unwrap()),
        [3.0]
    );
    let peek = limiter.peek("k", &api, 1).await.unwrap();
    assert!(!peek.allowed, "a peek gives the check's verdict");
    assert_eq!(peek.retry_after_ms, Some(MINUTE + MINUTE / 3));
}

pub(super) async fn report_counts_even_over_the_limit<S: Store>(store: S, through: Through) {
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(3, MINUTE, 1)]);
    let report = limiter.report("k", &api, 2).await.unwrap();
    assert!(report.allowed && report.counted);
    let report = limiter.report("k", &api, 5).await.unwrap();
    assert!(
        !report.allowed && report.counted,
        "counted, and says the counts are over"
    );
    assert_eq!(estimates(&report), [7.0]);
    assert!(!limiter.check("k", &api, 1).await.unwrap().allowed);
}

pub(super) async fn smaller_cost_passes_where_a_larger_one_was_refused<S: Store>(
    store: S,
    through: Through,
) {
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(10, MINUTE, 1)]);
    assert!(limiter.check("k", &api, 8).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 5).await.unwrap();
    assert_eq!((refused.allowed, refused.source), (false, Source::Store));
    let refused = limiter.check("k", &api, 5).await.unwrap();
    assert_eq!(
        (refused.allowed, refused.source),
        (false, Source::NearCache)
    );
    let admitted = limiter.check("k", &api, 2).await.unwrap();
    assert_eq!((admitted.allowed, admitted.source), (true, Source::Store));
    assert_eq!(estimates(&admitted), [10.0]);
}

pub(super) async fn cost_above_every_chance_is_refused_and_not_counted<S: Store>(
    store: S,
    through: Through,
) {
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(10, MINUTE, 1), limit(3, 1_000, 1)]);
    let refused = limiter.check("k", &api, 4).await.unwrap();
    assert!(!refused.allowed && !refused.counted);
    assert_eq!(refused.retry_after_ms, None);
    assert_eq!(
        estimates(&limiter.peek("k", &api, 1).await.unwrap()),
        [0.0, 0.0]
    );
}

pub(super) async fn windows_over_thirty_days_keep_their_counts<S: Store>(
    store: S,
    through: Through,
) {
    // A bucket of a 40-day window must live 80 days: Memcached takes such a
    // TTL only as an absolute time, and a relative one would expire at once.
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(2, 40 * 86_400_000, 1)]);
    assert!(limiter.check("k", &api, 2).await.unwrap().allowed);
    let refused = limiter.check("k", &api, 1).await.unwrap();
    assert!(!refused.allowed, "the counter vanished");
    assert_eq!(refused.source, Source::Store);
}

/// The README's word to a client that keeps asking: at precision 1 it gets
/// the limit in its first window and `limit - 1` in each one after it. The
/// current bucket's count reaches the limit only once the previous bucket
/// weighs nothing, and with `1 - f` (DESIGN.md) that is never inside the
/// bucket. At higher precisions the oldest sub-bucket is sometimes empty
/// when the last unit is asked for: `limit - 1` or the limit.
pub(super) async fn a_client_that_keeps_asking_gets_one_less_than_the_limit_after_its_first_window<
    S: Store,
>(
    store: S,
    through: Through,
) {
    let store = Arc::new(store);
    for (per_second, precision) in [(5, 1), (120, 1), (10, 5), (120, 10)] {
        let (limiter, clock) = limiter(store.clone(), 20_000, through);
        let start = clock.now_ms();
        let every_second = policy("keeps-asking", &[limit(per_second, 1_000, precision)]);
        let key = format!("{per_second}-{precision}");
        let mut admitted = [0u64; 5];
        for ms in (0..5_000).step_by(2) {
            clock.set(start + ms);
            if limiter.check(&key, &every_second, 1).await.unwrap().allowed {
                admitted[(ms / 1_000) as usize] += 1;
            }
        }
        let what = format!("{per_second} per second at precision {precision}: {admitted:?}");
        assert_eq!(admitted[0], per_second, "{what}");
        for later in &admitted[1..] {
            if precision == 1 {
                assert_eq!(*later, per_second - 1, "{what}");
            } else {
                assert!((per_second - 1..=per_second).contains(later), "{what}");
            }
        }
    }
}
