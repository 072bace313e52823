//! The Envoy faces' state, as one part of the [`App`](super::App): the RLS
//! rules in force (when `rls.config` is set) and the RLQS settings and
//! streams. A build without the `grpc` feature has a stand-in of the same
//! name that holds nothing (`build`).

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use prometheus_client::registry::Registry;

use super::rlqs::{Rlqs, RlqsCollector};
use super::rls::{Rls, RlsCollector, RuleSet};
use crate::config::reload::Reloaded;
use crate::config::{Config, DEFAULT_RLS_MAX_DESCRIPTORS, RlqsConfig};

/// The RLS rules a reload puts in force; `None`: the rules in force stay.
pub(crate) struct Reload(Option<RuleSet>);

pub(crate) struct Envoy {
    /// The RLS rules, when given: read by the RLS face when it starts
    /// serving and by its collector at each scrape, so that rules given
    /// after the build (`App::with_rls`) are served and counted alike.
    rls: Arc<ArcSwapOption<Rls>>,
    /// The most descriptors one `ShouldRateLimit` request may carry.
    pub(crate) rls_max_descriptors: usize,
    /// Envoy RLQS settings and streams' demand: unmatched buckets only,
    /// until configured.
    pub(crate) rlqs: Arc<Rlqs>,
}

impl Default for Envoy {
    fn default() -> Envoy {
        Envoy {
            rls: Arc::default(),
            rls_max_descriptors: DEFAULT_RLS_MAX_DESCRIPTORS,
            rlqs: Arc::new(Rlqs::new(&RlqsConfig::default())),
        }
    }
}

impl Envoy {
    /// The Envoy faces `config` describes: its RLS rules loaded and held to
    /// its `limits.max_counters`, its `[rlqs]` settings. An error names the
    /// rules file and what is wrong.
    pub(crate) fn of(config: &Config) -> Result<Envoy, String> {
        let envoy = Envoy {
            rls_max_descriptors: config.rls_max_descriptors,
            ..Envoy::default()
        };
        envoy.rlqs.apply(&config.rlqs);
        if let Some(path) = &config.rls_config {
            let rules = RuleSet::load_within(path, config.max_counters)?;
            tracing::info!(path = %path.display(), domains = ?rules.domains().collect::<Vec<_>>(), rules = rules.rules().len(), "Envoy RLS rules loaded");
            envoy.set_rls(Rls::new(rules));
        }
        Ok(envoy)
    }

    /// The RLS and RLQS families: the RLS ones while rules are given.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(RlsCollector(self.rls.clone())));
        registry.register_collector(Box::new(RlqsCollector(self.rlqs.clone())));
    }

    /// The RLS rules and counters, when given.
    pub(crate) fn rls(&self) -> Option<Arc<Rls>> {
        self.rls.load_full()
    }

    /// Serve these RLS rules.
    pub(crate) fn set_rls(&self, rls: Rls) {
        self.rls.store(Some(Arc::new(rls)));
    }

    /// Put a reloaded configuration's `[rlqs]` in force (all but the
    /// listener).
    pub(crate) fn apply(&self, config: &Config) {
        self.rlqs.apply(&config.rlqs);
    }

    /// What a reload brings to the Envoy faces: its RLS rules compiled and
    /// checked, or why the reload is refused.
    pub(crate) fn admit(&self, reloaded: &Reloaded) -> Result<Reload, String> {
        super::rls::rules_reloaded(self.rls().as_deref(), reloaded)
            .map(Reload)
            .map_err(|error| format!("rls.config: {error}"))
    }

    /// Put what a reload admitted in force, from the next request on.
    pub(crate) fn put_in_force(&self, Reload(rules): Reload) {
        if let (Some(rls), Some(rules)) = (self.rls(), rules) {
            super::rls::apply_rules(&rls, rules);
        }
    }
}
