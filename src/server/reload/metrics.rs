//! What reloads count: how each ended, and whether the file in force asks
//! for a restart.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::catalogue::{Described, Kind, Label};

/// The reloads' families, in the order [`ReloadMetrics::register`] adds
/// them.
pub(crate) const FAMILIES: &[Described; 2] = &[
    Described {
        name: "slidegate_config_reloads",
        kind: Kind::Counter,
        labels: &[Label {
            name: "result",
            values: "`ok` (every key that applies live is in force), `failed` (the running configuration stays)",
        }],
        help: "Configuration reloads (SIGHUP or the file changed) by result.",
    },
    Described {
        name: "slidegate_config_restart_pending",
        kind: Kind::Gauge,
        labels: &[],
        help: "1 while the last reloaded file differs from the running process in a key that only a restart applies (the log names each).",
    },
];

/// How a reload ended, for `slidegate_config_reloads_total{result}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ReloadResult {
    /// Every key that applies live is in force.
    ok,
    /// The file was refused; the running configuration stays.
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: ReloadResult,
}

pub(crate) struct ReloadMetrics {
    results: Family<ReloadLabels, Counter>,
    /// Both results' series, taken once, so that both are listed at 0.
    by_result: [Counter; 2],
    restart_pending: Gauge,
}

impl Default for ReloadMetrics {
    fn default() -> ReloadMetrics {
        let results = Family::<ReloadLabels, Counter>::default();
        let by_result = [ReloadResult::ok, ReloadResult::failed]
            .map(|result| results.get_or_create_owned(&ReloadLabels { result }));
        ReloadMetrics {
            results,
            by_result,
            restart_pending: Gauge::default(),
        }
    }
}

impl ReloadMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        let [reloads, restart_pending] = FAMILIES;
        reloads.register(registry, self.results.clone());
        restart_pending.register(registry, self.restart_pending.clone());
    }

    pub(crate) fn reloaded(&self, result: ReloadResult, restart_pending: bool) {
        self.by_result[result as usize].inc();
        if result == ReloadResult::ok {
            self.restart_pending.set(i64::from(restart_pending));
        }
    }
}
