//! A latency histogram that records without a lock. Two are observed per
//! check (the check's time and its store call's); `prometheus-client`'s
//! histogram takes a mutex per observation, which the profile showed
//! beside the limiter's own work at 256 callers on two cores. Here an
//! observation is two relaxed atomic adds on this thread's stripe (see
//! [`super::striped`]); a scrape reads the counts as they are (a scrape
//! racing observations may see one in `count` and not yet in `sum`, which
//! Prometheus tolerates, as it does for any histogram read while it
//! changes).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

use super::striped::StripedArray;

/// A stripe's slots: a count per bound, one past the last (`+Inf`), and
/// the sum; 24 fill three cache lines.
const SLOTS: usize = 24;

/// Fixed buckets, upper bounds in seconds; `+Inf` is implied.
#[derive(Clone, Debug)]
pub(crate) struct LatencyHistogram(Arc<Buckets>);

#[derive(Debug)]
struct Buckets {
    /// Upper bounds in seconds, as exposed, and in nanoseconds, as compared.
    bounds: Vec<f64>,
    bounds_ns: Vec<u64>,
    /// Slot `i` counts the observations of bucket `i` (`bounds.len()` is
    /// `+Inf`); slot `bounds.len() + 1` is the sum in nanoseconds.
    slots: StripedArray<SLOTS>,
}

impl LatencyHistogram {
    /// At most `SLOTS - 2` bounds.
    pub(crate) fn new(bounds: &[f64]) -> LatencyHistogram {
        assert!(
            bounds.len() + 2 <= SLOTS,
            "a latency histogram has at most {} bounds",
            SLOTS - 2
        );
        LatencyHistogram(Arc::new(Buckets {
            bounds: bounds.to_vec(),
            bounds_ns: bounds
                .iter()
                .map(|seconds| (seconds * 1e9).round() as u64)
                .collect(),
            slots: StripedArray::default(),
        }))
    }

    pub(crate) fn observe(&self, took: Duration) {
        let buckets = &self.0;
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // A bucket counts the observations at or under its bound.
        let index = buckets.bounds_ns.partition_point(|&bound| bound < ns);
        buckets.slots.add(index, 1);
        buckets.slots.add(buckets.sum_slot(), ns);
    }
}

impl Buckets {
    fn sum_slot(&self) -> usize {
        self.bounds.len() + 1
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = &self.0;
        // Per bucket, not cumulative: the encoder sums them, and the count
        // is their sum, so `_count` always equals the `+Inf` bucket.
        let counts: Vec<(f64, u64)> = buckets
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
            .map(|(slot, bound)| (bound, buckets.slots.get(slot)))
            .collect();
        let count = counts.iter().map(|&(_, count)| count).sum();
        let sum = buckets.slots.get(buckets.sum_slot()) as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &counts, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    /// Exposed as `prometheus-client`'s own histogram is, for the same
    /// observations: the same text, bucket for bucket (a bound counts what
    /// is at or under it), so dashboards and alerts read it unchanged.
    #[test]
    fn it_exposes_what_the_library_histogram_exposes() {
        let bounds = [0.001, 0.01, 0.1];
        let ours = LatencyHistogram::new(&bounds);
        let theirs = prometheus_client::metrics::histogram::Histogram::new(bounds);
        for micros in [0, 500, 1_000, 1_001, 9_999, 10_000, 250_000, 3_000_000] {
            let took = Duration::from_micros(micros);
            ours.observe(took);
            theirs.observe(took.as_secs_f64());
        }
        fn text(metric: impl prometheus_client::registry::Metric) -> String {
            let mut registry = Registry::default();
            registry.register("latency_seconds", "help", metric);
            let mut text = String::new();
            encode(&mut text, &registry).unwrap();
            text
        }
        let ours = text(ours);
        assert_eq!(ours, text(theirs));
        assert!(
            ours.contains("latency_seconds_bucket{le=\"0.001\"} 3\n"),
            "{ours}"
        );
        assert!(
            ours.contains("latency_seconds_bucket{le=\"+Inf\"} 8\n"),
            "{ours}"
        );
        assert!(ours.contains("latency_seconds_count 8\n"), "{ours}");
    }
}
