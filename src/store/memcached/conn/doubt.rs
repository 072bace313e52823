//! When a node last gave reason to doubt that it holds every count: a
//! connection of it ended or could not be dialled, a call to it failed, or
//! it joined (or moved) after the store started. A node that restarted or
//! was replaced is empty, and one that missed additions for a while holds
//! less than it should; either way, for as long as a counter it held then
//! can live, its counts are only a floor, and a key's replicas decide
//! together (see the store's `exchange.rs`). A doubt also forgets the
//! node's birth (`Born`): it is asked again on the next exchange.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::status::NodeClock;

#[derive(Debug, Default)]
pub struct Doubt {
    /// The node's microsecond of the last doubt, plus one; 0: never.
    last_us: AtomicU64,
    /// When the node was born (`Command::Born`), in Unix seconds; 0: not
    /// known since the last doubt.
    born_s: AtomicU64,
    /// Doubts so far: a birth asked before a doubt is not believed after.
    generation: AtomicU64,
}

impl Doubt {
    pub(super) fn now(&self, clock: NodeClock) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.born_s.store(0, Ordering::SeqCst);
        self.last_us
            .store(clock.now_us().saturating_add(1), Ordering::Relaxed);
    }

    /// The node's birth, if known since its last doubt.
    pub(super) fn born(&self) -> Option<u64> {
        Some(self.born_s.load(Ordering::SeqCst)).filter(|&born| born != 0)
    }

    /// Doubts so far, to give [`learn_born`](Self::learn_born).
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The birth the node answered, asked at `generation`: kept unless a
    /// doubt came since (the answer may be the node's before it restarted).
    pub(super) fn learn_born(&self, born: u64, generation: u64) {
        if self.generation() == generation {
            self.born_s.store(born, Ordering::SeqCst);
            if self.generation() != generation {
                self.born_s.store(0, Ordering::SeqCst);
            }
        }
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

    /// A birth asked before a doubt is forgotten; one asked after is kept
    /// until the next doubt.
    #[test]
    fn a_birth_holds_until_the_next_doubt() {
        let clock = NodeClock(std::time::Instant::now());
        let doubt = Doubt::default();
        assert_eq!(doubt.born(), None);
        let asked = doubt.generation();
        doubt.now(clock);
        doubt.learn_born(1_700_000_000, asked);
        assert_eq!(doubt.born(), None, "asked before the doubt");
        doubt.learn_born(1_700_000_000, doubt.generation());
        assert_eq!(doubt.born(), Some(1_700_000_000));
        doubt.now(clock);
        assert_eq!(doubt.born(), None);
    }
}
