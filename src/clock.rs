//! Where "now" comes from.
//!
//! Every decision takes the time as an argument, so the limiter reads the
//! clock exactly once per call, and tests move time by hand instead of
//! sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// Buckets are aligned on the epoch, so every instance sharing a Memcached
/// must read the same wall clock (NTP-synchronised hosts do); a monotonic
/// clock would give each process its own buckets.
///
/// Wall time places buckets and nothing else: it can be set back between
/// two readings, so an interval (a timeout, the spacing of probes) is
/// always measured on the monotonic clock (`Instant`), never as the
/// difference of two `now_ms` readings.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        wall_ms()
    }
}

/// The wall clock in milliseconds since the epoch, read from
/// `clock_gettime` itself: a check reads it twice, and through
/// `SystemTime::duration_since` each reading cost three times as much.
/// A clock set before 1970 is a broken host; reading it as the epoch keeps
/// the limiter running (conservatively, on old buckets).
#[cfg(unix)]
fn wall_ms() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a timespec clock_gettime may write; CLOCK_REALTIME
    // always exists, and a failure leaves `now` at the epoch.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let (Ok(seconds), Ok(nanos)) = (u64::try_from(now.tv_sec), u64::try_from(now.tv_nsec)) else {
        return 0;
    };
    seconds
        .saturating_mul(1000)
        .saturating_add(nanos / 1_000_000)
}

#[cfg(not(unix))]
fn wall_ms() -> u64 {
    system_time_ms()
}

/// The wall clock through `SystemTime`.
#[cfg(any(test, not(unix)))]
fn system_time_ms() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        self.now_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// A shared clock is a clock: the server keeps a handle to read its
/// counters while the limiter reads the time.
impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// A backward step smaller than this is two threads' readings crossing,
/// not the clock being set back.
const BACKWARD_JUMP_MS: u64 = 100;

/// A clock that notices when the clock it reads is set back (an NTP step,
/// an operator): it logs the jump and counts it, and passes the time on
/// unchanged. A jump back of s ms replays up to s ms of buckets, so the
/// counts of those buckets are added to, not restarted: the limiter stays
/// conservative; a jump forward just skips buckets.
pub struct WatchedClock<C> {
    inner: C,
    latest_ms: AtomicU64,
    backward_jumps: AtomicU64,
}

impl<C: Clock> WatchedClock<C> {
    pub fn new(inner: C) -> WatchedClock<C> {
        WatchedClock {
            inner,
            latest_ms: AtomicU64::new(0),
            backward_jumps: AtomicU64::new(0),
        }
    }

    /// Backward jumps of more than 100 ms seen since the start.
    pub fn backward_jumps(&self) -> u64 {
        self.backward_jumps.load(Ordering::Relaxed)
    }
}

impl<C: Clock> Clock for WatchedClock<C> {
    fn now_ms(&self) -> u64 {
        let now = self.inner.now_ms();
        let latest = self.latest_ms.fetch_max(now, Ordering::Relaxed);
        if now.saturating_add(BACKWARD_JUMP_MS) < latest
            // Only the reading that resets the mark counts the jump.
            && self
                .latest_ms
                .compare_exchange(latest, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.backward_jumps.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                back_by_ms = latest - now,
                "the local clock jumped backward; buckets of that span are counted again"
            );
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read from `clock_gettime`, the wall clock is `SystemTime`'s, to
    /// the millisecond (two readings a moment apart).
    #[test]
    fn the_system_clock_reads_the_same_time_as_system_time() {
        for _ in 0..100 {
            let before = system_time_ms();
            let read = SystemClock.now_ms();
            let after = system_time_ms();
            assert!(
                (before..=after).contains(&read),
                "{read} not within {before}..={after}"
            );
        }
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::new(1_000);
        let other = clock.clone();
        clock.advance(Duration::from_millis(250));
        assert_eq!(other.now_ms(), 1_250);
        other.set(5);
        assert_eq!(clock.now_ms(), 5);
    }

    #[test]
    fn a_backward_jump_is_counted_once() {
        let manual = ManualClock::new(10_000);
        let watched = WatchedClock::new(manual.clone());
        assert_eq!(watched.now_ms(), 10_000);
        manual.set(9_950);
        watched.now_ms();
        assert_eq!(watched.backward_jumps(), 0, "within the tolerance");
        manual.set(5_000);
        assert_eq!(watched.now_ms(), 5_000, "the time passes on unchanged");
        watched.now_ms();
        manual.advance(Duration::from_millis(10));
        watched.now_ms();
        assert_eq!(watched.backward_jumps(), 1);
        manual.set(1_000);
        watched.now_ms();
        assert_eq!(watched.backward_jumps(), 2);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
