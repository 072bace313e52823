//! The server built from its configuration, in one place: configuration
//! in; state ([`App`]) and faces ([`Faces`]) out. The feature switches of
//! the server live here (and in `faces`, for the listeners) and nowhere
//! else: which store, which clock, and whether the Envoy faces exist.
//!
//! | part | built from | registers into /metrics |
//! |---|---|---|
//! | store | `[memcached]`, or the embedded store | its connections, or its evictions |
//! | clock | `[clock]` | backward jumps, the shared clock's offset |
//! | limiter | `[near_cache]`, `[failure]`, `[limits]` | decisions, store calls, near-cache |
//! | HTTP service | policies, `[auth]`, exemptions | answers by status |
//! | guard | `[server]` | connections, refused tokens |
//! | reload | `[reload]` | reloads by result, restart pending |
//! | operators' endpoints | `[log]` | refusals not logged |
//! | Envoy faces | `[rls]`, `[rlqs]` | RLS hits, RLQS streams |
//!
//! Each part registers its own families, once, as it is built; the
//! metrics reference is written from the same tables
//! ([`metrics_reference`]).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::guard::{Guard, TokenSettings};
use super::shutdown::Leaving;
use super::{App, metrics, ops};
use crate::clock::{Clock, SystemClock, WatchedClock};
use crate::config::{AuthConfig, Config, DEFAULT_DRAIN_TIMEOUT, Exemptions, ServerGuard};
use crate::limiter::Limiter;
use crate::metrics::clock::ClockCollector;
use crate::policy::Policy;
use crate::store::{AnyStore, MemoryStore, StoreError};

mod faces;
mod reference;

pub use faces::Faces;
pub use reference::{metric_components, metrics_reference};

#[cfg(feature = "grpc")]
pub(crate) use super::envoy::{Envoy, Reload as EnvoyReload};
#[cfg(not(feature = "grpc"))]
pub(crate) use without_grpc::{Envoy, Reload as EnvoyReload};

/// Why a configuration could not be built into a server.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The store's error is the source, which `{:#}` and anyhow's report
    /// print after this.
    #[error("cannot set up the Memcached store")]
    Store(#[from] StoreError),
    /// The RLS rules (`rls.config`): the file and what is wrong.
    #[error("{0}")]
    Rules(String),
}

/// Build the store, the clock, the limiter and the app a configuration
/// describes. With no Memcached server configured, counters live in this
/// process.
pub async fn build(config: &Config) -> Result<App, BuildError> {
    let envoy = Envoy::of(config).map_err(BuildError::Rules)?;
    let store = store(config).await?;
    let (clock, clocks) = clock(config).await?;
    let limiter = Limiter::builder(store)
        .clock(clock)
        .timeout(config.timeout)
        .near_cache_capacity(config.near_cache_capacity)
        .near_cache_max_bytes(config.near_cache_max_bytes)
        .near_cache_revalidate(config.near_cache_revalidate)
        .max_counters(config.max_counters)
        .local_capacity(config.memory_capacity)
        .failure_mode(config.failure_mode)
        .coalesce(config.coalesce)
        .build();
    let app = assemble(
        limiter,
        Parts {
            policies: config.policies.values().cloned().collect(),
            auth: config.auth.clone(),
            exemptions: config.exemptions.clone(),
            guard: config.server.clone(),
            drain_timeout: config.shutdown.drain_timeout,
            envoy,
            clocks,
        },
    );
    app.log_refusals(config.log.refusals_per_s);
    Ok(app)
}

/// What an app is made of beside its limiter; the defaults are those of an
/// empty configuration.
pub(crate) struct Parts {
    pub policies: Vec<Policy>,
    pub auth: AuthConfig,
    pub exemptions: Exemptions,
    pub guard: ServerGuard,
    pub drain_timeout: Duration,
    pub envoy: Envoy,
    /// The clocks the limiter decides on, for /metrics.
    pub clocks: ClockCollector,
}

impl Default for Parts {
    fn default() -> Parts {
        Parts {
            policies: Vec::new(),
            auth: AuthConfig::default(),
            exemptions: Exemptions::default(),
            guard: ServerGuard::default(),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            envoy: Envoy::default(),
            // A limiter given from outside keeps its own clock: this one
            // is watched only so that the family is served alike.
            clocks: ClockCollector::new(Arc::new(WatchedClock::new(SystemClock))),
        }
    }
}

/// The app of `limiter` and `parts`, each part's families registered once
/// into the registry /metrics serves.
pub(crate) fn assemble(limiter: Limiter<AnyStore>, parts: Parts) -> App {
    let mut metrics = metrics::ServerMetrics::new();
    let memory = metrics.memory.clone();
    let registry = metrics.registry_mut();
    limiter.metrics_handles().register(registry);
    register_store(limiter.store(), &memory, registry);
    parts.clocks.register(registry);
    let guard = Guard::new(&parts.guard);
    guard.register(registry);
    let reloads = super::reload::ReloadMetrics::default();
    reloads.register(registry);
    let ops = ops::Ops::default();
    ops.register(registry);
    parts.envoy.register(registry);
    let live = App::live_of(
        &limiter,
        parts.policies,
        limiter.max_counters(),
        parts.auth,
        parts.exemptions,
        TokenSettings::of(&parts.guard),
    );
    App {
        limiter,
        live: ArcSwap::from_pointee(live),
        metrics,
        reloads,
        ops,
        guard,
        envoy: parts.envoy,
        leaving: Leaving::with_drain_timeout(parts.drain_timeout),
    }
}

/// The store a configuration names. `Config::resolve` refuses servers in a
/// build without the `memcached` feature.
async fn store(config: &Config) -> Result<AnyStore, StoreError> {
    #[cfg(feature = "memcached")]
    if let Some(options) = config.memcached_options() {
        let store = crate::store::MemcachedStore::connect(&options).await?;
        return Ok(AnyStore::Memcached(store));
    }
    Ok(AnyStore::Memory(MemoryStore::with_capacity(
        config.memory_capacity,
    )))
}

/// The store's own families: the embedded store's figures, or the
/// Memcached topology's.
fn register_store(
    store: &AnyStore,
    memory: &crate::metrics::store::MemoryFigures,
    registry: &mut prometheus_client::registry::Registry,
) {
    match store {
        AnyStore::Memory(_) => memory.register(registry),
        #[cfg(feature = "memcached")]
        AnyStore::Memcached(store) => {
            crate::metrics::store::TopologyCollector(store.topology_source()).register(registry)
        }
    }
}

/// The clock decisions are made on: the local one, watched for backward
/// jumps, or with `[clock] source = "memcached"` the first Memcached
/// node's, read through it. Without the `memcached` feature there is no
/// shared clock (`Config` refuses one without servers).
async fn clock(config: &Config) -> Result<(Arc<dyn Clock>, ClockCollector), StoreError> {
    let local = Arc::new(WatchedClock::new(SystemClock));
    let collector = ClockCollector::new(local.clone());
    #[cfg(feature = "memcached")]
    if let (crate::config::ClockSource::Memcached, Some(options)) =
        (config.clock_source, config.memcached_options())
    {
        let shared = crate::store::MemcachedClock::start(&options, local).await?;
        // Deciding on local time until the first estimate would put this
        // instance's first checks in other buckets than its peers'.
        if shared.synced(Duration::from_secs(4)).await {
            tracing::info!(
                offset_ms = shared.offset_ms(),
                "deciding on the first Memcached node's clock"
            );
        } else {
            tracing::warn!(
                "cannot read the first Memcached node's clock yet: deciding on local time until it answers"
            );
        }
        return Ok((shared.clone(), collector.with_shared(Some(shared))));
    }
    let _ = config;
    Ok((local, collector))
}

/// Without the `grpc` feature there are no Envoy faces: their place in the
/// app holds nothing, and a reload has no rules to bring.
#[cfg(not(feature = "grpc"))]
mod without_grpc {
    use prometheus_client::registry::Registry;

    use crate::config::Config;
    use crate::config::reload::Reloaded;

    // Braces, not a unit struct: it is built by `Default`, as the other one.
    #[derive(Default)]
    pub(crate) struct Envoy {}

    /// What a reload brings to the Envoy faces: nothing.
    pub(crate) struct Reload;

    impl Envoy {
        pub(crate) fn of(_config: &Config) -> Result<Envoy, String> {
            Ok(Envoy {})
        }

        pub(crate) fn register(&self, _registry: &mut Registry) {}

        pub(crate) fn apply(&self, _config: &Config) {}

        pub(crate) fn admit(&self, _reloaded: &Reloaded) -> Result<Reload, String> {
            Ok(Reload)
        }

        pub(crate) fn put_in_force(&self, _reload: Reload) {}
    }
}

#[cfg(all(test, feature = "grpc"))]
mod tests;
