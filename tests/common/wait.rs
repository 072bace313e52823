//! Waiting for a state instead of sleeping and hoping: every wait polls a
//! condition until it holds or a generous deadline passes, so a busy
//! machine makes a test slower, never wrong.

use std::time::{Duration, Instant};

use slidegate::store::Store;
use slidegate::{Decision, Limiter, MemcachedStore, Policy, Source};

/// Long enough for anything a loaded 2-core machine does eventually; a
/// wait this long means the state never came.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// How often a condition is asked again.
const POLL: Duration = Duration::from_millis(10);

/// Poll `condition` until it holds; panic naming `what` after `within`.
pub async fn wait_for<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until(what, within, || {
        let holds = condition();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// Poll `probe` until it gives a value, and return it; panic naming `what`
/// after `within`.
pub async fn until<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// [`wait_for`] for tests that run outside a tokio runtime.
pub fn wait_for_blocking(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(POLL);
    }
}

/// After an outage: check `key` until the store decides again (not the
/// failure mode), and return that decision and how long it took. The
/// limiter redials by itself; the wait only bounds a recovery that never
/// comes.
pub async fn until_the_store_decides<S: Store>(
    limiter: &Limiter<S>,
    key: &str,
    policy: &Policy,
) -> (Decision, Duration) {
    let started = Instant::now();
    let decision = until("the store to decide again", PATIENCE, || async {
        match limiter.check(key, policy, 1).await {
            Ok(decision) if decision.source == Source::Store => Some(decision),
            _ => None,
        }
    })
    .await;
    (decision, started.elapsed())
}

/// Wait until discovery has applied the cluster configuration `version`.
pub async fn until_version(store: &MemcachedStore, version: u64) {
    wait_for(&format!("config version {version}"), PATIENCE, || {
        std::future::ready(store.topology().version == Some(version))
    })
    .await;
}
