//! Seeded request traces, generated as a stream: memory grows with the
//! number of clients, never with the number of requests.
//!
//! A trace is a set of sources, each an arrival process for one client; a
//! heap merges them in time order. Every source has its own random stream,
//! seeded from the trace's seed and the source's index, so a trace is the
//! same on every run and on every machine.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub t_ms: u64,
    pub client: u32,
    pub cost: u64,
}

/// SplitMix64: tiny, fast, and good enough for arrival times; its output
/// is fixed by its definition, so traces do not change with a crate update.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn between(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    /// An exponential wait with mean `mean`.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// How one source sends.
#[derive(Clone, Debug)]
pub enum Pattern {
    /// Poisson arrivals, `mean_gap_ms` apart on average.
    Poisson { mean_gap_ms: f64 },
    /// Poisson at `mean_gap_ms` while on; on and off periods exponential.
    OnOff {
        mean_gap_ms: f64,
        mean_on_ms: f64,
        mean_off_ms: f64,
    },
    /// `per_side` requests spread evenly (with jitter) over the
    /// `half_width_ms` before and the `half_width_ms` after every
    /// `every_ms`-th instant of the epoch, offset by `phase_ms`.
    Straddle {
        per_side: u64,
        half_width_ms: f64,
        every_ms: u64,
        phase_ms: u64,
    },
    /// At the given offsets (ms from the trace's start, ascending): for
    /// hand-made traces (the tests').
    #[cfg_attr(not(test), allow(dead_code))]
    At(Vec<f64>),
}

/// One client's arrival process, with its random stream and position.
#[derive(Clone, Debug)]
pub struct Source {
    pub client: u32,
    pub cost: u64,
    pub pattern: Pattern,
    rng: Rng,
    /// The next arrival, in ms since the trace started.
    next: f64,
    /// OnOff: when the current on period ends. Straddle: the burst's index.
    mark: f64,
    /// Straddle: the request's index within the burst.
    index: u64,
}

impl Source {
    pub fn new(client: u32, cost: u64, pattern: Pattern, seed: u64) -> Source {
        let mut source = Source {
            client,
            cost,
            pattern,
            rng: Rng::new(seed),
            next: 0.0,
            mark: 0.0,
            index: 0,
        };
        source.start();
        source
    }

    fn start(&mut self) {
        match self.pattern {
            Pattern::Poisson { mean_gap_ms } => self.next = self.rng.exponential(mean_gap_ms),
            Pattern::OnOff {
                mean_gap_ms,
                mean_on_ms,
                mean_off_ms,
            } => {
                // Start at a random point of the on/off cycle.
                let on_start = self.rng.exponential(mean_off_ms);
                self.mark = on_start + self.rng.exponential(mean_on_ms);
                self.next = on_start + self.rng.exponential(mean_gap_ms);
                self.skip_off_periods();
            }
            Pattern::At(ref offsets) => {
                self.next = offsets.first().copied().unwrap_or(f64::INFINITY);
            }
            Pattern::Straddle { .. } => {
                self.mark = 1.0;
                self.index = 0;
                self.next = self.burst_time();
            }
        }
    }

    fn advance(&mut self) {
        match self.pattern {
            Pattern::Poisson { mean_gap_ms } => self.next += self.rng.exponential(mean_gap_ms),
            Pattern::OnOff { mean_gap_ms, .. } => {
                self.next += self.rng.exponential(mean_gap_ms);
                self.skip_off_periods();
            }
            Pattern::At(ref offsets) => {
                self.index += 1;
                self.next = offsets
                    .get(self.index as usize)
                    .copied()
                    .unwrap_or(f64::INFINITY);
            }
            Pattern::Straddle { per_side, .. } => {
                self.index += 1;
                if self.index == 2 * per_side {
                    self.index = 0;
                    self.mark += 1.0;
                }
                self.next = self.burst_time();
            }
        }
    }

    /// OnOff: an arrival past the end of the on period falls in the next
    /// one (arrivals are memoryless, so restarting the wait is exact).
    fn skip_off_periods(&mut self) {
        if let Pattern::OnOff {
            mean_gap_ms,
            mean_on_ms,
            mean_off_ms,
        } = self.pattern
        {
            while self.next > self.mark {
                let on_start = self.mark + self.rng.exponential(mean_off_ms);
                self.mark = on_start + self.rng.exponential(mean_on_ms);
                self.next = on_start + self.rng.exponential(mean_gap_ms);
            }
        }
    }

    fn burst_time(&mut self) -> f64 {
        let Pattern::Straddle {
            per_side,
            half_width_ms,
            every_ms,
            phase_ms,
        } = self.pattern
        else {
            return f64::INFINITY;
        };
        let centre = self.mark * every_ms as f64 + phase_ms as f64;
        let spacing = 2.0 * half_width_ms / (2 * per_side) as f64;
        centre - half_width_ms + (self.index as f64 + self.rng.unit()) * spacing
    }
}

/// A trace: what it models, its limit, and its sources.
#[derive(Clone, Debug)]
pub struct Trace {
    pub name: String,
    pub about: String,
    pub window_ms: u64,
    pub limit: u64,
    /// The first instant, aligned on the window (as real buckets are).
    pub start_ms: u64,
    pub duration_ms: u64,
    pub sources: Vec<Source>,
}

impl Trace {
    pub fn requests(&self) -> Requests {
        let mut heap = BinaryHeap::with_capacity(self.sources.len());
        for (index, source) in self.sources.iter().enumerate() {
            heap.push(Reverse((Ordered(source.next), index)));
        }
        Requests {
            sources: self.sources.clone(),
            heap,
            start_ms: self.start_ms,
            duration_ms: self.duration_ms as f64,
        }
    }

    pub fn clients(&self) -> usize {
        self.sources
            .iter()
            .map(|source| source.client as usize + 1)
            .max()
            .unwrap_or(0)
    }
}

/// The requests of a trace in time order (ties by source index).
pub struct Requests {
    sources: Vec<Source>,
    heap: BinaryHeap<Reverse<(Ordered, usize)>>,
    start_ms: u64,
    duration_ms: f64,
}

impl Iterator for Requests {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        loop {
            let Reverse((Ordered(at), index)) = self.heap.pop()?;
            if at >= self.duration_ms {
                // Every source's arrivals only move forward: once the
                // earliest is past the end, the trace is over.
                self.heap.clear();
                return None;
            }
            let source = &mut self.sources[index];
            let request = Request {
                t_ms: self.start_ms + at.max(0.0) as u64,
                client: source.client,
                cost: source.cost,
            };
            source.advance();
            self.heap.push(Reverse((Ordered(source.next), index)));
            if at >= 0.0 {
                return Some(request);
            }
        }
    }
}

/// An f64 with a total order, for the heap (arrival times are never NaN).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Ordered(f64);

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_ordered_reproducible_and_at_the_rate_asked() {
        let trace = crate::catalogue::steady(110, 0.1);
        let first: Vec<Request> = trace.requests().collect();
        let again: Vec<Request> = trace.requests().collect();
        assert_eq!(first, again);
        assert!(first.windows(2).all(|pair| pair[0].t_ms <= pair[1].t_ms));
        // 50 clients x 2.2 per second x 720 s = 79,200.
        let expected = 50.0 * 2.2 * 720.0;
        let got = first.len() as f64;
        assert!((got - expected).abs() < 0.02 * expected, "{got}");
        let end = trace.start_ms + trace.duration_ms;
        assert!(
            first
                .iter()
                .all(|r| r.t_ms >= trace.start_ms && r.t_ms < end)
        );
    }

    #[test]
    fn straddling_bursts_sit_on_window_boundaries() {
        let source = Source::new(
            0,
            1,
            Pattern::Straddle {
                per_side: 5,
                half_width_ms: 1_000.0,
                every_ms: 60_000,
                phase_ms: 0,
            },
            7,
        );
        let trace = Trace {
            name: "t".into(),
            about: String::new(),
            window_ms: 60_000,
            limit: 5,
            start_ms: 0,
            duration_ms: 130_000,
            sources: vec![source],
        };
        let times: Vec<u64> = trace.requests().map(|r| r.t_ms).collect();
        assert_eq!(times.len(), 20);
        assert!(times[..5].iter().all(|&t| (59_000..60_000).contains(&t)));
        assert!(times[5..10].iter().all(|&t| (60_000..61_000).contains(&t)));
        assert!(
            times[10..15]
                .iter()
                .all(|&t| (119_000..120_000).contains(&t))
        );
    }
}
