//! The yardsticks: an exact sliding log per client, and the tally that
//! holds a limiter's decisions against it.
//!
//! Every decider (slidegate at some precision, the fixed window, the exact
//! log itself) is judged on its own admitted history: before each request,
//! the exact cost that decider admitted for the client in `(t - W, t]` is
//! known, so each decision can be compared with the one the exact rule
//! would make in the same state. That isolates the error of the estimate
//! from the drift between two limiters' histories, which is reported apart
//! (`differs`: the decision is not the one an independent exact log,
//! replaying the same requests with its own admitted history, made).

use std::collections::VecDeque;

/// The admitted cost of one client in the last window, exactly.
#[derive(Debug, Default)]
pub struct SlidingLog {
    admitted: VecDeque<(u64, u64)>,
    sum: u64,
}

impl SlidingLog {
    /// The admitted cost in `(now - window, now]`.
    pub fn sum_at(&mut self, now_ms: u64, window_ms: u64) -> u64 {
        while let Some(&(at, cost)) = self.admitted.front() {
            if at + window_ms > now_ms {
                break;
            }
            self.admitted.pop_front();
            self.sum -= cost;
        }
        self.sum
    }

    pub fn admit(&mut self, now_ms: u64, cost: u64) {
        self.admitted.push_back((now_ms, cost));
        self.sum += cost;
    }
}

/// How one decider did over a trace.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub requests: u64,
    pub admitted: u64,
    /// Admitted, though its own admitted cost in the window plus this one
    /// exceeded the limit.
    pub wrongly_admitted: u64,
    /// Rejected, though it would have fitted.
    pub wrongly_rejected: u64,
    /// Decided otherwise than the independent exact log.
    pub differs: u64,
    /// Sum and largest of |estimate - exact| / limit, before each request.
    pub error_sum: f64,
    pub error_max: f64,
    /// Sum of |estimate - exact| / exact, and how many requests it sums
    /// (those with a non-empty window): the difference between estimated
    /// and real rate, as Cloudflare gives it.
    pub rate_error_sum: f64,
    pub rate_error_requests: u64,
    /// The largest (admitted cost in a window of length W) - limit.
    pub most_over: i64,
}

impl Tally {
    pub fn percent(&self, count: u64) -> f64 {
        100.0 * count as f64 / self.requests.max(1) as f64
    }

    pub fn mean_error(&self) -> f64 {
        self.error_sum / self.requests.max(1) as f64
    }

    pub fn mean_rate_error(&self) -> f64 {
        self.rate_error_sum / self.rate_error_requests.max(1) as f64
    }
}

/// One decider's admitted history per client, and its tally.
pub struct Judge {
    window_ms: u64,
    limit: u64,
    /// Log every request, admitted or not: Cloudflare's counting model,
    /// where the rate of a source is what it sends, not what got through.
    count_all: bool,
    logs: Vec<SlidingLog>,
    pub tally: Tally,
}

impl Judge {
    pub fn new(window_ms: u64, limit: u64, clients: usize) -> Judge {
        Judge {
            window_ms,
            limit,
            count_all: false,
            logs: (0..clients).map(|_| SlidingLog::default()).collect(),
            tally: Tally {
                most_over: -(limit as i64),
                ..Tally::default()
            },
        }
    }

    /// A judge whose log holds every request, admitted or not.
    pub fn counting_all(window_ms: u64, limit: u64, clients: usize) -> Judge {
        Judge {
            count_all: true,
            ..Judge::new(window_ms, limit, clients)
        }
    }

    /// The exact admitted cost of `client` in the window ending at `now_ms`.
    pub fn exact(&mut self, client: u32, now_ms: u64) -> u64 {
        self.logs[client as usize].sum_at(now_ms, self.window_ms)
    }

    /// Record a decision: `estimate` is the decider's estimate of the
    /// window before this request, `reference` the independent exact log's
    /// decision for it.
    pub fn record(
        &mut self,
        client: u32,
        now_ms: u64,
        cost: u64,
        admitted: bool,
        estimate: f64,
        reference: bool,
    ) {
        let exact = self.exact(client, now_ms);
        let fits = exact + cost <= self.limit;
        let tally = &mut self.tally;
        tally.requests += 1;
        tally.wrongly_admitted += u64::from(admitted && !fits);
        tally.wrongly_rejected += u64::from(!admitted && fits);
        tally.differs += u64::from(admitted != reference);
        let error = (estimate - exact as f64).abs() / self.limit as f64;
        tally.error_sum += error;
        tally.error_max = tally.error_max.max(error);
        if exact > 0 {
            tally.rate_error_sum += (estimate - exact as f64).abs() / exact as f64;
            tally.rate_error_requests += 1;
        }
        tally.admitted += u64::from(admitted);
        if admitted || self.count_all {
            let log = &mut self.logs[client as usize];
            log.admit(now_ms, cost);
            if !self.count_all {
                tally.most_over = tally.most_over.max(log.sum as i64 - self.limit as i64);
            }
        }
    }
}

/// The fixed window of envoyproxy/ratelimit and Limitador: one counter per
/// window aligned on the epoch, reset at each boundary.
pub struct FixedWindow {
    window_ms: u64,
    limit: u64,
    counters: Vec<(u64, u64)>,
}

impl FixedWindow {
    pub fn new(window_ms: u64, limit: u64, clients: usize) -> FixedWindow {
        FixedWindow {
            window_ms,
            limit,
            counters: vec![(u64::MAX, 0); clients],
        }
    }

    /// Decide and count; returns (admitted, the count before the request).
    pub fn check(&mut self, client: u32, now_ms: u64, cost: u64) -> (bool, u64) {
        let window = now_ms / self.window_ms;
        let (current, count) = &mut self.counters[client as usize];
        if *current != window {
            *current = window;
            *count = 0;
        }
        let before = *count;
        let admitted = before + cost <= self.limit;
        if admitted {
            *count += cost;
        }
        (admitted, before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_counts_the_half_open_window() {
        let mut log = SlidingLog::default();
        log.admit(1_000, 2);
        log.admit(1_500, 3);
        assert_eq!(log.sum_at(1_999, 1_000), 5);
        // (1000, 2000]: the request at 1000 has left.
        assert_eq!(log.sum_at(2_000, 1_000), 3);
        assert_eq!(log.sum_at(2_500, 1_000), 0);
    }

    #[test]
    fn judging_a_hand_made_history() {
        // Limit 3 per 1 s. A decider that admits everything.
        let mut judge = Judge::new(1_000, 3, 1);
        for (t, cost) in [(0, 1), (100, 1), (200, 1), (300, 1), (1_050, 2), (1_150, 1)] {
            judge.record(0, t, cost, true, 0.0, true);
        }
        let tally = &judge.tally;
        // At 300 the window holds 3: one more is wrong. At 1050 it holds
        // 100, 200, 300 (3): 2 more is wrong. At 1150 it holds 200, 300 and
        // 1050 (4): wrong again. Peak after admitting: 5 (at 1050 and 1150).
        assert_eq!(tally.wrongly_admitted, 3);
        assert_eq!(tally.wrongly_rejected, 0);
        assert_eq!(tally.most_over, 2);
        // Estimates of 0 against exact counts 0, 1, 2, 3, 3, 4 (limit 3).
        assert!((tally.mean_error() - 13.0 / 18.0).abs() < 1e-12);
        assert!((tally.error_max - 4.0 / 3.0).abs() < 1e-12);

        // A decider that rejects a request that fits is wrong the other way.
        let mut judge = Judge::new(1_000, 3, 1);
        judge.record(0, 0, 1, false, 3.0, true);
        assert_eq!(judge.tally.wrongly_rejected, 1);
        assert_eq!(judge.tally.differs, 1);
    }

    #[test]
    fn the_fixed_window_resets_on_the_boundary() {
        let mut fixed = FixedWindow::new(1_000, 2, 1);
        assert_eq!(fixed.check(0, 998, 1), (true, 0));
        assert_eq!(fixed.check(0, 999, 1), (true, 1));
        assert_eq!(fixed.check(0, 999, 1), (false, 2));
        // Twice the limit within 3 ms: the classic weakness.
        assert_eq!(fixed.check(0, 1_000, 1), (true, 0));
        assert_eq!(fixed.check(0, 1_001, 1), (true, 1));
    }
}
