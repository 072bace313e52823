//! Same-key coalescing: concurrent checks of one key and policy in this
//! instance share one store exchange.
//!
//! While an exchange for a key is in flight, later checks of it gather
//! here. When it returns, they go together: one addition per counter of
//! the sum of their costs, and the value it returns decides them one by
//! one, in arrival order, each exactly as if it had come alone in that
//! order ([`decide_in_order`]). What was refused is taken back in one
//! subtraction. A lone check finds nothing in flight and goes at once:
//! coalescing never delays it. A hot admitted key then costs one exchange
//! per round trip instead of one per check.
//!
//! Exactness is unchanged: the batch's addition is one atomic step in the
//! store, so every other instance sees the counts before it or after it,
//! as it would see N separate additions. The answers get more exact: a
//! refused check's `retry_after_ms` (and what the near-cache remembers) is
//! computed from the checks admitted before it, not from every concurrent
//! check's addition still in the counter.
//!
//! Checks, peeks and reports gather apart (they count differently); a batch
//! never holds more than [`MAX_BATCH`] checks, the next gather behind it.
//!
//! A caller that gives up is not counted: its cost is taken back with the
//! refused ones. One gap remains, as for a failed rollback: a check whose
//! future is dropped without being polled again after its answer was sent
//! (an aborted task) stays counted, which errs towards refusing.
//!
//! Who runs an exchange: the check that found nothing in flight, then, for
//! each batch gathered behind it, the batch's first check, handed the lead
//! ([`Turn::Lead`]). A leader that is dropped (its caller gave up) hands
//! the lead on, so a batch is never stranded; its own exchange, if sent,
//! undoes itself in the store (an outcome nobody claims takes its
//! additions back), so the batch can simply be decided again.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};

use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::boundary::{self, Crossing};
use super::counters::{self, Counts, Layout, layout};
use super::deadline::Deadline;
use super::{CheckError, Decision, Limiter, Source};
use crate::near_cache::NearKey;
use crate::policy::{Limit, Policy};
use crate::store::{KeyDigest, Store, StoreError};
use crate::window::{self, Counting, Verdict};

/// The most checks one exchange decides.
pub(crate) const MAX_BATCH: usize = 256;
/// Independent locks over the keys in flight, so checks of different keys
/// rarely meet on one.
const SHARDS: usize = 32;

/// A check as it reaches the coalescer: the near-cache did not refuse it.
#[derive(Clone, Copy)]
pub(super) struct Arrival {
    pub digest: KeyDigest,
    pub near_key: NearKey,
    pub cost: u64,
    pub counting: Counting,
    /// The instant it is decided at if it leads at once.
    pub now_ms: u64,
    /// When its store work must be done by, waiting included.
    pub deadline: Deadline,
}

/// What a gathered check is told.
pub(super) enum Turn {
    /// Its answer, and the take-back of its cost if it was counted and the
    /// answer is dropped unread.
    Decided(Result<Decision, CheckError>, Counted),
    /// Run the next exchange, for itself (first) and the others it holds.
    Lead(HandOff),
}

/// A counted answer on its way to its check. The leader has counted it as
/// told; if the check's caller drops it unread (its own timeout fired just
/// as the answer was sent), its cost is taken back then, as the store's
/// connections do for an outcome nobody claims.
pub(super) struct Counted(Option<Box<dyn FnOnce() + Send>>);

impl Counted {
    const NOTHING: Counted = Counted(None);

    /// The answer was read: its count stands.
    fn claim(mut self) {
        self.0 = None;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(take_back) = self.0.take() {
            take_back();
        }
    }
}

/// The lead of a key's next batch, on its way to the check that runs it.
/// Dropped untaken (that check's caller gave up before it read its turn),
/// it passes itself on, so a key is never left marked in flight with no
/// one to run it.
pub(super) struct HandOff {
    shards: Arc<Shards>,
    key: InFlight,
    others: Option<Vec<Member>>,
}

impl HandOff {
    /// The batch's other checks, for the new leader to run.
    pub(super) fn take(mut self) -> Vec<Member> {
        self.others.take().unwrap_or_default()
    }
}

impl Drop for HandOff {
    fn drop(&mut self) {
        if let Some(others) = self.others.take() {
            pass_on(&self.shards, self.key, others);
        }
    }
}

/// A check waiting for its batch's exchange.
pub(super) struct Member {
    pub cost: u64,
    reply: oneshot::Sender<Turn>,
}

impl Member {
    /// Whether its caller still waits.
    pub fn waiting(&self) -> bool {
        !self.reply.is_closed()
    }

    /// Hand it its answer. False when its caller stopped waiting: then
    /// nothing of the answer was taken, and the leader accounts for it.
    pub fn answer(self, result: Result<Decision, CheckError>, counted: Counted) -> bool {
        match self.reply.send(Turn::Decided(result, counted)) {
            Ok(()) => true,
            Err(Turn::Decided(_, counted)) => {
                counted.claim();
                false
            }
            Err(Turn::Lead(_)) => false,
        }
    }
}

/// A key in flight: whose checks, and which kind (checks, peeks and
/// reports gather apart).
type InFlight = (NearKey, Counting);
/// The keys in flight behind one lock, each with the checks gathered.
type Shard = HashMap<InFlight, VecDeque<Member>>;

/// Which exchanges are in flight, and the checks gathered behind each.
#[derive(Default)]
pub(crate) struct Coalescer {
    shards: Arc<Shards>,
}

/// The keys in flight, spread over independent locks.
struct Shards {
    locks: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

/// What [`Coalescer::join`] found.
pub(super) enum Joined {
    /// Nothing in flight for the key: go now, and lead.
    Lead,
    /// Wait for the turn.
    Wait(oneshot::Receiver<Turn>),
}

impl Default for Shards {
    fn default() -> Shards {
        Shards {
            locks: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl Shards {
    fn shard(&self, key: &InFlight) -> std::sync::MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(key) as usize) % self.locks.len();
        self.locks[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Coalescer {
    /// A check of `key` arrives: it leads when nothing is in flight,
    /// otherwise it waits behind the exchange in flight.
    pub(super) fn join(&self, key: InFlight, cost: u64) -> Joined {
        let mut shard = self.shards.shard(&key);
        match shard.get_mut(&key) {
            Some(waiting) => {
                let (reply, turn) = oneshot::channel();
                waiting.push_back(Member { cost, reply });
                Joined::Wait(turn)
            }
            None => {
                shard.insert(key, VecDeque::new());
                Joined::Lead
            }
        }
    }

    /// The exchange for `key` is over: hand the lead on (see [`pass_on`]).
    pub(super) fn pass_on(&self, key: InFlight, left: Vec<Member>) {
        pass_on(&self.shards, key, left);
    }
}

/// Hand the lead of `key` to the next batch (`left`, the rest of a batch
/// whose leader gave up, first; then the checks gathered meanwhile), or
/// mark nothing in flight.
fn pass_on(shards: &Arc<Shards>, key: InFlight, mut left: Vec<Member>) {
    loop {
        if left.is_empty() {
            let mut shard = shards.shard(&key);
            let Some(waiting) = shard.get_mut(&key) else {
                return;
            };
            if waiting.is_empty() {
                shard.remove(&key);
                return;
            }
            let take = waiting.len().min(MAX_BATCH);
            left = waiting.drain(..take).collect();
        }
        let mut members = left.drain(..);
        let Some(next) = members.next() else {
            continue;
        };
        let hand_off = HandOff {
            shards: shards.clone(),
            key,
            others: Some(members.collect()),
        };
        match next.reply.send(Turn::Lead(hand_off)) {
            Ok(()) => return,
            // Its caller is gone: the next one leads.
            Err(Turn::Lead(hand_off)) => left = hand_off.take(),
            Err(Turn::Decided(_, counted)) => {
                counted.claim();
                return;
            }
        }
    }
}

/// A leader's hold on its key's turn: dropped before the batch is decided
/// (its caller gave up), it passes the lead to the batch's other checks.
pub(super) struct Lead<'a> {
    /// `None` for a check decided alone (coalescing off).
    pub coalescer: Option<&'a Coalescer>,
    pub key: InFlight,
    /// The other checks of the batch, until they are answered.
    pub others: Vec<Member>,
}

impl Lead<'_> {
    /// A batch of one, with no turn to pass on.
    pub(super) fn alone(arrival: Arrival) -> Lead<'static> {
        Lead {
            coalescer: None,
            key: (arrival.near_key, arrival.counting),
            others: Vec::new(),
        }
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if let Some(coalescer) = self.coalescer {
            coalescer.pass_on(self.key, std::mem::take(&mut self.others));
        }
    }
}

impl<S: Store> Limiter<S> {
    /// Decide a check that the near-cache did not refuse, together with the
    /// checks of its key gathered behind the exchange in flight, if any.
    pub(super) async fn decide_together(
        &self,
        coalescer: &Coalescer,
        policy: &Policy,
        arrival: Arrival,
    ) -> Result<Decision, CheckError> {
        let Arrival {
            near_key,
            cost,
            counting,
            now_ms: arrived_ms,
            deadline,
            ..
        } = arrival;
        let key = (near_key, counting);
        // A check that leads at once decides at the instant it arrived; one
        // handed the lead after waiting, at the clock's reading then.
        let (others, now_ms) = match coalescer.join(key, cost) {
            Joined::Lead => (Vec::new(), arrived_ms),
            Joined::Wait(turn) => {
                self.metrics.coalesced();
                match self.wait_for_turn(turn, deadline).await {
                    Some(Turn::Decided(result, counted)) => {
                        counted.claim();
                        return result;
                    }
                    Some(Turn::Lead(hand_off)) => (hand_off.take(), self.clock.now_ms()),
                    // The exchanges ahead took the whole timeout: the store
                    // is that slow. The batch will not count this check: it
                    // can no longer answer it.
                    None => {
                        let error = StoreError::Timeout(self.timeout.as_millis() as u64);
                        let waited = Arrival {
                            now_ms: self.clock.now_ms(),
                            ..arrival
                        };
                        return self.fall_back_alone(error, policy, waited).await;
                    }
                }
            }
        };
        let mut lead = Lead {
            coalescer: Some(coalescer),
            key,
            others,
        };
        let arrival = Arrival { now_ms, ..arrival };
        self.lead(&mut lead, policy, arrival).await
        // Dropping `lead` passes the turn to the next batch, once this
        // batch's take-back (if any) has landed: the next batch then reads
        // counts without this one's refused costs in them.
    }

    /// A gathered check's turn, or `None` once its deadline has passed
    /// with none. Giving up closes the channel first and then looks once
    /// more: an answer is either taken or never sent, so a batch never
    /// counts a check that fell back (it sees the channel closed, and takes
    /// the check's cost back).
    async fn wait_for_turn(
        &self,
        mut turn: oneshot::Receiver<Turn>,
        deadline: Deadline,
    ) -> Option<Turn> {
        // Unconstrained by tokio's cooperative budget: an answer that is
        // there is always taken. A budget-starved poll would let a caller's
        // own timeout win and drop an answer that says "counted" unread.
        let waiting = tokio::task::unconstrained(&mut turn);
        match tokio::time::timeout_at(deadline.at(), waiting).await {
            Ok(answered) => answered.ok(),
            Err(_) => {
                turn.close();
                turn.try_recv().ok()
            }
        }
    }

    /// Run the batch of this check (`cost`, first) and `lead.others`:
    /// answer the others, take back what was refused, remember a refusal
    /// in the near-cache; this check's own answer is returned.
    pub(super) async fn lead(
        &self,
        lead: &mut Lead<'_>,
        policy: &Policy,
        arrival: Arrival,
    ) -> Result<Decision, CheckError> {
        let Arrival {
            digest,
            near_key,
            cost,
            counting,
            mut now_ms,
            deadline,
        } = arrival;
        let mut attempt = 1;
        loop {
            lead.others.retain(Member::waiting);
            let costs: SmallVec<[u64; 16]> = std::iter::once(cost)
                .chain(lead.others.iter().map(|member| member.cost))
                .collect();
            let adding: u64 = match counting {
                Counting::Never => 0,
                Counting::IfAdmitted | Counting::Always => costs.iter().sum(),
            };
            let layouts: Vec<Layout> = policy
                .limits()
                .iter()
                .map(|limit| layout(digest, limit, now_ms))
                .collect();
            let batch = counters::batch(&layouts, adding, counting, now_ms);
            let counts = match self.timed(deadline, self.store.read_and_add(&batch)).await {
                Ok(found) => counters::counts_before(&layouts, &batch, found),
                Err(error) => {
                    return self
                        .fall_back_all(lead, error, policy, Arrival { now_ms, ..arrival })
                        .await;
                }
            };
            let (mut verdicts, counted) = decide_in_order(
                policy.limits(),
                &counts,
                now_ms,
                costs.iter().copied(),
                counting,
            );
            let mut stood = false;
            if counting == Counting::IfAdmitted
                && counted > 0
                && let Some(crossing) = boundary::recheck(
                    policy.limits(),
                    now_ms,
                    self.clock.now_ms(),
                    attempt,
                    self.failure_mode,
                )
            {
                match crossing {
                    Crossing::Stands(error) => {
                        self.metrics.store_error(&error);
                        stood = true;
                    }
                    Crossing::Refused(error) => {
                        self.metrics.store_error(&error);
                        self.roll_back(deadline, &batch.adds, adding, now_ms).await;
                        return self
                            .fall_back_all(lead, error, policy, Arrival { now_ms, ..arrival })
                            .await;
                    }
                    Crossing::Retry => {
                        self.roll_back(deadline, &batch.adds, adding, now_ms).await;
                        now_ms = self.clock.now_ms();
                        attempt += 1;
                        continue;
                    }
                }
            }
            let decision_of = |verdict: Verdict| {
                let decision = Decision::new(verdict, Source::Store);
                if stood && decision.allowed {
                    boundary::stands(decision)
                } else {
                    decision
                }
            };
            // What the store keeps: what was counted for callers still
            // waiting for it. An admitted check whose caller left is
            // taken back with the refused ones.
            let mut kept = counted;
            let mut refused_cost: Option<u64> = None;
            let mine = verdicts.remove(0);
            for (member, verdict) in lead.others.drain(..).zip(verdicts) {
                let (member_cost, was_counted) = (member.cost, verdict.counted);
                if !verdict.allowed {
                    refused_cost =
                        Some(refused_cost.map_or(member_cost, |least| least.min(member_cost)));
                }
                let counted = if was_counted && counting == Counting::IfAdmitted {
                    let store = self.store.clone();
                    let counters = batch.adds.clone();
                    Counted(Some(Box::new(move || {
                        start_now(store.subtract(&counters, member_cost, now_ms));
                    })))
                } else {
                    Counted::NOTHING
                };
                let answered = member.answer(Ok(self.done(decision_of(verdict))), counted);
                if !answered && was_counted && counting == Counting::IfAdmitted {
                    kept -= member_cost;
                }
            }
            if !mine.allowed {
                refused_cost = Some(refused_cost.map_or(cost, |least| least.min(cost)));
            }
            let take_back = match counting {
                Counting::IfAdmitted => adding - kept,
                Counting::Never | Counting::Always => 0,
            };
            // This check's own count stands only if its caller gets the
            // answer: dropped while the take-back below is awaited, it is
            // taken back too.
            let own = OwnCount {
                limiter: self,
                counters: &batch.adds,
                cost: if mine.counted && counting == Counting::IfAdmitted {
                    cost
                } else {
                    0
                },
                now_ms,
            };
            let after_rollback = if take_back > 0 {
                self.roll_back(deadline, &batch.adds, take_back, now_ms)
                    .await
            } else {
                None
            };
            std::mem::forget(own);
            if let Some(least) = refused_cost.filter(|_| counting != Counting::Always) {
                let mut seen = counts;
                for counts in &mut seen {
                    if let Some(current) = counts.last_mut() {
                        *current = current.saturating_add(kept);
                    }
                }
                self.remember(near_key, policy, &seen, after_rollback, least, now_ms);
            }
            return Ok(self.done(decision_of(mine)));
        }
    }

    /// The store failed for a whole batch: the failure mode decides each
    /// check of it, alone, at the batch's instant.
    async fn fall_back_all(
        &self,
        lead: &mut Lead<'_>,
        error: StoreError,
        policy: &Policy,
        batch: Arrival,
    ) -> Result<Decision, CheckError> {
        for member in std::mem::take(&mut lead.others) {
            if member.waiting() {
                let alone = Arrival {
                    cost: member.cost,
                    ..batch
                };
                let result = self.fall_back_alone(error.clone(), policy, alone).await;
                member.answer(result, Counted::NOTHING);
            }
        }
        self.fall_back_alone(error, policy, batch).await
    }

    /// The failure mode's decision for one check, at its instant.
    async fn fall_back_alone(
        &self,
        error: StoreError,
        policy: &Policy,
        check: Arrival,
    ) -> Result<Decision, CheckError> {
        let now_ms = check.now_ms;
        let layouts: Vec<Layout> = policy
            .limits()
            .iter()
            .map(|limit| layout(check.digest, limit, now_ms))
            .collect();
        let batch = counters::batch(&layouts, check.cost, check.counting, now_ms);
        self.fall_back(error, policy, &layouts, &batch, check.counting, now_ms)
            .await
    }
}

/// A leader's own counted cost while it still awaits the batch's
/// take-back: if its caller stops waiting then, the cost is taken back at
/// once, so the store counts only what callers were told was counted.
struct OwnCount<'a, S: Store> {
    limiter: &'a Limiter<S>,
    counters: &'a [crate::store::CounterKey],
    cost: u64,
    now_ms: u64,
}

impl<S: Store> Drop for OwnCount<'_, S> {
    fn drop(&mut self) {
        if self.cost > 0 && !self.counters.is_empty() {
            // A store starts a subtraction on its first poll and finishes
            // it whoever waits (see `Store::subtract`): start it, and leave.
            start_now(
                self.limiter
                    .store
                    .subtract(self.counters, self.cost, self.now_ms),
            );
        }
    }
}

/// Poll `future` once, then drop it: for work that begins on its first
/// poll and must not wait for anyone.
fn start_now<F: std::future::Future>(future: F) {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = future.as_mut().poll(&mut context);
}

/// Decide checks of `costs`, in that order, against each limit's counts
/// before all of them (`counts`, oldest bucket first), at `now_ms`: each
/// exactly as if it had come alone after the ones before it. A counted
/// check adds its cost to the current bucket of every limit for the next.
/// Returns each verdict, and the sum of the costs counted.
pub(super) fn decide_in_order(
    limits: &[Limit],
    counts: &[Counts],
    now_ms: u64,
    costs: impl IntoIterator<Item = u64>,
    counting: Counting,
) -> (Vec<Verdict>, u64) {
    let mut running: SmallVec<[Counts; 2]> = counts.iter().cloned().collect();
    let mut counted = 0u64;
    let verdicts = costs
        .into_iter()
        .map(|cost| {
            let verdict = window::decide(limits, &running, now_ms, cost, counting);
            if verdict.counted {
                counted = counted.saturating_add(cost);
                for counts in &mut running {
                    if let Some(current) = counts.last_mut() {
                        *current = current.saturating_add(cost);
                    }
                }
            }
            verdict
        })
        .collect();
    (verdicts, counted)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn counts(values: &[u64]) -> Counts {
        values.iter().copied().collect()
    }

    #[test]
    fn in_order_each_check_sees_the_ones_admitted_before_it() {
        let limits = [Limit::new(5, 60_000, 1).unwrap()];
        let now = 1_000_000 * 60_000 + 30_000;
        // Nothing before; 7 checks of cost 1: the first 5 admitted.
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 0])],
            now,
            [1; 7],
            Counting::IfAdmitted,
        );
        let allowed: Vec<bool> = verdicts.iter().map(|verdict| verdict.allowed).collect();
        assert_eq!(allowed, [true, true, true, true, true, false, false]);
        assert_eq!(counted, 5);
        // A refused check's wait counts only what was admitted (5), not
        // the 7 added together.
        let alone = window::decide(&limits, &[counts(&[0, 5])], now, 1, Counting::IfAdmitted);
        assert_eq!(verdicts[5].retry_after_ms, alone.retry_after_ms);
        assert_eq!(verdicts[6].retry_after_ms, alone.retry_after_ms);
    }

    #[test]
    fn a_refused_big_cost_leaves_room_for_a_small_one_after_it() {
        let limits = [Limit::new(10, 60_000, 1).unwrap()];
        let now = 60_000 * 7;
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 6])],
            now,
            [5, 4, 1],
            Counting::IfAdmitted,
        );
        let allowed: Vec<bool> = verdicts.iter().map(|verdict| verdict.allowed).collect();
        assert_eq!(allowed, [false, true, false]);
        assert_eq!(counted, 4);
    }

    #[test]
    fn reports_count_everything_and_peeks_nothing() {
        let limits = [Limit::new(2, 1_000, 1).unwrap()];
        let (verdicts, counted) = decide_in_order(
            &limits,
            &[counts(&[0, 0])],
            5_000,
            [1, 1, 1],
            Counting::Always,
        );
        assert_eq!(counted, 3);
        assert!(
            !verdicts[2].allowed,
            "a report says the counts are past the limit"
        );
        let (verdicts, counted) =
            decide_in_order(&limits, &[counts(&[0, 1])], 5_000, [1, 1], Counting::Never);
        assert_eq!(counted, 0);
        assert!(verdicts.iter().all(|verdict| verdict.allowed));
    }

    proptest! {
        /// Deciding a batch in order is deciding each check alone, one
        /// after the other, each seeing the counts the ones before it left:
        /// several limits, precision k, costs above 1.
        #[test]
        fn a_batch_decides_as_its_checks_one_by_one(
            costs in proptest::collection::vec(1u64..6, 1..40),
            short in 1u64..30,
            long in 1u64..80,
            older in proptest::collection::vec(0u64..20, 4),
            current in 0u64..20,
            offset in 0u64..10_000,
        ) {
            let limits = [
                Limit::new(short, 10_000, 1).unwrap(),
                Limit::new(long, 60_000, 3).unwrap(),
            ];
            let now = 600_000 * 10 + offset;
            let start = [counts(&[older[0], current]), counts(&[older[1], older[2], older[3], current])];
            let (verdicts, counted) =
                decide_in_order(&limits, &start, now, costs.iter().copied(), Counting::IfAdmitted);
            let mut state = start.clone();
            let mut total = 0;
            for (cost, batched) in costs.iter().zip(&verdicts) {
                let alone = window::decide(&limits, &state, now, *cost, Counting::IfAdmitted);
                prop_assert_eq!(&alone, batched);
                if alone.counted {
                    total += cost;
                    for counts in &mut state {
                        *counts.last_mut().unwrap() += cost;
                    }
                }
            }
            prop_assert_eq!(counted, total);
        }
    }
}
