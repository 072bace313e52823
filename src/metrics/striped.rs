//! Counters spread over cache lines, one line per stripe, each thread
//! adding to its own stripe; a read sums the stripes.
//!
//! Every check bumps about seven shared counters (its policy's outcome,
//! the check's and the store call's latency buckets and sums, the store
//! calls, the decisions by source). On one shared cache line, two cores
//! adding at a million checks a second take turns owning the line: a
//! profile at 256 callers showed the `lock add` of the latency sum as the
//! costliest instruction of `Metrics::decided`. With a line per stripe,
//! each core keeps its own.
//!
//! A read is a sum of relaxed loads, so a scrape racing additions may see
//! some of them and not others, as with any counter read while it moves.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter: the threads that add to one counter at once are
/// the runtime's workers, a few; more stripes only cost memory and reads.
const STRIPES: usize = 8;

/// `N` counters, striped together: one stripe holds all `N` on its own
/// cache line (or lines), so one counter of `N` values costs one line
/// per stripe, not `N`.
#[derive(Debug)]
pub(crate) struct StripedArray<const N: usize> {
    stripes: [Line<N>; STRIPES],
}

#[derive(Debug)]
#[repr(align(64))]
struct Line<const N: usize>([AtomicU64; N]);

impl<const N: usize> Default for StripedArray<N> {
    fn default() -> Self {
        StripedArray {
            stripes: std::array::from_fn(|_| Line(std::array::from_fn(|_| AtomicU64::new(0)))),
        }
    }
}

impl<const N: usize> StripedArray<N> {
    /// Add `by` to counter `index`, on this thread's stripe.
    pub(crate) fn add(&self, index: usize, by: u64) -> u64 {
        self.stripes[stripe()].0[index].fetch_add(by, Ordering::Relaxed)
    }

    /// Counter `index`: the sum of its stripes.
    pub(crate) fn get(&self, index: usize) -> u64 {
        self.stripes.iter().fold(0u64, |sum, line| {
            sum.wrapping_add(line.0[index].load(Ordering::Relaxed))
        })
    }
}

/// One striped counter, as a `prometheus-client` counter's atomic: a
/// `Counter<u64, Striped>` encodes and registers like any counter.
pub(crate) type Striped = StripedArray<1>;

impl prometheus_client::metrics::counter::Atomic<u64> for Striped {
    fn inc(&self) -> u64 {
        self.add(0, 1)
    }

    /// Returns the value of this thread's stripe before the addition, not
    /// the counter's (nothing here reads it).
    fn inc_by(&self, by: u64) -> u64 {
        self.add(0, by)
    }

    fn get(&self) -> u64 {
        StripedArray::get(self, 0)
    }
}

/// This thread's stripe: threads take stripes in turn as they first add,
/// so the first `STRIPES` threads never share one.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|stripe| *stripe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn a_read_sums_every_threads_additions() {
        let counters = std::sync::Arc::new(StripedArray::<3>::default());
        let threads: Vec<_> = (0..2 * STRIPES as u64)
            .map(|thread| {
                let counters = counters.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        counters.add(1, thread + 1);
                    }
                    counters.add(2, 1);
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let n = 2 * STRIPES as u64;
        assert_eq!(counters.get(0), 0);
        assert_eq!(counters.get(1), 1000 * n * (n + 1) / 2);
        assert_eq!(counters.get(2), n);
    }

    #[test]
    fn a_striped_prometheus_counter_counts_and_encodes() {
        let counter = Counter::<u64, Striped>::default();
        counter.inc();
        counter.inc_by(41);
        assert_eq!(counter.get(), 42);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("answers", "Answers", counter.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("answers_total 42\n"), "{text}");
    }
}
