//! A store that stops answering: each failure mode's assignment, as Envoy
//! enforces it.

use std::time::Duration;

use slidegate::config::ServerGuard;
use slidegate::{AnyStore, Clock, FailureMode, MemcachedStore};

use super::envoy::{Enforced, FakeEnvoy};
use super::{api, clock, instance};
use crate::common;

#[tokio::test]
async fn a_failing_store_gives_what_the_failure_mode_says() {
    let mut memcached = common::Memcached::start();
    let options = slidegate::MemcachedOptions {
        timeout: Duration::from_millis(300),
        ..common::memcached_options(vec![memcached.addr()])
    };
    let clock = clock();
    let mut instances = Vec::new();
    for mode in [FailureMode::Allow, FailureMode::Deny, FailureMode::Local] {
        let store = AnyStore::Memcached(MemcachedStore::connect(&options).await.unwrap());
        instances.push((
            mode,
            instance(store, &clock, mode, ServerGuard::default()).await,
        ));
    }
    memcached.kill();
    for (mode, server) in &instances {
        let mut envoy = FakeEnvoy::connect(server.addr, "envoy").await;
        envoy.request(&api(), clock.now_ms()).await;
        let enforced = envoy.enforced(&api()).unwrap();
        let as_the_mode_says = match mode {
            FailureMode::Allow => enforced == Enforced::AllowAll,
            FailureMode::Deny => enforced == Enforced::DenyAll,
            // This instance's own counts decide.
            FailureMode::Local => matches!(enforced, Enforced::TokenBucket(..)),
        };
        assert!(as_the_mode_says, "{mode:?}: {enforced:?}");
    }
}
