//! Many instances, one memcached: 100 concurrent checks of one key, spread
//! over 4 limiters that each have their own connections, with a limit of 5
//! per minute, admit exactly 5, every time. This is what one round trip with
//! the increment's own answer as the count buys over read-then-write (the
//! reference Go implementation admits a median of 31 here).
//!
//! With replicas (`memcached.replicas = 2`, two nodes) the same: the
//! additions reach the two replicas in different orders, and a check whose
//! replicas disagree is tried again until they agree (see the store's
//! `exchange.rs`), so the highest count still admits exactly the limit.

mod common;

use std::sync::Arc;

use common::Memcached;
use slidegate::{Limit, ManualClock, MemcachedStore, Policy};

const INSTANCES: usize = 4;
const CALLERS: usize = 100;
const REPETITIONS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_hundred_callers_four_instances_admit_exactly_the_limit() {
    let memcached = common::shared_memcached();
    admit_exactly_the_limit(common::memcached_options(vec![memcached.addr()])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_two_replicas_too() {
    let nodes = [Memcached::start(), Memcached::start()];
    let options = slidegate::MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    admit_exactly_the_limit(options).await;
}

async fn admit_exactly_the_limit(options: slidegate::MemcachedOptions) {
    // Mid-minute on a fixed clock, so no repetition straddles a bucket
    // boundary (where the previous bucket's weight would be in play).
    let clock = ManualClock::new(common::today_ms() + 30_000);
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        let store = MemcachedStore::connect(&options).await.unwrap();
        instances.push(Arc::new(
            common::patient_limiter(store).clock(clock.clone()).build(),
        ));
    }
    let policy = Arc::new(Policy::new("api", vec![Limit::new(5, 60_000, 1).unwrap()]).unwrap());

    let admitted_per_repetition =
        common::admitted_per_burst(&instances, &policy, CALLERS, REPETITIONS, "shared-key").await;
    assert!(
        admitted_per_repetition
            .iter()
            .all(|&admitted| admitted == 5),
        "replicas {}, admitted per repetition: {admitted_per_repetition:?}",
        options.replicas
    );
}
