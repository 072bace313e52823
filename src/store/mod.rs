//! Where the counters live: the [`Store`] trait, the identity of a counter,
//! and the two stores, [`MemoryStore`] (embedded, one process) and
//! `MemcachedStore` (shared by every instance; feature `memcached`).
//!
//! A store knows nothing of limits or decisions: it reads counters and adds
//! to them. Both stores keep the same semantics, which one behaviour suite
//! (`tests/behaviour/`) checks against each.

use std::future::Future;

use smallvec::SmallVec;

use crate::policy::Window;

#[cfg(feature = "memcached")]
pub mod memcached;
pub mod memory;

#[cfg(feature = "memcached")]
pub use memcached::{
    ConnectionStates, MemcachedClock, MemcachedOptions, MemcachedStore, NodeSnapshot, TlsOptions,
    TopologySnapshot, TopologySource,
};
pub use memory::{DEFAULT_MEMORY_CAPACITY, MemoryStore};

mod any;
mod digest;
pub mod reservation;
pub use any::AnyStore;
pub use digest::KeyDigest;
pub use reservation::{Reservation, Returns};

/// One counter: (scope and key, window and precision, bucket). The limit
/// value is not part of it, so changing a limit keeps the counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CounterKey {
    pub digest: KeyDigest,
    pub window: Window,
    pub bucket: u64,
}

/// How long a counter must outlive the start of its bucket. The counter of
/// sub-bucket `b` is read until bucket `b + k` ends, at most `W + W/k <= 2W`
/// after it can first be written. The margin covers Memcached's whole-second
/// clock and small clock differences between instances.
pub fn bucket_ttl_secs(window: Window) -> u64 {
    (2 * window.window_ms()).div_ceil(1000) + TTL_MARGIN_SECS
}

const TTL_MARGIN_SECS: u64 = 2;

/// Multiplexed connections per Memcached node when none is configured. Each
/// carries any number of concurrent checks; two keep both directions of a
/// node busy while each write still carries many checks (measured on the
/// book's performance page, docs/src/performance.md).
pub const DEFAULT_CONNECTIONS: usize = 2;

/// The longest a check may wait for the store (a limiter's timeout, and a
/// Memcached store's): a longer one is held to it. An hour is far past any
/// use, and keeps every deadline, stall bound and calm period computed from
/// a timeout clear of overflow.
pub const MAX_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3_600);

/// The shortest: a connection's deadline sweep counts in microseconds,
/// and its timer is set no closer than a timeout away.
pub const MIN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1);

/// `timeout` held within [`MIN_TIMEOUT`] and [`MAX_TIMEOUT`].
pub fn bounded_timeout(timeout: std::time::Duration) -> std::time::Duration {
    timeout.clamp(MIN_TIMEOUT, MAX_TIMEOUT)
}

/// How often an ElastiCache configuration endpoint is asked for the node
/// list when no interval is configured (AWS's own clients poll each minute).
pub const DEFAULT_DISCOVERY_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// The work of one round trip: read `reads`, then add `amount` to each of
/// `adds`, creating a missing counter with `amount` and the TTL of its
/// window. `now_ms` is the caller's clock, for stores that need the wall
/// time (absolute Memcached expiry, in-memory expiry).
#[derive(Clone, Debug)]
pub struct CounterBatch {
    pub reads: Counters,
    pub adds: Counters,
    pub amount: u64,
    pub now_ms: u64,
    /// When its caller stops waiting, for a store that keeps deadlines
    /// itself ([`Store::keeps_deadlines`]); `None` when the caller bounds
    /// the call.
    pub deadline: Option<CallDeadline>,
}

/// When a caller stops waiting for a call: `at`, `timeout` after its check
/// started. A store that keeps deadlines answers
/// [`StoreError::Timeout`]`(timeout)` then, and counts nothing.
#[derive(Clone, Copy, Debug)]
pub struct CallDeadline {
    pub at: std::time::Instant,
    pub timeout: std::time::Duration,
}

/// What a [`CounterBatch`] found: `read[i]` for `reads[i]` (0 when missing)
/// and `added[i]`, the value of `adds[i]` right after the addition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchCounts {
    pub read: Values,
    pub added: Values,
}

/// Counters of one call: a few per limit, inline up to four (one limit at
/// precision 3, or two limits at precision 1) so most checks allocate none.
pub type Counters = SmallVec<[CounterKey; 4]>;
/// Values of one call's counters, inline like [`Counters`].
pub type Values = SmallVec<[u64; 4]>;

/// A counter store. Additions are atomic per counter, so concurrent callers
/// each see a distinct value after their addition.
pub trait Store: Send + Sync + 'static {
    /// Run a batch in one round trip. An error leaves nothing of the batch
    /// counted, except when the outcome is unknown (a timeout, an
    /// `Ambiguous` reply lost): a store that had some commands applied and
    /// one refused takes back what was applied before it answers the error.
    fn read_and_add(
        &self,
        batch: &CounterBatch,
    ) -> impl Future<Output = Result<BatchCounts, StoreError>> + Send;

    /// Take `amount` back from each counter, saturating at 0: the rollback of
    /// an addition that turned out to be over the limit. Returns each value
    /// after, `None` for a counter that no longer exists.
    ///
    /// The subtraction starts on the future's first poll and completes
    /// even if the future is then dropped: a rollback must happen whoever
    /// waits for it (the limiter relies on this when a caller gives up).
    fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        now_ms: u64,
    ) -> impl Future<Output = Result<Vec<Option<u64>>, StoreError>> + Send;

    /// Several [`subtract`](Store::subtract)s at once, one per key (each
    /// `(counters, amount)`): the rollback of a refused request of several
    /// keys. Each result is its own, so one node failing loses only its
    /// keys' values. By default every subtraction is in flight at once, so
    /// a pipelined store sends them together; a store may group them by
    /// node instead.
    fn subtract_many<'a>(
        &'a self,
        takes: &'a [(&'a [CounterKey], u64)],
        now_ms: u64,
    ) -> impl Future<Output = Vec<Result<Vec<Option<u64>>, StoreError>>> + Send + 'a {
        let calls = takes
            .iter()
            .map(|&(counters, amount)| self.subtract(counters, amount, now_ms))
            .collect();
        crate::join::join_all(calls)
    }

    /// Mark counters as in use, changing nothing, with no round trip: a
    /// key the near-cache refuses asks nothing of the store, yet its counts
    /// are what its next check reads. The embedded store, which evicts the
    /// least recently used counter when full, keeps them as an asking
    /// client's. Memcached's keep their TTL, and the near-cache's read
    /// again (once per interval) is a use in its LRU: nothing to do.
    fn touch(&self, _counters: &[CounterKey], _now_ms: u64) {}

    /// Whether [`touch`](Store::touch) does anything: a caller that would
    /// build the counters' keys only to touch them skips that where not.
    fn keeps_what_is_touched(&self) -> bool {
        false
    }

    /// Remove counters (one key's: they live on one node), so that they
    /// read 0: a reset. Returns how many existed at `now_ms`.
    fn remove(
        &self,
        counters: &[CounterKey],
        now_ms: u64,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Whether the store can decide: for a store of several nodes, whether
    /// any node answers (a lost node costs only its own keys).
    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`ping`](Self::ping), with the state of each node: what `/readyz`
    /// tells. A store of one process has no nodes to name.
    fn readiness(&self) -> impl Future<Output = Readiness> + Send {
        async move {
            Readiness {
                result: self.ping().await,
                nodes: Vec::new(),
            }
        }
    }

    /// `memory` or `memcached`, for logs, metrics and `/readyz`.
    fn kind(&self) -> &'static str;

    /// Whether [`read_and_add`](Self::read_and_add) answers by its batch's
    /// [`deadline`](CounterBatch::deadline) itself, so that its caller
    /// needs no timer of its own (a Memcached connection keeps one for all
    /// of its calls).
    fn keeps_deadlines(&self) -> bool {
        false
    }
}

/// Whether a store can decide, node by node.
#[derive(Clone, Debug)]
pub struct Readiness {
    /// `Ok` while any node answers.
    pub result: Result<(), StoreError>,
    /// Each node (`host:port`) and whether it answered.
    pub nodes: Vec<NodeReadiness>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReadiness {
    pub node: String,
    pub up: bool,
}

/// A shared store: several limiters (say, with different failure modes) can
/// count into one.
impl<S: Store> Store for std::sync::Arc<S> {
    fn read_and_add(
        &self,
        batch: &CounterBatch,
    ) -> impl Future<Output = Result<BatchCounts, StoreError>> + Send {
        (**self).read_and_add(batch)
    }

    fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        now_ms: u64,
    ) -> impl Future<Output = Result<Vec<Option<u64>>, StoreError>> + Send {
        (**self).subtract(counters, amount, now_ms)
    }

    fn subtract_many<'a>(
        &'a self,
        takes: &'a [(&'a [CounterKey], u64)],
        now_ms: u64,
    ) -> impl Future<Output = Vec<Result<Vec<Option<u64>>, StoreError>>> + Send + 'a {
        (**self).subtract_many(takes, now_ms)
    }

    fn touch(&self, counters: &[CounterKey], now_ms: u64) {
        (**self).touch(counters, now_ms)
    }

    fn keeps_what_is_touched(&self) -> bool {
        (**self).keeps_what_is_touched()
    }

    fn remove(
        &self,
        counters: &[CounterKey],
        now_ms: u64,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send {
        (**self).remove(counters, now_ms)
    }

    fn ping(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).ping()
    }

    fn readiness(&self) -> impl Future<Output = Readiness> + Send {
        (**self).readiness()
    }

    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn keeps_deadlines(&self) -> bool {
        (**self).keeps_deadlines()
    }
}

/// A store failure. Being over a limit is never an error; this is only the
/// store not answering as it should.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no answer within {0} ms")]
    Timeout(u64),
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The request was sent but its outcome is unknown: it may or may not
    /// have been applied, so it must not be retried.
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// Too many requests already wait for the store: refused at once, so
    /// the failure mode decides rather than a queue without bound.
    #[error("overloaded: {0}")]
    Overloaded(String),
}

impl StoreError {
    /// Whether the store may well answer the next call (a timeout, a
    /// connection down) rather than being wrong every time.
    pub fn is_transient(&self) -> bool {
        !matches!(self, StoreError::Protocol(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_covers_two_windows_plus_margin() {
        assert_eq!(bucket_ttl_secs(Window::new(250, 1).unwrap()), 3);
        assert_eq!(bucket_ttl_secs(Window::new(60_000, 1).unwrap()), 122);
        assert_eq!(bucket_ttl_secs(Window::new(60_000, 60).unwrap()), 122);
    }
}
