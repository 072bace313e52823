//! The RLQS counters. Their labels are fixed (the strategy sent), never
//! taken from bucket ids, so their number does not grow with what clients
//! send.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::places::Places;
use crate::metrics::catalogue::{Described, Kind, Label};

/// The RLQS families, in the order [`RlqsMetrics::encode`] serves them.
pub(crate) const FAMILIES: &[Described; 4] = &[
    Described {
        name: "slidegate_rlqs_streams",
        kind: Kind::Gauge,
        labels: &[],
        help: "RLQS streams open now.",
    },
    Described {
        name: "slidegate_rlqs_reports",
        kind: Kind::Counter,
        labels: &[],
        help: "RLQS usage reports received (one message, any number of buckets).",
    },
    Described {
        name: "slidegate_rlqs_assignments",
        kind: Kind::Counter,
        labels: &[Label {
            name: "strategy",
            values: "`token_bucket`, `allow_all`, `deny_all`",
        }],
        help: "RLQS bucket assignments sent, by strategy.",
    },
    Described {
        name: "slidegate_rlqs_abandons",
        kind: Kind::Counter,
        labels: &[],
        help: "RLQS buckets abandoned: a stream left them unreported for rlqs.abandon_after.",
    },
];

/// The assignment strategies sent, as `strategy` labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    TokenBucket,
    AllowAll,
    DenyAll,
}

impl Strategy {
    const ALL: [Strategy; 3] = [Strategy::TokenBucket, Strategy::AllowAll, Strategy::DenyAll];

    fn label(self) -> &'static str {
        match self {
            Strategy::TokenBucket => "token_bucket",
            Strategy::AllowAll => "allow_all",
            Strategy::DenyAll => "deny_all",
        }
    }
}

#[derive(Debug, Default)]
pub struct RlqsMetrics {
    streams: Places,
    reports: AtomicU64,
    assignments: [AtomicU64; 3],
    abandons: AtomicU64,
}

/// An open stream, counted in `slidegate_rlqs_streams` until dropped.
pub struct OpenStream<'a>(&'a RlqsMetrics);

impl Drop for OpenStream<'_> {
    fn drop(&mut self) {
        self.0.streams.give_back(1);
    }
}

impl RlqsMetrics {
    /// Count one more open stream, unless `most` are open already.
    pub fn try_open(&self, most: usize) -> Option<OpenStream<'_>> {
        self.streams.take(most).then(|| OpenStream(self))
    }

    pub fn report(&self) {
        self.reports.fetch_add(1, Ordering::Relaxed);
    }

    pub fn assigned(&self, strategy: Strategy) {
        self.assignments[strategy as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn abandoned(&self, buckets: usize) {
        self.abandons.fetch_add(buckets as u64, Ordering::Relaxed);
    }

    pub fn encode(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let [streams, reports, assignments, abandons] = FAMILIES;
        ConstGauge::new(self.streams.held() as i64).encode(streams.describe(encoder)?)?;
        ConstCounter::new(load(&self.reports)).encode(reports.describe(encoder)?)?;
        let mut family = assignments.describe(encoder)?;
        for strategy in Strategy::ALL {
            let labels = [("strategy", strategy.label())];
            let value = load(&self.assignments[strategy as usize]);
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        ConstCounter::new(load(&self.abandons)).encode(abandons.describe(encoder)?)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_the_bound_of_streams_are_open_and_a_closed_one_frees_its_place() {
        let metrics = RlqsMetrics::default();
        let open: Vec<OpenStream<'_>> = (0..3).map_while(|_| metrics.try_open(3)).collect();
        assert_eq!(open.len(), 3);
        assert!(
            metrics.try_open(3).is_none(),
            "a fourth stream past the bound"
        );
        drop(open);
        assert!(
            metrics.try_open(3).is_some(),
            "closed streams free their places"
        );
    }
}
