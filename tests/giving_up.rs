//! Callers that give up at any moment leave counted exactly what callers
//! were told was counted (the rule of `store::reservation`). A hot key's
//! checks coalesce behind a store whose replies come late, and half of
//! them are given up (their tasks aborted) at moments spread over the
//! whole exchange: waiting for their turn, leading the exchange, awaiting
//! their batch's take-back, or with their answer sent and unread.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::proxy::CountingProxy;
use common::wait::{PATIENCE, wait_for};
use slidegate::{Limit, ManualClock, MemcachedOptions, MemcachedStore, Policy, Source};

const LIMIT: u64 = 20;
const CALLERS: usize = 64;
const ROUNDS: usize = 8;
/// How late each reply comes: long enough for every moment of a check to
/// be hit by some caller giving up.
const DELAY_MS: u64 = 15;

/// Mixed costs: a batch's leader, which arrived last, can then be
/// admitted (a cost of 1 that fits) while others before it were refused
/// (a cost of 4 that did not), and holds its own count while their
/// take-back is awaited.
fn cost_of(caller: usize) -> u64 {
    if caller.is_multiple_of(3) { 4 } else { 1 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_give_up_leave_counted_only_what_callers_were_told() {
    let memcached = common::shared_memcached();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let options = common::memcached_options(vec![proxy.addr.clone()]);
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    let limiter = Arc::new(common::patient_limiter(store).build());
    // The same counters, read past the proxy and without a near-cache.
    let direct = MemcachedOptions {
        servers: vec![memcached.addr()],
        ..options.clone()
    };
    let reader = common::patient_limiter(MemcachedStore::connect(&direct).await.unwrap())
        .near_cache_capacity(0)
        .build();
    let policy =
        Arc::new(Policy::new("giving-up", vec![Limit::new(LIMIT, 3_600_000, 1).unwrap()]).unwrap());
    wait_for("the store to answer", PATIENCE, || async {
        let peeked = limiter.peek("warm", &policy, 1).await;
        peeked.is_ok_and(|peeked| peeked.source == Source::Store)
    })
    .await;
    proxy.delay_replies(DELAY_MS);

    let mut given_up_after_told = 0;
    for round in 0..ROUNDS {
        let key = format!("round-{round}");
        let tasks: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let (limiter, policy, key) = (limiter.clone(), policy.clone(), key.clone());
                let cost = cost_of(caller);
                tokio::spawn(async move { limiter.check(&key, &policy, cost).await.unwrap() })
            })
            .collect();
        // Every other caller gives up, at a moment spread over four
        // round trips in steps of a quarter millisecond (a round's own
        // offset shifts them).
        for (caller, task) in tasks
            .iter()
            .enumerate()
            .filter(|(caller, _)| caller % 2 == 1)
        {
            let steps = (caller as u64 * 7 + round as u64 * 3) % (16 * DELAY_MS);
            let abort = task.abort_handle();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(steps * 250)).await;
                abort.abort();
            });
        }
        let mut told = 0;
        for (caller, task) in tasks.into_iter().enumerate() {
            match task.await {
                Ok(decision) => {
                    if decision.allowed && decision.counted {
                        told += cost_of(caller);
                    }
                    given_up_after_told += usize::from(caller % 2 == 1);
                }
                Err(error) => assert!(error.is_cancelled(), "{error}"),
            }
        }
        assert!(told <= LIMIT);
        // Take-backs of callers gone are sent without waiting for them:
        // the count comes down to what was told, and stays there.
        let remaining = || async {
            let peeked = reader.peek(&key, &policy, 1).await.unwrap();
            assert_eq!(peeked.source, Source::Store);
            peeked.remaining()
        };
        wait_for("only the told checks counted", PATIENCE, || async {
            remaining().await == LIMIT - told
        })
        .await;
        tokio::time::sleep(Duration::from_millis(4 * DELAY_MS)).await;
        assert_eq!(remaining().await, LIMIT - told, "round {round}");
    }
    eprintln!(
        "{ROUNDS} rounds of {CALLERS} callers, half given up: {given_up_after_told} of those \
         had their answer before they went"
    );
}

/// A batch's leader admitted while a request before it was refused (a
/// cost of 1 that fits after a cost of 4 that did not) holds its own
/// count while the refused cost is taken back; given up then, before it
/// was told, it leaves nothing counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_gives_up_during_its_batch_s_take_back_leaves_nothing_counted() {
    let memcached = common::shared_memcached();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    options.connections = 1;
    let clock = ManualClock::new(common::today_ms() + 1_800_000);
    let limiter = Arc::new(
        common::patient_limiter(MemcachedStore::connect(&options).await.unwrap())
            .clock(clock.clone())
            .build(),
    );
    let direct = MemcachedOptions {
        servers: vec![memcached.addr()],
        ..options.clone()
    };
    let reader = common::patient_limiter(MemcachedStore::connect(&direct).await.unwrap())
        .clock(clock)
        .near_cache_capacity(0)
        .build();
    let policy =
        Arc::new(Policy::new("leader", vec![Limit::new(LIMIT, 3_600_000, 1).unwrap()]).unwrap());
    let check = |cost: u64| {
        let (limiter, policy) = (limiter.clone(), policy.clone());
        tokio::spawn(async move { limiter.check("hot", &policy, cost).await.unwrap() })
    };
    assert!(
        limiter
            .check("hot", &policy, LIMIT - 2)
            .await
            .unwrap()
            .allowed
    );

    // The first check's exchange is held; two more gather behind it, and
    // the later of them leads their batch.
    let round_trips = proxy.round_trips();
    proxy.hold();
    let first = check(1);
    proxy.holding_a_request().await;
    let refused = check(4);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let leader = check(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The batch's exchange goes; the take-back its refusal causes is held.
    proxy.hold_from_round_trip(round_trips + 3);
    proxy.release();
    tokio::time::timeout(PATIENCE, proxy.holding_a_request())
        .await
        .expect("the take-back never came");
    leader.abort();
    assert!(leader.await.unwrap_err().is_cancelled());
    proxy.release();

    assert!(first.await.unwrap().allowed);
    assert!(!refused.await.unwrap().allowed);
    wait_for("the leader's own count given back", PATIENCE, || async {
        reader.peek("hot", &policy, 1).await.unwrap().remaining() == 1
    })
    .await;
}
