//! The reckoning against a fake clock, as governor tests its GCRA: examples
//! first, then the properties over any batch.

use proptest::prelude::*;
use smallvec::smallvec;

use super::*;
use crate::clock::{Clock, ManualClock};

fn counts(values: &[u64]) -> Counts {
    values.iter().copied().collect()
}

fn one(values: &[u64]) -> CountsByLimit {
    smallvec![counts(values)]
}

fn allowed(reckoning: &Reckoning) -> Vec<bool> {
    reckoning
        .by_request()
        .map(|verdicts| verdicts.iter().all(|verdict| verdict.allowed))
        .collect()
}

#[test]
fn in_order_each_check_sees_the_ones_admitted_before_it() {
    let limits = [Limit::new(5, 60_000, 1).unwrap()];
    let now = 1_000_000 * 60_000 + 30_000;
    let costs = [[1u64]; 7];
    let reckoning = reckon(
        &[&limits],
        &[one(&[0, 0])],
        now,
        costs.iter().map(|cost| cost.as_slice()),
        Counting::IfAdmitted,
    );
    assert_eq!(
        allowed(&reckoning),
        [true, true, true, true, true, false, false]
    );
    assert_eq!((reckoning.kept[0], reckoning.take_back[0]), (5, 2));
    assert_eq!(reckoning.remember[0], Some(1));
    // A refused check's wait counts only what was admitted (5), not the 7
    // added together.
    let alone = window::decide(&limits, &[counts(&[0, 5])], now, 1, Counting::IfAdmitted);
    assert_eq!(reckoning.verdicts[5].retry_after_ms, alone.retry_after_ms);
}

#[test]
fn a_refused_big_cost_leaves_room_for_a_small_one_after_it() {
    let limits = [Limit::new(10, 60_000, 1).unwrap()];
    let costs = [[5u64], [4], [1]];
    let reckoning = reckon(
        &[&limits],
        &[one(&[0, 6])],
        60_000 * 7,
        costs.iter().map(|cost| cost.as_slice()),
        Counting::IfAdmitted,
    );
    assert_eq!(allowed(&reckoning), [false, true, false]);
    assert_eq!(reckoning.kept[0], 4);
    assert_eq!(reckoning.remember[0], Some(1), "the least cost refused");
}

/// A request of two parts is counted in both or in neither; refused, each
/// part says whether it alone would admit, as a peek.
#[test]
fn a_request_of_several_parts_counts_in_all_or_none() {
    let five = [Limit::new(5, 60_000, 1).unwrap()];
    let one_ = [Limit::new(1, 60_000, 1).unwrap()];
    let costs = [[1u64, 1], [1, 1]];
    let reckoning = reckon(
        &[&five, &one_],
        &[one(&[0, 0]), one(&[0, 0])],
        60_000 * 7,
        costs.iter().map(|cost| cost.as_slice()),
        Counting::IfAdmitted,
    );
    assert_eq!(allowed(&reckoning), [true, false]);
    let second = reckoning.by_request().nth(1).unwrap();
    assert!(second[0].allowed && !second[0].counted, "five alone admits");
    assert!(!second[1].allowed);
    assert_eq!(reckoning.kept.as_slice(), [1, 1]);
    assert_eq!(reckoning.take_back.as_slice(), [1, 1]);
    assert_eq!(reckoning.remember.as_slice(), [None, Some(1)]);
}

#[test]
fn reports_count_everything_and_peeks_nothing() {
    let limits = [Limit::new(2, 1_000, 1).unwrap()];
    let costs = [[1u64]; 3];
    let each = || costs.iter().map(|cost| cost.as_slice());
    let report = reckon(&[&limits], &[one(&[0, 0])], 5_000, each(), Counting::Always);
    assert_eq!((report.kept[0], report.take_back[0]), (3, 0));
    assert!(!report.verdicts[2].allowed, "past the limit, and said so");
    assert_eq!(report.remember[0], None);
    let peek = reckon(&[&limits], &[one(&[0, 2])], 5_000, each(), Counting::Never);
    assert_eq!((peek.adding[0], peek.kept[0]), (0, 0));
    assert_eq!(peek.remember[0], Some(1), "a refused peek is remembered");
}

/// The fake clock's reading `advance_ms` after its start, 100 minutes
/// past the epoch.
fn fake_now(advance_ms: u64) -> u64 {
    let clock = ManualClock::new(600_000 * 10);
    clock.advance(std::time::Duration::from_millis(advance_ms));
    clock.now_ms()
}

fn counting() -> impl Strategy<Value = Counting> {
    prop_oneof![
        Just(Counting::IfAdmitted),
        Just(Counting::Always),
        Just(Counting::Never)
    ]
}

proptest! {
    /// Any batch of requests of two parts (several limits, precision k,
    /// costs above 1), at any instant of a fake clock: what is kept and
    /// taken back adds up to what was added, nothing is remembered unless
    /// something was refused, a report never takes back, and the admitted
    /// set is a replay of the same arrivals one at a time.
    #[test]
    fn a_batch_reckons_as_its_requests_one_by_one(
        costs in proptest::collection::vec((1u64..6, 1u64..6), 1..40),
        short in 1u64..30,
        long in 1u64..80,
        other in 1u64..40,
        older in proptest::collection::vec(0u64..20, 5),
        current in (0u64..20, 0u64..20),
        advance in 0u64..10_000,
        counting in counting(),
    ) {
        let now = fake_now(advance);
        let first = [
            Limit::new(short, 10_000, 1).unwrap(),
            Limit::new(long, 60_000, 3).unwrap(),
        ];
        let second = [Limit::new(other, 30_000, 1).unwrap()];
        let limits: [&[Limit]; 2] = [&first, &second];
        let start: [CountsByLimit; 2] = [
            smallvec![
                counts(&[older[0], current.0]),
                counts(&[older[1], older[2], older[3], current.0]),
            ],
            smallvec![counts(&[older[4], current.1])],
        ];
        let requests: Vec<[u64; 2]> = costs.iter().map(|&(a, b)| [a, b]).collect();
        let batch = reckon(
            &limits,
            &start,
            now,
            requests.iter().map(|costs| costs.as_slice()),
            counting,
        );
        for part in 0..2 {
            prop_assert_eq!(batch.kept[part] + batch.take_back[part], batch.adding[part]);
        }
        let refused = batch.verdicts.iter().any(|verdict| !verdict.allowed);
        if !refused {
            prop_assert!(batch.remember.iter().all(Option::is_none));
        }
        if counting == Counting::Always {
            prop_assert!(batch.take_back.iter().all(|&back| back == 0));
            prop_assert!(batch.remember.iter().all(Option::is_none));
        }
        // The replay: each request alone, after the ones counted before it.
        let mut state = start.clone();
        let mut kept = [0u64; 2];
        for (costs, batched) in requests.iter().zip(batch.by_request()) {
            let alone = reckon(&limits, &state, now, [costs.as_slice()], counting);
            prop_assert_eq!(alone.verdicts.as_slice(), batched);
            if alone.kept_any() {
                for (part, &cost) in costs.iter().enumerate() {
                    kept[part] += cost;
                    for counts in state[part].iter_mut() {
                        add(counts, cost);
                    }
                }
            }
        }
        prop_assert_eq!(batch.kept.as_slice(), kept.as_slice());
    }

    /// A batch of one part (a hot key's), reckoned in locals, is reckoned
    /// exactly as [`reckon`] reckons it: the same verdicts in order, the
    /// same books.
    #[test]
    fn a_batch_of_one_part_reckons_as_the_batch(
        costs in proptest::collection::vec(1u64..6, 1..40),
        short in 1u64..30,
        long in 1u64..80,
        older in proptest::collection::vec(0u64..20, 4),
        current in 0u64..20,
        advance in 0u64..10_000,
        counting in counting(),
    ) {
        let now = fake_now(advance);
        let limits = [
            Limit::new(short, 10_000, 1).unwrap(),
            Limit::new(long, 60_000, 3).unwrap(),
        ];
        let start: CountsByLimit = smallvec![
            counts(&[older[0], current]),
            counts(&[older[1], older[2], older[3], current]),
        ];
        let requests: Vec<[u64; 1]> = costs.iter().map(|&cost| [cost]).collect();
        let batch = reckon(
            &[&limits],
            std::slice::from_ref(&start),
            now,
            requests.iter().map(|costs| costs.as_slice()),
            counting,
        );
        let part = reckon_part(&limits, &start, now, costs.iter().copied(), counting);
        prop_assert_eq!(&part, &batch);
    }

    /// A lone request of one part, reckoned directly, is reckoned exactly
    /// as [`reckon`] reckons a batch of it alone.
    #[test]
    fn a_lone_check_reckons_as_a_batch_of_one(
        cost in 1u64..12,
        limit in 1u64..30,
        precision in 1u32..4,
        older in proptest::collection::vec(0u64..20, 3),
        current in 0u64..30,
        advance in 0u64..60_000,
        counting in counting(),
    ) {
        let now = fake_now(advance);
        let limits = [Limit::new(limit, 60_000, precision).unwrap()];
        let mut values: Vec<u64> = older[..precision as usize].to_vec();
        values.push(current);
        let start: CountsByLimit = smallvec![counts(&values)];
        let batch = reckon(&[&limits], std::slice::from_ref(&start), now, [[cost].as_slice()], counting);
        let lone = reckon_one(&limits, &start, now, cost, counting);
        prop_assert_eq!(&lone, &batch);
    }
}

/// 5 a minute, nothing before this minute: 4 counted leaves room for one,
/// 5 for none; an unknown value (a take-back that failed) or a missing one
/// never gives room; every part must have room.
#[test]
fn the_counts_after_a_take_back_decide_the_room() {
    const MID_MINUTE: u64 = 1_700_000_040_000 + 30_000;
    let five = [Limit::new(5, 60_000, 1).unwrap()];
    let three = [Limit::new(3, 60_000, 1).unwrap()];
    let before = [one(&[0, 9])];
    let at = |current: Option<u64>| {
        room_after_take_back(&[&five], &before, &[Some(vec![current])], MID_MINUTE, &[1])
    };
    assert!(at(Some(4)));
    assert!(!at(Some(5)));
    assert!(!at(None));
    assert!(!room_after_take_back(
        &[&five],
        &before,
        &[None],
        MID_MINUTE,
        &[1]
    ));
    assert!(!room_after_take_back(
        &[&five],
        &before,
        &[],
        MID_MINUTE,
        &[1]
    ));
    // The older bucket still weighs: 6 in the last minute, half gone.
    let weighed = [one(&[6, 9])];
    let room = |current| {
        room_after_take_back(
            &[&five],
            &weighed,
            &[Some(vec![Some(current)])],
            MID_MINUTE,
            &[1],
        )
    };
    assert!(room(1));
    assert!(!room(2));
    // Two parts, a at 7 and b at 2 when read.
    let read = [one(&[0, 7]), one(&[0, 2])];
    let both = |a: Option<u64>, b: Option<u64>| {
        let after = [Some(vec![a]), Some(vec![b])];
        room_after_take_back(&[&five, &three], &read, &after, MID_MINUTE, &[1, 1])
    };
    assert!(both(Some(1), Some(2)), "the burst has gone from a");
    assert!(!both(Some(5), Some(2)), "a is still full");
    assert!(!both(Some(1), Some(3)), "b is full now");
}
