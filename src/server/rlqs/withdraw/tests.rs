use super::*;
use crate::config::RlqsConfig;
use crate::server::rlqs::rules::Settings;
use crate::{ManualClock, MemoryStore};

/// A sub-bucket boundary, mid-day: the demand window's sub-buckets are 1 s.
const START_MS: u64 = 1_700_000_000_000;

fn limiter(clock: &ManualClock) -> Limiter<AnyStore> {
    Limiter::builder(AnyStore::Memory(MemoryStore::new()))
        .clock(clock.clone())
        .build()
}

/// A stream adding `amount` to `key`'s demand now: what it remembers.
async fn add(
    limiter: &Limiter<AnyStore>,
    demand: &Policy,
    key: &str,
    amount: u64,
    into: &mut Contributions,
) {
    let decision = limiter.report(key, demand, amount).await.unwrap();
    into.record(demand, &decision, amount);
}

async fn demand_now(limiter: &Limiter<AnyStore>, demand: &Policy, key: &str) -> f64 {
    let decision = limiter.peek(key, demand, 1).await.unwrap();
    decision.limits[0].estimate.as_f64()
}

#[tokio::test]
async fn a_stream_takes_back_what_it_added_and_nothing_of_another_streams() {
    let clock = ManualClock::new(START_MS);
    let limiter = limiter(&clock);
    let demand = Settings::new(&RlqsConfig::default()).demand;
    let (mut mine, mut theirs) = (Contributions::default(), Contributions::default());
    add(&limiter, &demand, "b", 5, &mut mine).await;
    add(&limiter, &demand, "b", 7, &mut theirs).await;
    clock.set(START_MS + 1_500);
    add(&limiter, &demand, "b", 3, &mut mine).await;
    assert_eq!(demand_now(&limiter, &demand, "b").await, 15.0);

    withdraw(&limiter, &demand, [("b", mine)]).await;
    assert_eq!(demand_now(&limiter, &demand, "b").await, 7.0);
    // Other buckets are untouched: a stream names only its own.
    add(&limiter, &demand, "other", 4, &mut Contributions::default()).await;
    withdraw(&limiter, &demand, [("b", Contributions::default())]).await;
    assert_eq!(demand_now(&limiter, &demand, "other").await, 4.0);
}

/// What left the window is not taken back: another stream's demand, added
/// since into a newer sub-bucket, stays whole.
#[tokio::test]
async fn what_has_left_the_window_is_not_taken_back() {
    let clock = ManualClock::new(START_MS);
    let limiter = limiter(&clock);
    let demand = Settings::new(&RlqsConfig::default()).demand;
    let mut old = Contributions::default();
    add(&limiter, &demand, "b", 9, &mut old).await;
    // Eleven sub-buckets later the window no longer reads it.
    clock.set(START_MS + 11_000);
    add(&limiter, &demand, "b", 2, &mut Contributions::default()).await;
    withdraw(&limiter, &demand, [("b", old)]).await;
    assert_eq!(demand_now(&limiter, &demand, "b").await, 2.0);
}

/// Only what the store confirmed it counted is remembered: a fallback or a
/// report that counted nothing leaves nothing to take back.
#[test]
fn only_what_the_store_counted_is_remembered() {
    let demand = Settings::new(&RlqsConfig::default()).demand;
    let decision = |counted, source| Decision {
        allowed: true,
        counted,
        retry_after_ms: Some(0),
        limits: Vec::new(),
        source,
        shadow: false,
        would_allow: true,
        decided_at_ms: START_MS,
    };
    let mut contributions = Contributions::default();
    contributions.record(&demand, &decision(true, Source::Fallback), 5);
    contributions.record(&demand, &decision(false, Source::Store), 5);
    contributions.record(&demand, &decision(true, Source::Store), 0);
    assert_eq!(contributions, Contributions::default());
    contributions.record(&demand, &decision(true, Source::Store), 5);
    contributions.record(&demand, &decision(true, Source::Store), 2);
    let current = START_MS / 1_000;
    assert_eq!(
        contributions.still_read(current).collect::<Vec<_>>(),
        [(current, 7)]
    );
}

/// A stream reporting every sub-bucket keeps only the ones the window
/// still reads: what it remembers per bucket is bounded.
#[test]
fn only_the_sub_buckets_the_window_reads_are_kept() {
    let mut contributions = Contributions::default();
    for sub_bucket in 100..130 {
        contributions.add(sub_bucket, 1);
    }
    let kept: Vec<u64> = contributions
        .still_read(129)
        .map(|(bucket, _)| bucket)
        .collect();
    assert_eq!(kept, (119..130).collect::<Vec<_>>());
    assert_eq!(contributions.still_read(140).count(), 0);
}
