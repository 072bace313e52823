//! The clocks' figures, read at each scrape: the local clock's backward
//! jumps, and (with `[clock] source = "memcached"`) the shared clock's
//! offset and failed estimates.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

use super::catalogue::{Described, Kind};
use crate::clock::{SystemClock, WatchedClock};
#[cfg(feature = "memcached")]
use crate::store::MemcachedClock;

/// The local clock's family, always served.
pub const LOCAL_CLOCK_FAMILIES: &[Described; 1] = &[Described {
    name: "slidegate_clock_backward_jumps",
    kind: Kind::Counter,
    labels: &[],
    help: "Times the local clock was set back by more than 100 ms.",
}];

/// The shared clock's families, served when it is in use.
pub const SHARED_CLOCK_FAMILIES: &[Described; 2] = &[
    Described {
        name: "slidegate_clock_offset_ms",
        kind: Kind::Gauge,
        labels: &[],
        help: "Milliseconds added to the local clock to read the first Memcached node's.",
    },
    Described {
        name: "slidegate_clock_estimate_failures",
        kind: Kind::Counter,
        labels: &[],
        help: "Estimates of the shared clock's offset that failed.",
    },
];

/// The clocks a process decides on.
pub struct ClockCollector {
    local: Arc<WatchedClock<SystemClock>>,
    #[cfg(feature = "memcached")]
    shared: Option<Arc<MemcachedClock>>,
}

impl ClockCollector {
    pub fn new(local: Arc<WatchedClock<SystemClock>>) -> ClockCollector {
        ClockCollector {
            local,
            #[cfg(feature = "memcached")]
            shared: None,
        }
    }

    /// The shared clock too.
    #[cfg(feature = "memcached")]
    pub fn with_shared(self, shared: Option<Arc<MemcachedClock>>) -> ClockCollector {
        ClockCollector { shared, ..self }
    }

    pub fn register(self, registry: &mut Registry) {
        registry.register_collector(Box::new(self));
    }
}

impl std::fmt::Debug for ClockCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClockCollector").finish_non_exhaustive()
    }
}

impl Collector for ClockCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let [backward_jumps] = LOCAL_CLOCK_FAMILIES;
        ConstCounter::new(self.local.backward_jumps())
            .encode(backward_jumps.describe(&mut encoder)?)?;
        #[cfg(feature = "memcached")]
        if let Some(shared) = &self.shared {
            use prometheus_client::metrics::gauge::ConstGauge;
            let [offset, failures] = SHARED_CLOCK_FAMILIES;
            ConstGauge::new(shared.offset_ms()).encode(offset.describe(&mut encoder)?)?;
            ConstCounter::new(shared.estimates().1).encode(failures.describe(&mut encoder)?)?;
        }
        Ok(())
    }
}
