//! One behaviour suite, run against every store and through every entry
//! point: {the in-memory store, a real memcached started by the harness,
//! two memcached nodes holding each counter twice} x {`check`, `check_all`
//! of one item}, so the two entry points cannot drift apart again. Each
//! behaviour is an `async fn` generic over the store and given the entry
//! point ([`Through`]); its limiter ([`Entry`]) decides `check` through
//! it. `behaviour_suite!` makes a test of each behaviour for each of the
//! six.
//!
//! Time is a manual clock placed at known offsets from the start of today
//! (UTC), so bucket boundaries fall where the behaviours' numbers expect.
//!
//! This file holds the macro, the list of behaviours it makes tests of and
//! the helpers they share; the behaviours are in the modules below, by what
//! they test, and are brought in here by name for the macro.

#[path = "../common/mod.rs"]
mod common;

mod boundaries;
mod keys;
mod near_cache;
mod windows;

use std::time::Duration;

use boundaries::{
    a_check_whose_bucket_ends_in_flight_is_decided_again,
    a_request_that_counted_nothing_is_not_decided_again_at_a_boundary,
};
use keys::{
    any_key_maps_to_its_own_counters, counter_identity_is_scope_key_window_precision,
    invalid_keys_and_costs_are_errors,
};
use near_cache::{
    a_refusal_after_a_smaller_admission_waits_as_the_store_says,
    concurrent_checks_admit_exactly_the_limit, near_cache_answers_hot_rejects_without_the_store,
};
use slidegate::{CheckError, Decision, Item, Limit, Limiter, ManualClock, Policy, Store};
use windows::{
    a_client_that_keeps_asking_gets_one_less_than_the_limit_after_its_first_window,
    admits_up_to_the_limit_then_rejects, cost_above_every_chance_is_refused_and_not_counted,
    peek_counts_nothing, previous_bucket_is_weighted, rejected_requests_are_not_counted,
    report_counts_even_over_the_limit, several_limits_count_only_if_all_admit,
    smaller_cost_passes_where_a_larger_one_was_refused,
    sub_buckets_and_reports_follow_the_worked_example, windows_over_thirty_days_keep_their_counts,
};

macro_rules! behaviour_suite {
    ($($case:ident),* $(,)?) => {
        behaviour_suite!(@store memory, slidegate::MemoryStore::new(); $($case),*);
        behaviour_suite!(@store memcached, super::super::common::memcached_store().await; $($case),*);
        // Each counter on two nodes (`memcached.replicas = 2`): the same
        // behaviours.
        behaviour_suite!(@store memcached_replicas, super::super::replicated_store().await; $($case),*);
    };
    (@store $store:ident, $make:expr; $($case:ident),*) => {
        mod $store {
            behaviour_suite!(@through check, Check, $make; $($case),*);
            behaviour_suite!(@through check_all, CheckAll, $make; $($case),*);
        }
    };
    (@through $module:ident, $through:ident, $make:expr; $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $case() {
                    super::super::$case($make, super::super::Through::$through).await;
                }
            )*
        }
    };
}

/// A store on the shared memcached and a second node of this binary's,
/// each counter on both.
async fn replicated_store() -> slidegate::MemcachedStore {
    static SECOND: std::sync::OnceLock<common::Memcached> = std::sync::OnceLock::new();
    let second = SECOND.get_or_init(|| {
        // Started from a thread that never ends, as the shared one is: the
        // harness ties a memcached's life to the thread that started it.
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            sender.send(common::Memcached::start()).unwrap();
            loop {
                std::thread::park();
            }
        });
        receiver.recv().expect("memcached starter thread")
    });
    let options = slidegate::MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(vec![common::shared_memcached().addr(), second.addr()])
    };
    slidegate::MemcachedStore::connect(&options).await.unwrap()
}

behaviour_suite!(
    admits_up_to_the_limit_then_rejects,
    rejected_requests_are_not_counted,
    previous_bucket_is_weighted,
    sub_buckets_and_reports_follow_the_worked_example,
    several_limits_count_only_if_all_admit,
    peek_counts_nothing,
    report_counts_even_over_the_limit,
    smaller_cost_passes_where_a_larger_one_was_refused,
    cost_above_every_chance_is_refused_and_not_counted,
    counter_identity_is_scope_key_window_precision,
    any_key_maps_to_its_own_counters,
    invalid_keys_and_costs_are_errors,
    near_cache_answers_hot_rejects_without_the_store,
    concurrent_checks_admit_exactly_the_limit,
    a_refusal_after_a_smaller_admission_waits_as_the_store_says,
    windows_over_thirty_days_keep_their_counts,
    a_check_whose_bucket_ends_in_flight_is_decided_again,
    a_request_that_counted_nothing_is_not_decided_again_at_a_boundary,
    a_client_that_keeps_asking_gets_one_less_than_the_limit_after_its_first_window,
);

const MINUTE: u64 = 60_000;

fn limit(limit: u64, window_ms: u64, precision: u32) -> Limit {
    Limit::new(limit, window_ms, precision).unwrap()
}

fn policy(name: &str, limits: &[Limit]) -> Policy {
    Policy::new(name, limits.to_vec()).unwrap()
}

/// The entry point a behaviour decides its checks through.
#[derive(Clone, Copy, Debug)]
pub enum Through {
    /// [`Limiter::check`].
    Check,
    /// [`Limiter::check_all`] of one item: what Envoy RLS calls.
    CheckAll,
}

/// A limiter whose `check` goes through one entry point; everything else
/// is the limiter's own (through `Deref`).
pub struct Entry<S> {
    limiter: Limiter<S>,
    through: Through,
}

impl<S: Store> Entry<S> {
    /// Decide a request of `cost` for `key`, through this entry point.
    pub async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        match self.through {
            Through::Check => self.limiter.check(key, policy, cost).await,
            Through::CheckAll => {
                let item = Item { key, policy, cost };
                let mut decisions = self.limiter.check_all(&[item]).await?;
                assert_eq!(decisions.len(), 1, "one decision per item");
                Ok(decisions.remove(0))
            }
        }
    }
}

impl<S> std::ops::Deref for Entry<S> {
    type Target = Limiter<S>;

    fn deref(&self) -> &Limiter<S> {
        &self.limiter
    }
}

/// A limiter on `store` with a manual clock `offset_ms` into today, whose
/// checks go `through` one entry point.
fn limiter<S: Store>(store: S, offset_ms: u64, through: Through) -> (Entry<S>, ManualClock) {
    let clock = ManualClock::new(common::today_ms() + offset_ms);
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .build();
    (Entry { limiter, through }, clock)
}

fn estimates(decision: &slidegate::Decision) -> Vec<f64> {
    decision
        .limits
        .iter()
        .map(|state| state.estimate.as_f64())
        .collect()
}
