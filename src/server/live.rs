//! What a reload replaces: the named policies, forward-auth settings,
//! exemptions and the `limits.max_counters` they were checked against,
//! swapped as one, so that a request is decided under one consistent
//! configuration.

use std::sync::Arc;

use super::{App, api};
use crate::config::{AuthConfig, Config, Exemptions};
use crate::limiter::Limiter;
use crate::policy::Policy;
use crate::store::AnyStore;

/// The settings that change without a restart.
pub(crate) struct Live {
    pub policies: api::NamedPolicies,
    /// `limits.max_counters` of the configuration these policies came
    /// from: what inline limits parsed under them are held to.
    pub max_counters: usize,
    pub auth: AuthConfig,
    /// Keys and forward-auth clients never limited.
    pub exemptions: Exemptions,
}

impl App {
    pub(super) fn live_of(
        limiter: &Limiter<AnyStore>,
        policies: impl IntoIterator<Item = Policy>,
        max_counters: usize,
        auth: AuthConfig,
        exemptions: Exemptions,
    ) -> Live {
        let policies = policies
            .into_iter()
            .map(|policy| {
                limiter.metrics_handles().register_policy(policy.scope());
                (policy.scope().to_owned(), api::Served::new(policy))
            })
            .collect();
        Live {
            policies,
            max_counters,
            auth,
            exemptions,
        }
    }

    /// The policies and forward-auth settings in force now.
    pub(crate) fn live(&self) -> Arc<Live> {
        // Counted (a request holds it across its check), but not locked.
        self.live.load_full()
    }

    /// Put new policies and forward-auth settings in force. Requests being
    /// decided finish under the old ones; counters are kept, since a
    /// policy's counters are identified by its name, not its limits.
    pub fn apply(&self, policies: impl IntoIterator<Item = Policy>, auth: AuthConfig) {
        let live = self.live();
        self.swap_live(Self::live_of(
            &self.limiter,
            policies,
            live.max_counters,
            auth,
            live.exemptions.clone(),
        ));
    }

    /// Put in force everything of a reloaded configuration that applies
    /// live: the policies, forward-auth and exemptions, the server guard
    /// (API tokens, connection cap, ...) and the RLQS settings. What a
    /// reload changes is decided here, in one place, for every face.
    pub fn apply_live(&self, config: &Config) {
        self.apply_config(config);
        self.guard.apply(&config.server);
        #[cfg(feature = "grpc")]
        self.apply_rlqs(&config.rlqs);
    }

    /// Whether a reloaded configuration fits what this process keeps from
    /// its start: the RLS rules (`rls.config` is restart-only) must fit the
    /// new `limits.max_counters`. A reload that does not is refused whole.
    pub fn admits(&self, config: &Config) -> Result<(), String> {
        #[cfg(feature = "grpc")]
        if let Some(rls) = &self.rls {
            rls.rules().check_counters(config.max_counters)?;
        }
        #[cfg(not(feature = "grpc"))]
        let _ = config;
        Ok(())
    }

    /// [`apply`](Self::apply) what a configuration says, its exemptions
    /// included, as one swap: a request sees all of it or none.
    pub fn apply_config(&self, config: &Config) {
        // The limiter's own bound only rises: it is the highest any
        // configuration was served under, so a request decided across this
        // swap under the old policies is held to the bound they were
        // checked against, not refused by a lower one. Each request is held
        // to its own configuration's bound where its policy comes from:
        // configured policies, RLS and RLQS rules when they are loaded,
        // inline limits when they are parsed (`Live::max_counters`). Raised
        // first: the new policies were checked against it.
        if config.max_counters > self.limiter.max_counters() {
            self.limiter.set_max_counters(config.max_counters);
        }
        self.swap_live(Self::live_of(
            &self.limiter,
            config.policies.values().cloned(),
            config.max_counters,
            config.auth.clone(),
            config.exemptions.clone(),
        ));
    }

    /// Never limit these keys and forward-auth clients.
    pub fn with_exemptions(self, exemptions: Exemptions) -> App {
        let live = self.live();
        let policies = live.policies.values().map(|served| served.policy.clone());
        self.swap_live(Self::live_of(
            &self.limiter,
            policies,
            live.max_counters,
            live.auth.clone(),
            exemptions,
        ));
        self
    }

    fn swap_live(&self, live: Live) {
        self.live.store(Arc::new(live));
    }

    /// Names of the policies in force, sorted.
    pub fn policy_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.live().policies.keys().cloned().collect();
        names.sort_unstable();
        names
    }
}
