//! What a reload replaces: the named policies, forward-auth settings,
//! exemptions, the `limits.max_counters` they were checked against and the
//! API tokens, swapped as one, so that a request is checked and decided
//! under one consistent configuration.

use std::sync::Arc;

use super::guard::TokenSettings;
use super::{App, api};
use crate::config::{AuthConfig, Config, Exemptions, ServerGuard};
use crate::limiter::Limiter;
use crate::policy::Policy;
use crate::store::AnyStore;

/// The settings that change without a restart.
#[derive(Clone)]
pub(crate) struct Live {
    pub policies: api::NamedPolicies,
    /// `limits.max_counters` of the configuration these policies came
    /// from: what inline limits parsed under them are held to.
    pub max_counters: usize,
    pub auth: AuthConfig,
    /// Keys and forward-auth clients never limited.
    pub exemptions: Exemptions,
    /// The API tokens a call is checked against: read from the same
    /// configuration as the policies that decide it.
    pub tokens: TokenSettings,
}

impl App {
    pub(super) fn live_of(
        limiter: &Limiter<AnyStore>,
        policies: impl IntoIterator<Item = Policy>,
        max_counters: usize,
        auth: AuthConfig,
        exemptions: Exemptions,
        tokens: TokenSettings,
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
            tokens,
        }
    }

    /// The configuration in force now: a call takes it once, and is checked
    /// and decided under it.
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
            live.tokens.clone(),
        ));
    }

    /// Put in force everything of a reloaded configuration that applies
    /// live: the policies, forward-auth, exemptions and API tokens (one
    /// swap), the connection cap, the refusal log's rate and the RLQS
    /// settings. What a reload changes is decided here, in one place, for
    /// every face.
    pub fn apply_live(&self, config: &Config) {
        self.apply_config(config);
        self.guard.apply(&config.server);
        self.log_refusals(config.log.refusals_per_s);
        self.envoy.apply(config);
    }

    /// [`apply`](Self::apply) what a configuration says, its exemptions
    /// and API tokens included, as one swap: a request sees all of it or
    /// none.
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
            TokenSettings::of(&config.server),
        ));
    }

    /// Never limit these keys and forward-auth clients.
    pub fn with_exemptions(self, exemptions: Exemptions) -> App {
        self.changing_live(|live| live.exemptions = exemptions)
    }

    /// Cap connections and require API tokens as `settings` say.
    pub fn with_guard(mut self, settings: ServerGuard) -> App {
        let tokens = TokenSettings::of(&settings);
        self.guard.configure(&settings);
        self.changing_live(|live| live.tokens = tokens)
    }

    /// The app with one part of its live configuration changed, the rest
    /// kept: for building an app, before it serves.
    fn changing_live(self, change: impl FnOnce(&mut Live)) -> App {
        let mut live = Live::clone(&self.live());
        change(&mut live);
        self.swap_live(live);
        self
    }

    /// Put `live` in force. What the policies it no longer has kept by
    /// name (their metric series, their last minute on the status page)
    /// goes with them, so that it follows the configuration in force.
    fn swap_live(&self, live: Live) {
        let before = self.live.swap(Arc::new(live));
        let now = self.live.load();
        for name in before.policies.keys() {
            if !now.policies.contains_key(name) {
                self.limiter.metrics_handles().forget_policy(name);
                self.ops.forget_policy(name);
            }
        }
    }

    /// Names of the policies in force, sorted.
    pub fn policy_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.live().policies.keys().cloned().collect();
        names.sort_unstable();
        names
    }
}
