//! What a store counted for a caller, until the caller is told.
//!
//! **The rule: a store counts only what a caller was told was counted.**
//! A check's addition is applied before anyone knows whether the check is
//! admitted, and its caller may give up at any moment (its own timeout,
//! a dropped connection, a request of several parts failing in one of
//! them). So every addition a store applied is held, from the moment its
//! reply is known until a caller is told, by exactly one [`Reservation`],
//! and a reservation ends in one of three ways:
//!
//! - **claimed**: the caller was told; the count stands;
//! - **surrendered**: its holder takes the amounts back itself, waiting
//!   for the values after (a refused request, a try that crossed a bucket
//!   boundary);
//! - **dropped unclaimed**: nobody will be told (the caller gave up, the
//!   request failed part-way). It starts its own subtraction at once,
//!   never waited for: a store finishes a subtraction it has started
//!   whoever waits (see [`Store::subtract`]).
//!
//! A holder may hand part of what it holds to another holder
//! ([`Reservation::hand_over`]): a coalesced batch's one reservation
//! becomes each of its requests' own, and the sum held never changes
//! except by a claim, a surrender or a drop. Where it is held along a
//! check's path:
//!
//! 1. at the Memcached connection, from the reply until the caller's
//!    wait takes it (the reader holds it if the caller is already gone);
//! 2. in the Memcached store, until every replica of the batch answered
//!    and every command of it succeeded;
//! 3. in the limiter's exchange, until every part of a request answered;
//! 4. in the leader of a batch, until each of the batch's requests has
//!    its answer; a request's own share travels with its answer, claimed
//!    when the caller reads it.
//!
//! The test that proves the rule as one is the property test below: any
//! sequence of hand-overs, claims, surrenders and drops returns exactly
//! what was reserved and neither claimed nor surrendered, once.

use std::ops::Deref;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::join::start_now;
use crate::store::{CounterKey, Counters, Store};

/// One amount per group of counters its [`Returns`] names (a part's
/// counters, or one counter); 0 where nothing is held.
pub type Amounts = SmallVec<[u64; 2]>;

/// Where what a reservation holds goes back to when it is dropped
/// unclaimed.
pub trait Returns {
    /// Start subtracting `amounts[i]` from the counters of group `i` (an
    /// amount of 0: none of them) now, and not wait.
    fn give_back(&self, amounts: &[u64], now_ms: u64);
}

/// Additions a store applied for a caller not yet told of them (see the
/// module's rule).
#[must_use = "a reservation dropped unclaimed takes back what it holds"]
pub struct Reservation<R: Returns> {
    returns: R,
    amounts: Amounts,
    now_ms: u64,
}

impl<R: Returns> Reservation<R> {
    /// `amounts` (one per group of `returns`) added at `now_ms`.
    pub fn new(returns: R, amounts: Amounts, now_ms: u64) -> Reservation<R> {
        Reservation {
            returns,
            amounts,
            now_ms,
        }
    }

    /// What it still holds, group by group.
    pub fn amounts(&self) -> &[u64] {
        &self.amounts
    }

    /// Whether it holds anything.
    pub fn holds(&self) -> bool {
        self.amounts.iter().any(|&amount| amount > 0)
    }

    /// The caller was told: what it holds stays counted.
    pub fn claim(mut self) {
        self.amounts.clear();
    }

    /// Its holder takes what it holds back itself: the amounts, no longer
    /// held.
    pub fn surrender(mut self) -> Amounts {
        std::mem::take(&mut self.amounts)
    }

    /// `amounts` of what it holds, held from now on by a reservation that
    /// gives back through `to`; never more than it holds.
    #[inline]
    pub fn hand_over<Q: Returns>(&mut self, amounts: &[u64], to: Q) -> Reservation<Q> {
        let moved = self.release(amounts);
        Reservation::new(to, moved, self.now_ms)
    }

    /// `amounts` of what it holds surrendered, the rest kept: its holder
    /// takes those back itself. Never more than it holds; the amounts
    /// surrendered.
    pub fn surrender_part(&mut self, amounts: &[u64]) -> Amounts {
        self.release(amounts)
    }

    /// `amounts` (one per group) no longer held by this one.
    fn release(&mut self, amounts: &[u64]) -> Amounts {
        debug_assert_eq!(amounts.len(), self.amounts.len(), "one amount per group");
        // One group (a check of one key, most hand-overs): in place.
        if let ([held], [wanted]) = (self.amounts.as_mut_slice(), amounts) {
            let moved = (*wanted).min(*held);
            *held -= moved;
            return SmallVec::from_buf_and_len([moved, 0], 1);
        }
        self.amounts
            .iter_mut()
            .zip(amounts)
            .map(|(held, &wanted)| {
                let moved = wanted.min(*held);
                *held -= moved;
                moved
            })
            .collect()
    }
}

impl<R: Returns> Drop for Reservation<R> {
    fn drop(&mut self) {
        if self.holds() {
            self.returns.give_back(&self.amounts, self.now_ms);
        }
    }
}

impl<T: Returns + ?Sized> Returns for Arc<T> {
    fn give_back(&self, amounts: &[u64], now_ms: u64) {
        (**self).give_back(amounts, now_ms)
    }
}

/// Each part's additions in a store, a group a part: the limiter's
/// returns, borrowed while a leader holds its batch
/// (`Added<&S, &[CounterKey]>`) or owned by the answers it sent
/// (`Added<Arc<S>, Counters>`).
pub struct Added<St, C> {
    pub store: St,
    pub adds: SmallVec<[C; 1]>,
}

/// The owned returns the answers of one batch share, whatever its store.
pub type SharedAdded = Arc<dyn Returns + Send + Sync>;

impl<S: Store> Added<Arc<S>, Counters> {
    /// Owned, to be shared by a batch's answers.
    pub fn shared(store: Arc<S>, adds: impl IntoIterator<Item = Counters>) -> SharedAdded {
        Arc::new(Added {
            store,
            adds: adds.into_iter().collect(),
        })
    }
}

impl<St, C> Returns for Added<St, C>
where
    St: Deref,
    St::Target: Store,
    C: AsRef<[CounterKey]>,
{
    fn give_back(&self, amounts: &[u64], now_ms: u64) {
        let takes = subtractions(self.adds.iter().map(AsRef::as_ref), amounts);
        match takes.as_slice() {
            [] => {}
            [(counters, amount)] => start_now(self.store.subtract(counters, *amount, now_ms)),
            takes => start_now(self.store.subtract_many(takes, now_ms)),
        }
    }
}

/// The subtractions that give back `amounts[i]` from the counters
/// `adds[i]` of each part, in order, for each part that [`gives_back`].
pub fn subtractions<'a>(
    adds: impl IntoIterator<Item = &'a [CounterKey]>,
    amounts: &[u64],
) -> SmallVec<[(&'a [CounterKey], u64); 1]> {
    adds.into_iter()
        .zip(amounts)
        .filter(|&(adds, &amount)| gives_back(adds, amount))
        .map(|(adds, &amount)| (adds, amount))
        .collect()
}

/// Whether a part that added to `adds` gives `amount` back: not when it
/// added nothing, or has nothing to give.
pub fn gives_back(adds: &[CounterKey], amount: u64) -> bool {
    amount > 0 && !adds.is_empty()
}

#[cfg(test)]
mod tests;
