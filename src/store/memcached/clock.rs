//! A clock shared by every instance: the first Memcached node's.
//!
//! Buckets are aligned on the epoch, so instances whose hosts disagree by
//! s ms disagree on bucket boundaries by s ms. Redis limiters read the
//! store's `TIME`; Memcached has no such command, but its items expire on
//! its own clock, in whole seconds. So each instance estimates its offset to
//! that clock by watching it tick: the probe (`ma <ns>:clock:<E> N<E> J0 D0
//! t`) creates, once, an item whose absolute expiry E is in its name, and
//! answers its remaining TTL, so the node's current second is `E - ttl`.
//! When that second changes from N-1 to N between two probes, the node's
//! clock read N.000 at about the midpoint of the two; every instance sees
//! the same tick, so their offsets agree to about half the probe spacing
//! plus half a round trip, although the node's second is itself coarse.
//!
//! Cost: an estimate watches for a tick every 50 ms (at most 30 probes),
//! then waits for the next tick and watches it every 2 ms (at most 80
//! probes), on a connection of its own so checks never queue behind the
//! probes nor the probes behind checks. It runs at start and then once a
//! minute, watching the tick that turns the shared minute: memcached's
//! once-a-second timer drifts against real seconds (3 to 4 ms a second
//! here, with memcached 1.6.18), so instances agree best when they watch
//! the same tick. An instance started between two turns may disagree with
//! its peers by that drift times the time since the last turn until its
//! first turn. Between estimates, and when Memcached does not answer, the
//! time is the local clock plus the last offset (0 before the first).
//!
//! The probes are timed on the monotonic clock, and the local clock is read
//! once, at the end, to place the tick on it: an estimate during which the
//! local clock is set back neither fails nor goes astray, and its offset
//! applies to the local clock as it reads afterwards.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::conn::{Commands, Delivery};
use super::wire::{Command, Reply};
use super::{MemcachedOptions, MemcachedStore};
use crate::clock::Clock;
use crate::store::StoreError;

/// How often the offset is estimated again.
pub const REESTIMATE_EVERY: Duration = Duration::from_secs(60);
const COARSE_SPACING_MS: u64 = 50;
const COARSE_PROBES: usize = 30;
const FINE_SPACING_MS: u64 = 2;
const FINE_PROBES: usize = 80;
/// How early before the expected tick the fine watch begins.
const FINE_LEAD_MS: u64 = 60;
/// How early before the minute's turn an estimate begins: the coarse watch
/// then finds the tick before the turn, and the fine watch the turn.
const START_BEFORE_TURN_MS: u64 = 1_200;
/// A node whose clock is further from ours than this is refused (the probe
/// item's expiry, a day ahead, would already have passed on it).
const MAX_OFFSET_SECS: u64 = 20 * 60 * 60;

/// The time of the first Memcached node: local time plus an estimated
/// offset. See the module documentation.
pub struct MemcachedClock {
    local: Arc<dyn Clock>,
    offset_ms: AtomicI64,
    estimates: AtomicU64,
    failures: AtomicU64,
    synced: AtomicBool,
    changed: tokio::sync::Notify,
}

impl Clock for MemcachedClock {
    fn now_ms(&self) -> u64 {
        self.local
            .now_ms()
            .saturating_add_signed(self.offset_ms.load(Ordering::Relaxed))
    }
}

impl MemcachedClock {
    /// Start estimating the offset of `local` to the first server of
    /// `options`, in a task that ends when the clock is dropped. Returns at
    /// once; [`synced`](Self::synced) waits for the first estimate.
    pub async fn start(
        options: &MemcachedOptions,
        local: Arc<dyn Clock>,
    ) -> Result<Arc<MemcachedClock>, StoreError> {
        let probe_options = MemcachedOptions {
            servers: options.servers.iter().take(1).cloned().collect(),
            connections: 1,
            // One server: the clock is the first node's.
            replicas: 1,
            ..options.clone()
        };
        let store = MemcachedStore::connect(&probe_options).await?;
        let clock = Arc::new(MemcachedClock {
            local,
            offset_ms: AtomicI64::new(0),
            estimates: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            synced: AtomicBool::new(false),
            changed: tokio::sync::Notify::new(),
        });
        tokio::spawn(keep_estimating(store, Arc::downgrade(&clock)));
        Ok(clock)
    }

    /// Milliseconds added to the local clock.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Estimates made, and failed, since the start.
    pub fn estimates(&self) -> (u64, u64) {
        (
            self.estimates.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }

    /// Wait up to `within` for the first estimate; whether there is one.
    pub async fn synced(&self, within: Duration) -> bool {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.synced.load(Ordering::Acquire) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

async fn keep_estimating(store: MemcachedStore, clock: Weak<MemcachedClock>) {
    loop {
        let Some(strong) = clock.upgrade() else {
            return;
        };
        match estimate(&store, &*strong.local).await {
            Ok(offset_ms) => {
                let before = strong.offset_ms.swap(offset_ms, Ordering::Relaxed);
                strong.estimates.fetch_add(1, Ordering::Relaxed);
                strong.synced.store(true, Ordering::Release);
                strong.changed.notify_waiters();
                tracing::debug!(
                    offset_ms,
                    change_ms = offset_ms - before,
                    "shared clock estimated"
                );
            }
            Err(error) => {
                strong.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, offset_ms = strong.offset_ms(), "cannot read Memcached's clock; keeping the last offset");
            }
        }
        // Next just before the turn of the shared minute, so that every
        // instance watches the same tick, the one that turns it.
        let now = strong.now_ms();
        let minute = REESTIMATE_EVERY.as_millis() as u64;
        let mut start = (now / minute + 1) * minute - START_BEFORE_TURN_MS;
        if start < now + 5_000 {
            start += minute;
        }
        drop(strong);
        tokio::time::sleep(Duration::from_millis(start - now)).await;
    }
}

/// One probe: when it was sent and answered, on the monotonic clock, and
/// the node's second. Intervals between probes are taken on the monotonic
/// clock only: the local wall clock may be set back between two readings
/// (an NTP step, an operator), and a difference of two wall readings would
/// then be negative.
#[derive(Clone, Copy, Debug)]
struct Probe {
    sent: Instant,
    answered: Instant,
    second: u64,
}

impl Probe {
    fn middle(&self) -> Instant {
        self.sent + self.answered.saturating_duration_since(self.sent) / 2
    }
}

/// Whether the node's second ticked between `before` and `after`: by one,
/// as a clock does in the few milliseconds between two probes. Any other
/// change (a node replaced between probes, a restarted memcached, a
/// proxy answering for another node) is no tick to time: the estimate
/// fails, and the last offset is kept. Taken as one, it moved the shared
/// clock by as much as the jump, hours, for a minute.
fn ticked(before: &Probe, after: &Probe) -> Result<bool, StoreError> {
    match after.second.checked_sub(before.second) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(StoreError::Protocol(format!(
            "Memcached's clock went from second {} to {} between two probes",
            before.second, after.second
        ))),
    }
}

/// The instant the node's second changed between `before` and `after`, and
/// the second it changed to.
fn tick(before: &Probe, after: &Probe) -> (Instant, u64) {
    let between = after.middle().saturating_duration_since(before.middle());
    (before.middle() + between / 2, after.second)
}

async fn estimate(store: &MemcachedStore, local: &dyn Clock) -> Result<i64, StoreError> {
    let probe = || async {
        let sent = Instant::now();
        // The wall clock only names the probe item (its hour).
        let second = store.server_second(local.now_ms()).await?;
        Ok::<_, StoreError>(Probe {
            sent,
            answered: Instant::now(),
            second,
        })
    };
    // Coarse: any tick, to within 25 ms.
    let mut before = probe().await?;
    let mut coarse = None;
    for _ in 0..COARSE_PROBES {
        tokio::time::sleep(Duration::from_millis(COARSE_SPACING_MS)).await;
        let after = probe().await?;
        if ticked(&before, &after)? {
            coarse = Some(tick(&before, &after));
            break;
        }
        before = after;
    }
    let Some((coarse_at, coarse_second)) = coarse else {
        return Err(StoreError::Protocol(
            "Memcached's clock did not tick within 1.5 s".to_owned(),
        ));
    };
    // Fine: the next tick, watched closely from just before it.
    tokio::time::sleep_until(coarse_at + Duration::from_millis(1000 - FINE_LEAD_MS)).await;
    let mut before = probe().await?;
    for _ in 0..FINE_PROBES {
        tokio::time::sleep(Duration::from_millis(FINE_SPACING_MS)).await;
        let after = probe().await?;
        if ticked(&before, &after)? {
            let (at, second) = tick(&before, &after);
            return Ok(offset(second, at, local.now_ms(), Instant::now()));
        }
        before = after;
    }
    // The timer fired later than a second after the last tick: the coarse
    // estimate is still good to 25 ms.
    tracing::debug!("no tick during the fine watch; using the coarse estimate");
    Ok(offset(
        coarse_second,
        coarse_at,
        local.now_ms(),
        Instant::now(),
    ))
}

/// The offset from the local clock to the node's: the node's second turned
/// to `second` at `tick`, and the local clock read `local_ms` at `now`.
/// The one wall reading is the latest, so the offset applies to the local
/// clock as it reads now, even if it was set back during the estimate.
fn offset(second: u64, tick: Instant, local_ms: u64, now: Instant) -> i64 {
    let since_tick_ms =
        i64::try_from(now.saturating_duration_since(tick).as_millis()).unwrap_or(i64::MAX);
    (second as i64 * 1000).saturating_add(since_tick_ms) - local_ms as i64
}

impl MemcachedStore {
    /// The first node's current Unix second, as its items' expiry reads it
    /// (see [`MemcachedClock`]). `local_now_ms` names the probe item: its
    /// expiry is a day after the next local hour, so every instance shares
    /// one item an hour.
    pub async fn server_second(&self, local_now_ms: u64) -> Result<u64, StoreError> {
        let hour = local_now_ms / 1000 / 3600;
        let expires = (hour + 1) * 3600 + 24 * 3600;
        let expires_u32 = u32::try_from(expires)
            .map_err(|_| StoreError::Protocol("the local clock is past 2106".to_owned()))?;
        // The first node of the list in use: configured first, or listed
        // first by the cluster config, the same for every instance.
        let node = self
            .cell
            .load()
            .nodes
            .first()
            .cloned()
            .ok_or_else(|| self.no_nodes())?;
        let call = node.call(
            Commands::from_slice(&[Command::ClockProbe {
                expires: expires_u32,
            }]),
            Delivery::Plain,
        );
        let replies = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| StoreError::Timeout(self.timeout.as_millis() as u64))??;
        let remaining = match replies.first() {
            Some(Reply::Value(remaining)) => *remaining,
            other => {
                return Err(StoreError::Protocol(format!(
                    "the clock probe got {other:?}"
                )));
            }
        };
        let second = expires.checked_sub(remaining).ok_or_else(|| {
            StoreError::Protocol(format!("a TTL of {remaining} s outlives its expiry"))
        })?;
        if second.abs_diff(local_now_ms / 1000) > MAX_OFFSET_SECS {
            return Err(StoreError::Protocol(format!(
                "Memcached's clock reads {second}, more than {MAX_OFFSET_SECS} s from ours"
            )));
        }
        Ok(second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_is_placed_between_the_probes_that_straddle_it() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let before = Probe {
            sent: at(1_000),
            answered: at(1_002),
            second: 41,
        };
        let after = Probe {
            sent: at(1_004),
            answered: at(1_006),
            second: 42,
        };
        let (tick_at, second) = tick(&before, &after);
        assert_eq!((tick_at, second), (at(1_003), 42));
        // The local clock read 50_000 ms 7 ms after the tick: at the tick it
        // read 49_993, and the node 42_000.
        assert_eq!(offset(42, tick_at, 50_000, at(1_010)), -7_993);
    }

    /// Between two probes a few milliseconds apart, the node's second stays
    /// or moves on by one; a jump either way (another node, a restart) is
    /// no tick, and fails the estimate rather than moving the shared clock
    /// by hours.
    #[test]
    fn only_a_step_of_one_second_is_a_tick() {
        let start = Instant::now();
        let probe = |second| Probe {
            sent: start,
            answered: start,
            second,
        };
        let at = 1_800_000_000;
        assert!(!ticked(&probe(at), &probe(at)).unwrap());
        assert!(ticked(&probe(at), &probe(at + 1)).unwrap());
        for jumped in [at + 2, at + 36_000, at - 1, at - 3_600, 0, u64::MAX] {
            assert!(
                ticked(&probe(at), &probe(jumped)).is_err(),
                "{at} -> {jumped}"
            );
        }
    }
}
