//! What travels down the pipeline: a request of one or more items (a
//! check is a request of one), each item's counters named once.

use smallvec::SmallVec;

use super::deadline::Deadline;
use crate::near_cache::{Items, NearKey};
use crate::policy::{Limit, Policy};
use crate::store::KeyDigest;
use crate::window::Counting;

/// One part of a request decided by [`Limiter::check_all`](super::Limiter::check_all).
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    pub key: &'a str,
    pub policy: &'a Policy,
    pub cost: u64,
}

/// An item as the stages see it: its counters' digest and near-cache key,
/// computed once.
#[derive(Clone, Copy)]
pub(super) struct Part<'a> {
    pub digest: KeyDigest,
    pub near_key: NearKey,
    pub policy: &'a Policy,
}

impl<'a> Part<'a> {
    #[inline]
    pub(super) fn of(key: &str, policy: &'a Policy) -> Part<'a> {
        let digest = KeyDigest::of(policy.scope(), key);
        Part {
            digest,
            near_key: NearKey::new(digest, policy),
            policy,
        }
    }

    pub(super) fn limits(&self) -> &'a [Limit] {
        self.policy.limits()
    }
}

/// The parts of a request: inline for one, so a check allocates none.
pub(super) type Parts<'a> = SmallVec<[Part<'a>; 1]>;
/// One cost per part of a request.
pub(super) type Costs = SmallVec<[u64; 1]>;

/// `costs` copied: built in place for one part (a clone goes through
/// `Extend`, which stood out in a hot key's profile).
pub(super) fn copied(costs: &Costs) -> Costs {
    match costs.as_slice() {
        [cost] => SmallVec::from_buf([*cost]),
        costs => costs.iter().copied().collect(),
    }
}

/// A request as it reaches the exchange: the near-cache refused none of
/// its parts.
#[derive(Clone)]
pub(super) struct Arrival<'a> {
    pub parts: Parts<'a>,
    pub costs: Costs,
    pub counting: Counting,
    /// The instant it is decided at if it leads at once.
    pub now_ms: u64,
    /// When its store work must be done by, waiting included.
    pub deadline: Deadline,
    /// How many items the request asked for, its parts and those the
    /// screen refused: what it reads may hold the additions of other
    /// requests of several items (see `Screen::remember`).
    pub by: Items,
    /// Whether it read a near-cache entry again before it came: then its
    /// deadline may fall before its leader's, so it waits with a timer.
    pub read_again: bool,
}

impl Arrival<'_> {
    /// Every limit of every part: what a bucket boundary is checked on.
    pub(super) fn limits(&self) -> impl Iterator<Item = &Limit> {
        self.parts.iter().flat_map(|part| part.limits())
    }
}

/// A request's decisions, one per part.
pub(super) type Decisions = SmallVec<[super::Decision; 1]>;
