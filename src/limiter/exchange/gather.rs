//! Gathering: which keys have an exchange in flight, the checks waiting
//! behind each, and how the lead passes from one batch to the next, so
//! that no batch is ever stranded and no answer that says "counted" is
//! lost unread.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::super::CheckError;
use super::super::deadline::Deadline;
use super::super::request::{Costs, Decisions, Part, copied};
use crate::near_cache::{Items, NearKey};
use crate::store::Reservation;
use crate::store::reservation::SharedAdded;
use crate::window::Counting;

/// The most checks one exchange decides.
pub(crate) const MAX_BATCH: usize = 256;
/// Independent locks over the keys in flight, so checks of different keys
/// rarely meet on one.
const SHARDS: usize = 32;

/// What a gathered check is told.
pub(in crate::limiter) enum Turn {
    /// Its answer, and its share of the batch's reservation when it was
    /// counted: dropped unread (its caller's own timeout fired just as the
    /// answer was sent), the share gives its costs back.
    Decided(Result<Decisions, CheckError>, Option<Share>),
    /// Run the next exchange, for itself (first) and the others it holds.
    Lead(HandOff),
}

/// A counted answer's share of its batch's reservation: its costs, one
/// per part, given back through returns the batch's answers share (one
/// allocation a batch, not one a check).
pub(in crate::limiter) type Share = Reservation<SharedAdded>;

/// The lead of a key's next batch, on its way to the check that runs it.
/// Dropped untaken (that check's caller gave up before it read its turn),
/// it passes itself on, so a key is never left marked in flight with no
/// one to run it.
pub(in crate::limiter) struct HandOff {
    shards: Arc<Shards>,
    key: InFlight,
    others: Option<Vec<Member>>,
}

impl HandOff {
    /// The batch's other checks, for the new leader to run.
    pub(in crate::limiter) fn take(mut self) -> Vec<Member> {
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

/// A request waiting for its batch's exchange.
pub(in crate::limiter) struct Member {
    /// One per part.
    pub costs: Costs,
    /// When its store work must be done by: its leader answers it then, by
    /// the failure mode, if the exchange is not back (it has no timer of
    /// its own).
    pub deadline: Deadline,
    /// `None` once answered.
    reply: Option<oneshot::Sender<Turn>>,
}

impl Member {
    /// Whether its caller still waits for an answer.
    pub fn waiting(&self) -> bool {
        self.reply.as_ref().is_some_and(|reply| !reply.is_closed())
    }

    /// Hand it its answer, with its `share` of the batch's reservation if
    /// it was counted. `Err` with the share when its caller stopped
    /// waiting (or it was answered already): nothing of the answer was
    /// taken, and the leader takes the share back.
    pub fn answer(
        &mut self,
        result: Result<Decisions, CheckError>,
        share: Option<Share>,
    ) -> Result<(), Option<Share>> {
        let Some(reply) = self.reply.take() else {
            return Err(share);
        };
        match reply.send(Turn::Decided(result, share)) {
            Ok(()) => Ok(()),
            Err(Turn::Decided(_, share)) => Err(share),
            Err(Turn::Lead(_)) => Err(None),
        }
    }
}

/// A key in flight: whose checks, under which limits, and which kind
/// (checks, peeks and reports gather apart). Small and copied, not
/// cloned: the first part's key, how many parts, the kind, and a hash of
/// every part's key and limits, values included, computed once
/// ([`Coalescer::in_flight`], from each policy's `limits_id`). The near-cache's key tells policies apart by
/// a hash of their windows only, and a batch is decided by its leader's
/// limits, so checks of one key under other limit values (an inline 1 an
/// hour beside 1,000 an hour over the same window, a policy reloaded while
/// checks are in flight) must not share one: they differ in the hash,
/// 64 bits seeded per process, so they share one only by a collision on a
/// key they also share.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::limiter) struct InFlight {
    hash: u64,
    first: Option<NearKey>,
    parts: usize,
    counting: Counting,
    /// What the batch's refusals are remembered as: the parts left of a
    /// request of several items the screen refused one of never gather
    /// with a lone item's.
    by: Items,
}

/// The keys in flight behind one lock, each with the checks gathered,
/// found by [`InFlight::hash`]: hashed once a check, with foldhash seeded
/// per process (std's HashMap hashed the key at each of the four lookups
/// of a check, and SipHash, its default, stood out in the library's
/// profile at 256 callers). The keys are already digests, and a shard holds only the
/// keys in flight.
type Shard = hashbrown::HashTable<(InFlight, VecDeque<Member>)>;

/// Which exchanges are in flight, and the checks gathered behind each.
#[derive(Default)]
pub(in crate::limiter) struct Coalescer {
    shards: Arc<Shards>,
}

/// The keys in flight, spread over independent locks.
struct Shards {
    locks: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::RandomState,
}

/// What [`Coalescer::join`] found.
pub(in crate::limiter) enum Joined {
    /// Nothing in flight for the key: go now, and lead.
    Lead,
    /// Wait for the turn.
    Wait(oneshot::Receiver<Turn>),
}

impl Default for Shards {
    fn default() -> Shards {
        Shards {
            locks: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl Shards {
    fn shard(&self, key: &InFlight) -> std::sync::MutexGuard<'_, Shard> {
        // Bits the table within the shard does not index by (it takes the
        // low ones for the bucket and the top seven for its tags).
        let index = ((key.hash >> 32) as usize) % self.locks.len();
        self.locks[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Where `key` is in a shard, if it is there.
fn find<'a>(shard: &'a mut Shard, key: &InFlight) -> Option<&'a mut VecDeque<Member>> {
    shard
        .find_mut(key.hash, |(in_flight, _)| in_flight == key)
        .map(|(_, waiting)| waiting)
}

impl Coalescer {
    /// The key a request of `parts` (`counting`) is in flight as, hashed
    /// once here for all its lookups.
    pub(in crate::limiter) fn in_flight(
        &self,
        parts: &[Part<'_>],
        counting: Counting,
        by: Items,
    ) -> InFlight {
        let mut hasher = self.shards.hasher.build_hasher();
        for part in parts {
            part.near_key.hash(&mut hasher);
            hasher.write_u64(part.policy.limits_id());
        }
        counting.hash(&mut hasher);
        InFlight {
            hash: hasher.finish(),
            first: parts.first().map(|part| part.near_key),
            parts: parts.len(),
            counting,
            by,
        }
    }

    /// A check of `key` arrives: it leads when nothing is in flight,
    /// otherwise it waits behind the exchange in flight.
    pub(in crate::limiter) fn join(
        &self,
        key: &InFlight,
        costs: &Costs,
        deadline: Deadline,
    ) -> Joined {
        let mut shard = self.shards.shard(key);
        match find(&mut shard, key) {
            Some(waiting) => {
                let (reply, turn) = oneshot::channel();
                waiting.push_back(Member {
                    costs: copied(costs),
                    deadline,
                    reply: Some(reply),
                });
                Joined::Wait(turn)
            }
            None => {
                shard.insert_unique(key.hash, (*key, VecDeque::new()), |(key, _)| key.hash);
                Joined::Lead
            }
        }
    }

    /// The exchange for `key` is over: hand the lead on (see [`pass_on`]).
    pub(in crate::limiter) fn pass_on(&self, key: InFlight, left: Vec<Member>) {
        pass_on(&self.shards, key, left);
    }
}

/// Hand the lead of `key` to the next batch (`left`, the rest of a batch
/// whose leader gave up, first; then the checks gathered meanwhile), or
/// mark nothing in flight. The batch's latest check leads: its deadline,
/// the latest (one timeout, from the latest start), bounds the exchange,
/// and the leader answers each earlier one by the failure mode at its own
/// deadline if the exchange is not back by then. Its first check had
/// waited longest for the exchange before: leading, it gave the whole
/// batch the least time.
fn pass_on(shards: &Arc<Shards>, key: InFlight, mut left: Vec<Member>) {
    loop {
        if left.is_empty() {
            let mut shard = shards.shard(&key);
            let Ok(entry) = shard.find_entry(key.hash, |(in_flight, _)| *in_flight == key) else {
                return;
            };
            if entry.get().1.is_empty() {
                entry.remove();
                return;
            }
            let waiting = &mut entry.into_mut().1;
            let take = waiting.len().min(MAX_BATCH);
            left = waiting.drain(..take).collect();
        }
        let Some(mut next) = left.pop() else {
            continue;
        };
        let hand_off = HandOff {
            shards: shards.clone(),
            key,
            others: Some(std::mem::take(&mut left)),
        };
        let Some(reply) = next.reply.take() else {
            left = hand_off.take();
            continue;
        };
        match reply.send(Turn::Lead(hand_off)) {
            Ok(()) => return,
            // Its caller is gone: the next one leads.
            Err(Turn::Lead(hand_off)) => left = hand_off.take(),
            // Never sent to a check that leads (and it holds nothing).
            Err(Turn::Decided(..)) => return,
        }
    }
}

/// A leader's hold on its key's turn: dropped before the batch is decided
/// (its caller gave up), it passes the lead to the batch's other checks.
pub(in crate::limiter) struct Lead<'a> {
    /// Whose turn it holds; `None` for a check decided alone (coalescing
    /// off).
    pub(in crate::limiter) turn: Option<(&'a Coalescer, InFlight)>,
    /// The other requests of the batch, until they are answered.
    pub(in crate::limiter) others: Vec<Member>,
}

impl Lead<'_> {
    /// A batch of one, with no turn to pass on.
    pub(in crate::limiter) fn alone() -> Lead<'static> {
        Lead {
            turn: None,
            others: Vec::new(),
        }
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if let Some((coalescer, key)) = self.turn.take() {
            coalescer.pass_on(key, std::mem::take(&mut self.others));
        }
    }
}
