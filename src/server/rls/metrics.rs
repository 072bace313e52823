//! RLS counters per domain and per rule. Their labels come from the
//! configuration only (a rule's name or path), never from request values, so
//! their number is bounded by the configuration, whatever clients send.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;

use crate::metrics::catalogue::{Described, Kind, Label};

/// The RLS families, in the order [`encode`] serves them.
pub(crate) const FAMILIES: &[Described; 3] = &[
    Described {
        name: "slidegate_rls_requests",
        kind: Kind::Counter,
        labels: &[Label {
            name: "outcome",
            values: "`answered`, `invalid_argument`, `store_unavailable`",
        }],
        help: "ShouldRateLimit calls, by outcome.",
    },
    Described {
        name: "slidegate_rls_descriptors_unmatched",
        kind: Kind::Counter,
        labels: &[Label {
            name: "reason",
            values: "`unknown_domain`, `no_rule`",
        }],
        help: "Descriptors answered OK with no limit: unknown domain, or no rule.",
    },
    Described {
        name: "slidegate_rls_hits",
        kind: Kind::Counter,
        labels: &[
            Label {
                name: "domain",
                values: "a domain of the rules",
            },
            Label {
                name: "rule",
                values: "the rule's name, else its descriptor path; `override` for a domain's overrides",
            },
            Label {
                name: "result",
                values: "`total_hits`, `within_limit`, `over_limit`, `over_limit_near_cache`, `shadow_mode`",
            },
        ],
        help: "Hits (hits_addend) per domain and rule, by result.",
    },
];

/// What happened to the hits of one rule, as envoyproxy/ratelimit counts
/// them (`total_hits`, `within_limit`, `over_limit`, ...), in hits
/// (`hits_addend`), not requests.
#[derive(Debug, Default)]
pub struct RuleMetrics {
    total_hits: AtomicU64,
    within_limit: AtomicU64,
    over_limit: AtomicU64,
    over_limit_near_cache: AtomicU64,
    shadow_mode: AtomicU64,
}

/// How a rule answered one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    WithinLimit,
    OverLimit {
        near_cache: bool,
    },
    /// Over the limit, answered OK because the rule is in shadow mode.
    Shadow,
}

impl RuleMetrics {
    pub fn record(&self, hits: u64, outcome: Outcome) {
        self.total_hits.fetch_add(hits, Ordering::Relaxed);
        let counter = match outcome {
            Outcome::WithinLimit => &self.within_limit,
            Outcome::OverLimit { near_cache } => {
                if near_cache {
                    self.over_limit_near_cache
                        .fetch_add(hits, Ordering::Relaxed);
                }
                &self.over_limit
            }
            Outcome::Shadow => &self.shadow_mode,
        };
        counter.fetch_add(hits, Ordering::Relaxed);
    }

    /// Add `before`'s counts: the same rule, reloaded.
    pub fn carry_from(&self, before: &RuleMetrics) {
        let pairs = [
            (&self.total_hits, &before.total_hits),
            (&self.within_limit, &before.within_limit),
            (&self.over_limit, &before.over_limit),
            (&self.over_limit_near_cache, &before.over_limit_near_cache),
            (&self.shadow_mode, &before.shadow_mode),
        ];
        for (now, was) in pairs {
            now.fetch_add(was.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    fn samples(&self) -> [(&'static str, u64); 5] {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        [
            ("total_hits", load(&self.total_hits)),
            ("within_limit", load(&self.within_limit)),
            ("over_limit", load(&self.over_limit)),
            ("over_limit_near_cache", load(&self.over_limit_near_cache)),
            ("shadow_mode", load(&self.shadow_mode)),
        ]
    }
}

/// Counters of the RLS face as a whole.
#[derive(Debug, Default)]
pub struct ServiceMetrics {
    pub requests: AtomicU64,
    pub invalid: AtomicU64,
    pub unknown_domain: AtomicU64,
    pub no_rule: AtomicU64,
    pub store_unavailable: AtomicU64,
}

impl ServiceMetrics {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The RLS families, read from the atomics at each scrape: the rules and
/// their counters belong to the loaded configuration, not to a registry.
pub fn encode<'r>(
    encoder: &mut DescriptorEncoder,
    service: &ServiceMetrics,
    rules: impl Iterator<Item = (&'r str, &'r str, &'r RuleMetrics)>,
) -> Result<(), std::fmt::Error> {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let [requests, unmatched, hits] = FAMILIES;
    let mut family = requests.describe(encoder)?;
    for (outcome, counter) in [
        ("answered", &service.requests),
        ("invalid_argument", &service.invalid),
        ("store_unavailable", &service.store_unavailable),
    ] {
        let labels = [("outcome", outcome)];
        ConstCounter::new(load(counter)).encode(family.encode_family(&labels)?)?;
    }
    let mut family = unmatched.describe(encoder)?;
    for (reason, counter) in [
        ("unknown_domain", &service.unknown_domain),
        ("no_rule", &service.no_rule),
    ] {
        let labels = [("reason", reason)];
        ConstCounter::new(load(counter)).encode(family.encode_family(&labels)?)?;
    }
    let mut family = hits.describe(encoder)?;
    for (domain, rule, metrics) in rules {
        for (result, value) in metrics.samples() {
            let labels = [("domain", domain), ("rule", rule), ("result", result)];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}
