//! The rule, proved as one: whatever its holders do, a reservation gives
//! back exactly what was neither claimed nor surrendered, once. Against
//! the embedded store, whose counters read back what was given back.

use proptest::prelude::*;

use super::*;
use crate::policy::Window;
use crate::store::{CounterBatch, KeyDigest, MemoryStore};

const NOW_MS: u64 = 10_000;
/// Counted before the test's reservations: a give-back made twice would
/// take from it, where a floor of 0 would hide it.
const BASELINE: u64 = 1_000;

fn counters_of(key: &str) -> Counters {
    let window = Window::new(60_000, 2).unwrap();
    let digest = KeyDigest::of("reservation", key);
    [0, 1]
        .into_iter()
        .map(|bucket| CounterKey {
            digest,
            window,
            bucket,
        })
        .collect()
}

/// A memory store's call, which is done on its first poll.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("a memory store answers at once"),
    }
}

fn add(store: &MemoryStore, adds: &Counters, amount: u64) {
    let batch = CounterBatch {
        reads: Counters::new(),
        adds: adds.clone(),
        amount,
        now_ms: NOW_MS,
        deadline: None,
    };
    ready(store.read_and_add(&batch)).unwrap();
}

fn values(store: &MemoryStore, adds: &Counters) -> Vec<u64> {
    let batch = CounterBatch {
        reads: adds.clone(),
        adds: Counters::new(),
        amount: 0,
        now_ms: NOW_MS,
        deadline: None,
    };
    ready(store.read_and_add(&batch)).unwrap().read.to_vec()
}

/// What a holder does next, to the reservation at `at` (modulo how many
/// are held): `share` is a fraction in thousandths of each group.
#[derive(Clone, Debug)]
enum Step {
    HandOver { at: usize, share: [u16; 2] },
    SurrenderPart { at: usize, share: [u16; 2] },
    Claim { at: usize },
    Surrender { at: usize },
    Drop { at: usize },
}

fn step() -> impl Strategy<Value = Step> {
    let share = [0u16..=1000, 0u16..=1000];
    prop_oneof![
        (any::<usize>(), share.clone()).prop_map(|(at, share)| Step::HandOver { at, share }),
        (any::<usize>(), share).prop_map(|(at, share)| Step::SurrenderPart { at, share }),
        any::<usize>().prop_map(|at| Step::Claim { at }),
        any::<usize>().prop_map(|at| Step::Surrender { at }),
        any::<usize>().prop_map(|at| Step::Drop { at }),
    ]
}

fn part(held: &[u64], share: [u16; 2]) -> Amounts {
    held.iter()
        .zip(share)
        .map(|(&held, share)| held * u64::from(share) / 1000)
        .collect()
}

proptest! {
    #[test]
    fn gives_back_exactly_what_nobody_claimed_or_surrendered(
        reserved in [0u64..500, 0u64..500],
        steps in prop::collection::vec(step(), 0..24),
    ) {
        let store = Arc::new(MemoryStore::new());
        let groups = [counters_of("a"), counters_of("b")];
        for (adds, amount) in groups.iter().zip(reserved) {
            add(&store, adds, BASELINE + amount);
        }
        let shared = Added::shared(store.clone(), groups.iter().cloned());
        let borrowed = || Added {
            store: &*store,
            adds: groups.iter().map(|adds| adds.as_slice()).collect(),
        };
        // What stays counted: claimed, or surrendered (a holder that
        // surrenders takes back itself, which this test does not do).
        let mut kept = [0u64; 2];
        {
            let mut first = Some(Reservation::new(borrowed(), reserved.into_iter().collect(), NOW_MS));
            let mut held: Vec<Reservation<SharedAdded>> = Vec::new();
            let keep = |kept: &mut [u64; 2], amounts: &[u64]| {
                for (kept, amount) in kept.iter_mut().zip(amounts) {
                    *kept += amount;
                }
            };
            for step in steps {
                // The first reservation (borrowed returns) is at 0, the
                // ones handed over (shared returns) after it.
                let count = held.len() + usize::from(first.is_some());
                if count == 0 {
                    break;
                }
                let at = match &step {
                    Step::HandOver { at, .. } | Step::SurrenderPart { at, .. }
                    | Step::Claim { at } | Step::Surrender { at } | Step::Drop { at } => at % count,
                };
                let on_first = first.is_some() && at == 0;
                let index = at.wrapping_sub(usize::from(first.is_some()));
                match step {
                    Step::HandOver { share, .. } => {
                        let handed = if on_first {
                            let first = first.as_mut().unwrap();
                            let amounts = part(first.amounts(), share);
                            first.hand_over(&amounts, shared.clone())
                        } else {
                            let amounts = part(held[index].amounts(), share);
                            held[index].hand_over(&amounts, shared.clone())
                        };
                        held.push(handed);
                    }
                    Step::SurrenderPart { share, .. } => {
                        let surrendered = if on_first {
                            let first = first.as_mut().unwrap();
                            let amounts = part(first.amounts(), share);
                            first.surrender_part(&amounts)
                        } else {
                            let amounts = part(held[index].amounts(), share);
                            held[index].surrender_part(&amounts)
                        };
                        keep(&mut kept, &surrendered);
                    }
                    Step::Claim { .. } => {
                        let amounts: Amounts = if on_first {
                            let first = first.take().unwrap();
                            let amounts = first.amounts().into();
                            first.claim();
                            amounts
                        } else {
                            let reservation = held.swap_remove(index);
                            let amounts = reservation.amounts().into();
                            reservation.claim();
                            amounts
                        };
                        keep(&mut kept, &amounts);
                    }
                    Step::Surrender { .. } => {
                        let surrendered = if on_first {
                            first.take().unwrap().surrender()
                        } else {
                            held.swap_remove(index).surrender()
                        };
                        keep(&mut kept, &surrendered);
                    }
                    Step::Drop { .. } => {
                        if on_first {
                            first = None;
                        } else {
                            drop(held.swap_remove(index));
                        }
                    }
                }
            }
        }
        for ((adds, kept), reserved) in groups.iter().zip(kept).zip(reserved) {
            prop_assert!(kept <= reserved, "never more kept than reserved");
            prop_assert_eq!(values(&store, adds), vec![BASELINE + kept; 2]);
        }
    }
}

/// A reservation holding nothing gives nothing back, and never calls its
/// store: one whose every group is 0 is the common case of a refusal.
#[test]
fn one_that_holds_nothing_gives_nothing_back() {
    let store = MemoryStore::new();
    let adds = counters_of("nothing");
    add(&store, &adds, 3);
    let returns = Added {
        store: &store,
        adds: [adds.as_slice()].into_iter().collect(),
    };
    let reservation = Reservation::new(returns, [0].into_iter().collect(), NOW_MS);
    assert!(!reservation.holds());
    drop(reservation);
    assert_eq!(values(&store, &adds), vec![3, 3]);
}
