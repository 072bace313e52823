//! [`Limiter::reset`]: a key's counters removed from the store, so that its
//! next check starts from zero (`POST /v1/reset`). Other instances see it
//! when their near-cache entry for the key is next revalidated.

use super::counters::layout;
use super::deadline::Deadline;
use super::exchange::Exchange;
use super::fallback::Fallback;
use super::screen::Screen;
use super::{CheckError, Policy};
use crate::near_cache::NearKey;
use crate::store::{CounterKey, Counters, KeyDigest, Store};

/// Remove `key`'s counters under `policy` from the store (and from failure
/// mode `local`'s counters, and this instance's near-cache). Returns how
/// many counters the store held.
pub(super) async fn reset<S: Store>(
    (exchange, fallback, screen): (&Exchange<S>, &Fallback, &Screen),
    key: &str,
    policy: &Policy,
    now_ms: u64,
) -> Result<usize, CheckError> {
    let digest = KeyDigest::of(policy.scope(), key);
    let counters = reset_counters(digest, policy, now_ms);
    let removed = exchange
        .timed(
            Deadline::after(exchange.timeout),
            exchange.store.remove(&counters, now_ms),
        )
        .await
        .map_err(CheckError::StoreUnavailable)?;
    // After the store: a reset it could not carry out is answered as
    // nothing reset, so nothing is. In memory, this cannot fail.
    let _ = fallback.local.remove(&counters, now_ms).await;
    // After the store, so that a refusal decided meanwhile on the old
    // counts cannot be remembered past the reset here.
    screen.near_cache.forget(&NearKey::new(digest, policy));
    Ok(removed)
}

/// Every counter a check of `policy` may read at `now_ms`, and each
/// limit's next bucket too: an instance whose clock is slightly ahead, or
/// a check in flight across the boundary, may already count there.
fn reset_counters(digest: KeyDigest, policy: &Policy, now_ms: u64) -> Counters {
    let mut counters = Counters::new();
    for limit in policy.limits() {
        let layout = layout(digest, limit, now_ms);
        counters.extend(layout.older());
        counters.push(layout.current);
        // None at the clock's very end, where there is no next bucket.
        if let Some(bucket) = layout.current.bucket.checked_add(1) {
            counters.push(CounterKey {
                bucket,
                ..layout.current
            });
        }
    }
    counters
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::limiter::{CheckError, Limiter, Source};
    use crate::policy::{Limit, Policy};
    use crate::store::MemoryStore;

    #[tokio::test]
    async fn a_reset_key_starts_from_zero_and_others_keep_their_counts() {
        let clock = crate::ManualClock::new(1_700_000_000_000);
        let limiter = Limiter::builder(MemoryStore::new())
            .clock(clock.clone())
            .build();
        let policy = Policy::new("api", vec![Limit::new(2, 60_000, 6).unwrap()]).unwrap();
        for key in ["a", "b"] {
            for _ in 0..2 {
                assert!(limiter.check(key, &policy, 1).await.unwrap().allowed);
            }
            clock.advance(Duration::from_secs(10));
        }
        assert!(!limiter.check("a", &policy, 1).await.unwrap().allowed);
        assert_eq!(limiter.reset("a", &policy).await.unwrap(), 2);
        let after = limiter.check("a", &policy, 1).await.unwrap();
        assert!(after.allowed, "{after:?}");
        assert_eq!(after.source, Source::Store);
        assert!(!limiter.check("b", &policy, 1).await.unwrap().allowed);
        assert_eq!(limiter.reset("never-seen", &policy).await.unwrap(), 0);
        assert!(matches!(
            limiter.reset("", &policy).await,
            Err(CheckError::InvalidKey(_))
        ));
    }

    /// A clock at its very end (a test clock, a clock gone wrong) has no
    /// next bucket to reset: the reset is made, no panic on overflow.
    #[tokio::test]
    async fn a_reset_at_the_clocks_end_does_not_overflow() {
        let limiter = Limiter::builder(MemoryStore::new())
            .clock(crate::ManualClock::new(u64::MAX))
            .build();
        let policy = Policy::new("api", vec![Limit::new(2, 1, 1).unwrap()]).unwrap();
        limiter.check("a", &policy, 1).await.unwrap();
        assert!(limiter.reset("a", &policy).await.is_ok());
    }
}
