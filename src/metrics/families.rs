//! The limiter's families, described once: [`Metrics::register`] adds
//! them under these names and helps, and the metrics reference lists them.
//!
//! [`Metrics::register`]: super::Metrics::register

use super::catalogue::{Described, Kind, Label};

/// The limiter's families, in the order
/// [`Metrics::register`](super::Metrics::register) adds them.
pub const FAMILIES: &[Described; 9] = &[
    Described {
        name: "slidegate_decisions",
        kind: Kind::Counter,
        labels: &[
            Label {
                name: "policy",
                values: "the policy's name, or `inline` for limits given in the request",
            },
            Label {
                name: "outcome",
                values: "`allowed` or `rejected` by the store's counts, `near_cache` (refused from the near-cache), `fallback` (the failure mode decided), `shadow` (a shadow policy would have refused), `exempt`",
            },
        ],
        help: "Decisions by policy (`inline` for limits given in the request) and outcome.",
    },
    Described {
        name: "slidegate_check_duration_seconds",
        kind: Kind::Histogram,
        labels: &[],
        help: "Time to decide a check, peek or report, near-cache and store included.",
    },
    Described {
        name: "slidegate_store_duration_seconds",
        kind: Kind::Histogram,
        labels: &[],
        help: "Time of one store round trip (timeouts included, at the timeout).",
    },
    Described {
        name: "slidegate_store_calls",
        kind: Kind::Counter,
        labels: &[],
        help: "Round trips to the store, rollbacks included.",
    },
    Described {
        name: "slidegate_store_errors",
        kind: Kind::Counter,
        labels: &[Label {
            name: "kind",
            values: "`timeout`, `refused`, `protocol`, `overloaded`",
        }],
        help: "Store calls that failed, by kind: timeout, refused, protocol, overloaded.",
    },
    Described {
        name: "slidegate_rollback_failures",
        kind: Kind::Counter,
        labels: &[],
        help: "Rejected requests whose take-back was not confirmed: it failed, or was not answered in time.",
    },
    Described {
        name: "slidegate_coalesced_checks",
        kind: Kind::Counter,
        labels: &[],
        help: "Checks that shared one store exchange with others of their key and policy.",
    },
    Described {
        name: "slidegate_near_cache_hits",
        kind: Kind::Counter,
        labels: &[],
        help: "Rejects answered by the near-cache without a store round trip.",
    },
    Described {
        name: "slidegate_near_cache_entries",
        kind: Kind::Gauge,
        labels: &[],
        help: "Keys remembered by the near-cache of hot rejects.",
    },
];
