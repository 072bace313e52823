//! A batch's exchange: one node's, or every replica's at once.
//!
//! With replicas, the batch goes to each of its key's replicas in the same
//! round trip (each on its own pipelined connection, all in flight
//! together), so that every replica counts every check.
//!
//! Who decides. Concurrent additions may reach two replicas in different
//! orders, so one check can read 3 on one and 6 on the other (another's
//! addition got there first). Deciding on the highest would then refuse
//! checks that one node would have admitted, and a burst would admit fewer
//! than its limit. So while the first replica (the key's node without
//! replicas) is believed, its counts decide alone, exactly as one node's
//! would: a burst admits exactly its limit. It is not believed (it may
//! hold less than the others: it came back empty, or missed additions)
//! when, within the batch's counters' lifetime, this instance doubted it
//! (see `conn/doubt.rs`: a connection lost, a dial or a call failed, it
//! joined or moved), or it was born later than another replica. A node's
//! birth is the first second any instance asked it (`Born`, a marker that
//! never expires, asked in the same request as a batch, once per
//! connection): a node that restarted or was replaced answers a later one,
//! so an instance started after the event, which never saw it, does not
//! believe it either. Then the highest count of the replicas that answer
//! decides. A first replica that fails the call is doubted, and the
//! others decide.
//!
//! When the highest decides, a try whose replicas disagree on a counter it
//! added to is taken back and tried again, after a pause picked at random,
//! and the try whose replicas agree decides (they placed the check at the
//! same count, as one node would); the tries are bounded ([`MAX_TRIES`]),
//! end when the deadline would not leave room for another, and end when a
//! try finds the replicas as far apart as the one before (a lost count,
//! which trying again does not change); the last try's highest count then
//! decides, which errs towards refusing.
//!
//! Read repair. A replica found lower than the highest is raised by the
//! difference: an addition, never a set, so nothing added meanwhile is
//! lost. While the first is believed, a doubted replica below it is raised
//! to it. When the highest decides, a replica lower on every try is raised
//! by the least it was lower by (a difference of orders changes from try
//! to try, a lost count does not); an older bucket, which nobody adds to
//! any more, from one reading. A later loss of the replica that kept the
//! counts then loses nothing.

use std::time::{Duration, Instant};

use smallvec::SmallVec;

use super::conn::{Additions, Commands, Counted, Delivery, Node, Queued, Replies, giving_back};
use super::repair::suspects;
use super::route::MAX_REPLICAS;
use super::topology::ReplicaNodes;
use super::wire::{self, Command, Reply};
use super::{MemcachedStore, batch_counts, unexpected};
use crate::join::join_all;
use crate::store::reservation::Reservation;
use crate::store::{BatchCounts, CounterBatch, CounterKey, StoreError, bucket_ttl_secs};

/// The most tries of one batch whose replicas disagree.
pub const MAX_TRIES: usize = 8;

impl MemcachedStore {
    /// The batch on one node (no replicas): its counts, or its error with
    /// what it added taken back.
    pub(super) async fn exchange_one(
        node: &Node,
        batch: &CounterBatch,
    ) -> Result<BatchCounts, StoreError> {
        let (commands, additions) = request_of(batch, false);
        let deadline = batch.deadline;
        node.call_counted(commands, additions, deadline, |counted| {
            // One command failed (memcached refused it, or a counter holds
            // text): the check is not counted there, and the reservation,
            // dropped, gives back what its other commands added.
            let counts = counts_of(batch, &counted.replies)?;
            // Its caller has the counts in this same poll.
            counted.reserved.claim();
            Ok(counts)
        })
        .await
    }

    /// The batch on one replica, with the node's birth asked in the same
    /// request when `ask_birth` (and learnt, see `Born`); the counts come
    /// with the reservation of what the node added.
    async fn exchange_asking_birth<'a>(
        node: &'a Node,
        batch: &'a CounterBatch,
        ask_birth: bool,
    ) -> Result<(BatchCounts, Reservation<Queued<'a>>), StoreError> {
        let (commands, additions) = request_of(batch, ask_birth);
        let generation = node.born().1;
        let deadline = batch.deadline;
        node.call_counted(commands, additions, deadline, |counted| {
            let Counted {
                mut replies,
                reserved,
            } = counted;
            // Only asked, so only popped, when `ask_birth`.
            if ask_birth && let Some(Reply::Value(born)) = replies.pop() {
                node.learn_born(born, generation);
            }
            Ok((counts_of(batch, &replies)?, reserved))
        })
        .await
    }

    /// The batch on each of `nodes`, tried again while the replicas
    /// disagree (see the module's notes).
    pub(super) async fn exchange_replicated(
        &self,
        nodes: &ReplicaNodes,
        batch: &CounterBatch,
    ) -> Result<BatchCounts, StoreError> {
        let counters = batch.reads.len() + batch.adds.len();
        let lifetime = lifetime_of(batch);
        // Per replica, the least each counter was found below the highest,
        // over the tries it answered; `None` once it failed a try.
        let mut lows: Lows = nodes
            .iter()
            .map(|_| Some(vec![u64::MAX; counters]))
            .collect();
        let mut last_differences: Option<Vec<u64>> = None;
        let mut tries = 0;
        loop {
            tries += 1;
            let began = Instant::now();
            let (answers, reserved) = self.try_replicas(nodes, batch, &lows, tries).await;
            if tries == 1 {
                // A counter's replicas agree unless one was doubted within
                // its lifetime: the first then decides alone, as one node
                // would.
                let now_s = batch.now_ms / 1000;
                let suspect = suspects(nodes, &answers, lifetime, lifetime.as_secs(), now_s);
                if !suspect[0]
                    && let Some(Some(Ok(counts))) = answers.first()
                {
                    self.raise_suspects(nodes, &answers, &suspect, counts, batch);
                    reserved.into_iter().flatten().for_each(Reservation::claim);
                    return Ok(counts.clone());
                }
            }
            let Weighed {
                highest,
                agree,
                differences,
            } = weigh(&answers, &mut lows, counters)?;
            let persistent = last_differences.as_ref() == Some(&differences);
            last_differences = Some(differences);
            let settled = agree
                || persistent
                || batch.adds.is_empty()
                || tries >= MAX_TRIES
                || !time_for_another(batch, began.elapsed());
            if settled {
                reserved.into_iter().flatten().for_each(Reservation::claim);
                self.repair(nodes, &lows, batch, tries);
                return Ok(highest);
            }
            Self::take_back_try(nodes, reserved, batch).await;
            tokio::time::sleep(jitter(began.elapsed() * tries as u32)).await;
        }
    }

    /// Take back a try that did not settle, on each replica that added:
    /// sent whatever becomes of this call, and waited for, so that the
    /// next try cannot overtake it. The next try then waits a while picked
    /// at random, so that instances whose tries collided do not collide
    /// again.
    async fn take_back_try(
        nodes: &ReplicaNodes,
        reserved: Vec<Option<Reservation<Queued<'_>>>>,
        batch: &CounterBatch,
    ) {
        let take_backs = nodes
            .iter()
            .zip(reserved)
            .filter_map(|(node, reserved)| {
                // What this replica applied, one amount per counter.
                let applied = reserved?.surrender();
                let owed = batch.adds.iter().copied().zip(applied);
                let take_back = giving_back(owed);
                (!take_back.is_empty()).then(|| node.call(take_back, Delivery::Always))
            })
            .collect();
        join_all(take_backs).await;
    }

    /// One try on every replica still asked (one that failed a try is left
    /// out of the next), all at once: each one's answer, and what it added
    /// reserved until the try decides, so that a caller that gives up
    /// while one replica is slow leaves nothing counted on the others. A
    /// replica that fails is doubted.
    async fn try_replicas<'a>(
        &self,
        nodes: &'a ReplicaNodes,
        batch: &'a CounterBatch,
        lows: &Lows,
        tries: usize,
    ) -> (Answers, Vec<Option<Reservation<Queued<'a>>>>) {
        let calls = nodes
            .iter()
            .zip(lows)
            .map(|(node, low)| {
                let ask = tries == 1 || low.is_some();
                let ask_birth = tries == 1 && node.born().0.is_none();
                async move {
                    if ask {
                        Some(Self::exchange_asking_birth(node, batch, ask_birth).await)
                    } else {
                        None
                    }
                }
            })
            .collect();
        let (answers, reserved): (Answers, Vec<_>) = join_all(calls)
            .await
            .into_iter()
            .map(|answer| match answer {
                Some(Ok((counts, reserved))) => (Some(Ok(counts)), Some(reserved)),
                Some(Err(error)) => (Some(Err(error)), None),
                None => (None, None),
            })
            .unzip();
        for (node, answer) in nodes.iter().zip(&answers) {
            if let Some(Err(_)) = answer {
                node.doubt();
            }
        }
        (answers, reserved)
    }
}

/// Each replica's answer to a try; `None` for one not asked.
type Answers = Vec<Option<Result<BatchCounts, StoreError>>>;

/// Per replica, the least each counter was found below the highest over
/// the tries it answered; `None` once it failed one.
type Lows = SmallVec<[Option<Vec<u64>>; MAX_REPLICAS]>;

/// What a try's answers come to.
struct Weighed {
    /// Each counter's highest value.
    highest: BatchCounts,
    /// Whether every replica that answered placed the additions at the
    /// same counts.
    agree: bool,
    /// Each answering replica's distance below the highest, counter by
    /// counter: the same on the next try is a lost count, not additions
    /// in flight.
    differences: Vec<u64>,
}

/// Weigh a try's `answers`, lowering each replica's `lows`: the error of
/// the first replica that failed when none answered.
fn weigh(answers: &Answers, lows: &mut Lows, counters: usize) -> Result<Weighed, StoreError> {
    let mut highest: Option<BatchCounts> = None;
    let mut first_error = None;
    for answer in answers.iter().flatten() {
        match answer {
            Ok(counts) => highest = Some(raise(highest, counts)),
            Err(error) => {
                first_error.get_or_insert_with(|| error.clone());
            }
        }
    }
    let Some(highest) = highest else {
        return Err(first_error.unwrap_or_else(|| unexpected("no replica was asked")));
    };
    let mut agree = true;
    let mut differences: Vec<u64> = Vec::with_capacity(answers.len() * counters);
    for (answer, low) in answers.iter().zip(lows.iter_mut()) {
        let (Some(Ok(counts)), Some(low)) = (answer, low.as_mut()) else {
            *low = None;
            continue;
        };
        let found = counts.read.iter().chain(&counts.added);
        let top = highest.read.iter().chain(&highest.added);
        for ((low, found), top) in low.iter_mut().zip(found).zip(top) {
            *low = (*low).min(top - found);
            differences.push(top - found);
        }
        agree &= counts.added == highest.added;
    }
    Ok(Weighed {
        highest,
        agree,
        differences,
    })
}

/// How long the batch's counters live: the span within which a doubt of
/// a replica still matters.
fn lifetime_of(batch: &CounterBatch) -> Duration {
    let counters = batch.reads.iter().chain(&batch.adds);
    let longest = counters
        .map(|counter| bucket_ttl_secs(counter.window))
        .max();
    Duration::from_secs(longest.unwrap_or(0))
}

/// Whether the batch's deadline leaves room for a try as long as the last
/// one, twice over.
fn time_for_another(batch: &CounterBatch, last_try: Duration) -> bool {
    batch
        .deadline
        .is_none_or(|deadline| deadline.at.saturating_duration_since(Instant::now()) > last_try * 2)
}

/// A pause picked at random below `most`.
fn jitter(most: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A hasher's random keys, fresh for each call: no dependency for one
    // number that needs no quality.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let most = u64::try_from(most.as_micros()).unwrap_or(u64::MAX).max(1);
    Duration::from_micros(random % most)
}

/// Each counter's highest value so far.
fn raise(highest: Option<BatchCounts>, counts: &BatchCounts) -> BatchCounts {
    match highest {
        None => counts.clone(),
        Some(mut highest) => {
            for (top, &found) in highest.read.iter_mut().zip(&counts.read) {
                *top = (*top).max(found);
            }
            for (top, &found) in highest.added.iter_mut().zip(&counts.added) {
                *top = (*top).max(found);
            }
            highest
        }
    }
}

/// A batch's request: its reads, then its additions (and the node's birth
/// when `ask_birth`); which of them are the additions.
fn request_of(batch: &CounterBatch, ask_birth: bool) -> (Commands, Additions<'_>) {
    let mut commands = Commands::new();
    for &counter in &batch.reads {
        commands.push(Command::Read(counter));
    }
    for &counter in &batch.adds {
        let ttl = wire::ttl(bucket_ttl_secs(counter.window), batch.now_ms);
        let amount = batch.amount;
        commands.push(Command::Add {
            counter,
            amount,
            ttl,
        });
    }
    if ask_birth {
        commands.push(Command::Born {
            now_s: batch.now_ms / 1000,
        });
    }
    let additions = Additions {
        counters: &batch.adds,
        amount: batch.amount,
        first_reply: batch.reads.len(),
    };
    (commands, additions)
}

/// The subtraction of `amount` from each of `counters`.
pub(super) fn take_back_of(counters: &[CounterKey], amount: u64) -> Commands {
    counters
        .iter()
        .map(|&counter| Command::Subtract { counter, amount })
        .collect()
}

/// A node's counts for `batch`, from its replies.
fn counts_of(batch: &CounterBatch, replies: &Replies) -> Result<BatchCounts, StoreError> {
    let (read, added) = replies.split_at(batch.reads.len().min(replies.len()));
    if read.len() != batch.reads.len() || added.len() != batch.adds.len() {
        return Err(unexpected("answers missing from a batch"));
    }
    batch_counts(read, added)
}
