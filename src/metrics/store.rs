//! The stores' own figures: the embedded store's evictions and capacity,
//! and (with the `memcached` feature) the Memcached topology and its
//! connections.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::catalogue::{Described, Kind};
use crate::store::MemoryStore;

/// The embedded store's families.
pub const MEMORY_FAMILIES: &[Described; 2] = &[
    Described {
        name: "slidegate_memory_evictions",
        kind: Kind::Counter,
        labels: &[],
        help: "Live counters the embedded store evicted to make room (they then read as 0).",
    },
    Described {
        name: "slidegate_memory_capacity",
        kind: Kind::Gauge,
        labels: &[],
        help: "Counters the embedded store holds before it evicts.",
    },
];

/// The embedded store's figures. The store belongs to the limiter, which a
/// collector cannot hold, so they are registered once and brought up to
/// date from the store before each scrape ([`MemoryFigures::refresh`]),
/// as the near-cache's gauge is.
#[derive(Clone, Debug, Default)]
pub struct MemoryFigures {
    evictions: Counter,
    capacity: Gauge,
}

impl MemoryFigures {
    pub fn register(&self, registry: &mut Registry) {
        let [evictions, capacity] = MEMORY_FAMILIES;
        evictions.register(registry, self.evictions.clone());
        capacity.register(registry, self.capacity.clone());
    }

    /// Read `store`'s figures now.
    pub fn refresh(&self, store: &MemoryStore) {
        use std::sync::atomic::Ordering;
        self.evictions
            .inner()
            .store(store.evictions(), Ordering::Relaxed);
        self.capacity
            .set(i64::try_from(store.capacity()).unwrap_or(i64::MAX));
    }
}

#[cfg(feature = "memcached")]
mod topology;
#[cfg(feature = "memcached")]
pub use topology::{MEMCACHED_FAMILIES, TopologyCollector};
