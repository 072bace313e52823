//! Every family slidegate can serve, described once. A component registers
//! its families under its own table of [`Described`] (the limiter's is
//! [`crate::metrics::FAMILIES`]), and the metrics reference of the book is
//! written from the same tables by [`reference()`]: a family cannot be served
//! under one name and help and documented under another.

use std::fmt::Write as _;

use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

/// A family's type, as `# TYPE` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn metric_type(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        }
    }

    /// As `# TYPE` writes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }

    /// The samples a family of this type serves, by suffix.
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            Kind::Counter => &["_total"],
            Kind::Gauge => &[""],
            Kind::Histogram => &["_bucket", "_sum", "_count"],
        }
    }
}

/// One family: what `# TYPE` and `# HELP` say of it, its labels, and when
/// it is served.
#[derive(Clone, Copy, Debug)]
pub struct Described {
    /// As `# TYPE` names it: a counter's samples add `_total`.
    pub name: &'static str,
    pub kind: Kind,
    /// Its labels, in the order the samples carry them.
    pub labels: &'static [Label],
    /// As `# HELP` says it, full stop included.
    pub help: &'static str,
}

impl Described {
    /// Register `metric` under this family in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry, metric: impl Metric) {
        // `Registry::register` ends the help with a full stop of its own.
        let help = self.help.strip_suffix('.').unwrap_or(self.help);
        registry.register(self.name, help, metric);
    }

    /// Begin this family in a collector's `encoder`.
    pub(crate) fn describe<'e>(
        &'e self,
        encoder: &'e mut DescriptorEncoder,
    ) -> Result<MetricEncoder<'e>, std::fmt::Error> {
        encoder.encode_descriptor(self.name, self.help, None, self.kind.metric_type())
    }
}

/// One label of a family, and the values it takes.
#[derive(Clone, Copy, Debug)]
pub struct Label {
    pub name: &'static str,
    /// The values it takes, in words.
    pub values: &'static str,
}

/// The families of one component, and when the process serves them.
#[derive(Clone, Copy, Debug)]
pub struct Component {
    pub title: &'static str,
    /// When these families are served, in words.
    pub served: &'static str,
    pub families: &'static [Described],
}

/// The metrics reference, in Markdown: every family of `components`, with
/// its type, labels and meaning.
pub fn reference(components: &[Component]) -> String {
    let mut page = String::from(
        "# Metrics reference\n\n\
         Every family `GET /metrics` can serve, in the OpenMetrics text format, \
         grouped by the part of slidegate that registers it. Labels take their \
         values from the configuration or from fixed sets, never from keys, so \
         the number of series is bounded whatever clients send.\n\n\
         This page is generated from the tables the families are registered \
         from; a test fails when it differs from them. Regenerate it with \
         `SLIDEGATE_BLESS=1 cargo test --test ops metrics_reference`.\n",
    );
    for component in components {
        let _ = write!(
            page,
            "\n## {}\n\nServed {}.\n",
            component.title, component.served
        );
        for family in component.families {
            let samples: Vec<String> = family
                .kind
                .suffixes()
                .iter()
                .map(|suffix| format!("`{}{suffix}`", family.name))
                .collect();
            let _ = write!(
                page,
                "\n### `{}`\n\n{}\n\n- Type: {}\n- Samples: {}\n",
                family.name,
                family.help,
                family.kind.name(),
                samples.join(", "),
            );
            if family.labels.is_empty() {
                page.push_str("- Labels: none\n");
            } else {
                page.push_str("- Labels:\n");
                for label in family.labels {
                    let _ = writeln!(page, "  - `{}`: {}", label.name, label.values);
                }
            }
        }
    }
    page
}
