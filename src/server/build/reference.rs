//! The metrics reference: every part's table of families, in the order
//! the book lists them.

use crate::metrics::catalogue::{self, Component};
use crate::metrics::clock::LOCAL_CLOCK_FAMILIES;
use crate::metrics::store::MEMORY_FAMILIES;
use crate::server::{guard, metrics, ops, reload};

/// Every part's families, as the metrics reference lists them: those of
/// every part this build has, whether or not a configuration turns it on.
pub fn metric_components() -> Vec<Component> {
    #[allow(unused_mut)]
    let mut components = vec![
        Component {
            title: "Decisions and the store",
            served: "always",
            families: crate::metrics::FAMILIES,
        },
        Component {
            title: "HTTP answers",
            served: "always",
            families: metrics::FAMILIES,
        },
        Component {
            title: "Connections and API tokens",
            served: "always",
            families: guard::FAMILIES,
        },
        Component {
            title: "Configuration reloads",
            served: "always",
            families: reload::FAMILIES,
        },
        Component {
            title: "Refusal log",
            served: "always (counted while `log.refusals_per_s` is set)",
            families: ops::FAMILIES,
        },
        Component {
            title: "Embedded store",
            served: "when no Memcached server is configured (the embedded store counts)",
            families: MEMORY_FAMILIES,
        },
    ];
    #[cfg(feature = "memcached")]
    components.push(Component {
        title: "Memcached store",
        served: "when Memcached servers or discovery are configured; \
                 `slidegate_memcached_config_version` once Auto Discovery has read a cluster config",
        families: crate::metrics::store::MEMCACHED_FAMILIES,
    });
    components.push(Component {
        title: "Local clock",
        served: "always",
        families: LOCAL_CLOCK_FAMILIES,
    });
    #[cfg(feature = "memcached")]
    components.push(Component {
        title: "Shared clock",
        served: "with `[clock] source = \"memcached\"`",
        families: crate::metrics::clock::SHARED_CLOCK_FAMILIES,
    });
    #[cfg(feature = "grpc")]
    components.extend([
        Component {
            title: "Envoy RLS",
            served: "when RLS rules are loaded (`rls.config`)",
            families: crate::server::rls::FAMILIES,
        },
        Component {
            title: "Envoy RLQS",
            served: "always (by a build with the `grpc` feature), streams or not",
            families: crate::server::rlqs::FAMILIES,
        },
    ]);
    components
}

/// The metrics reference of the book (`docs/src/reference/metrics.md`),
/// written from the tables every part registers its families from.
pub fn metrics_reference() -> String {
    catalogue::reference(&metric_components())
}
