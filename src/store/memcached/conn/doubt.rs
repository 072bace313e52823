//! When a node last gave reason to doubt that it holds every count: a
//! connection of it ended or could not be dialled, a call to it failed, or
//! it joined (or moved) after the store started. A node that restarted or
//! was replaced is empty, and one that missed additions for a while holds
//! less than it should; either way, for as long as a counter it held then
//! can live, its counts are only a floor, and a key's replicas decide
//! together (see the store's `exchange.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::status::NodeClock;

#[derive(Debug, Default)]
pub struct Doubt {
    /// The node's microsecond of the last doubt, plus one; 0: never.
    last_us: AtomicU64,
}

impl Doubt {
    pub(super) fn now(&self, clock: NodeClock) {
        self.last_us
            .store(clock.now_us().saturating_add(1), Ordering::Relaxed);
    }

    /// Whether the node was doubted within the last `span`.
    pub(super) fn within(&self, clock: NodeClock, span: Duration) -> bool {
        let last = self.last_us.load(Ordering::Relaxed);
        last != 0
            && clock.now_us().saturating_sub(last - 1)
                <= u64::try_from(span.as_micros()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doubt_lasts_its_span() {
        let clock = NodeClock(std::time::Instant::now());
        let doubt = Doubt::default();
        assert!(!doubt.within(clock, Duration::from_secs(3600)));
        doubt.now(clock);
        assert!(doubt.within(clock, Duration::from_secs(3600)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!doubt.within(clock, Duration::from_millis(1)));
    }
}
