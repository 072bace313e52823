//! What the engineer on call needs before any figure: which instance this
//! is (every figure on the page is this instance's own), which code it
//! runs and for how long, and, with the store down, what it does now in
//! words and the store's last error.

use std::sync::Mutex;
use std::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::limiter::FailureMode;
use crate::store::StoreError;

/// The version `slidegate --version` prints: with the commit when built
/// from a checkout (build.rs).
pub(super) const VERSION: &str = env!("SLIDEGATE_VERSION");

/// This instance's identity and the last store error it saw.
pub(super) struct OnCall {
    instance: String,
    started: Instant,
    last_error: Mutex<Option<SeenError>>,
}

struct SeenError {
    message: String,
    at_ms: u64,
}

impl Default for OnCall {
    fn default() -> OnCall {
        OnCall {
            instance: hostname(),
            started: Instant::now(),
            last_error: Mutex::new(None),
        }
    }
}

impl OnCall {
    pub(super) fn instance(&self) -> &str {
        &self.instance
    }

    /// Whole seconds since this instance was built: monotonic, so a wall
    /// clock set back does not shorten it.
    pub(super) fn uptime_s(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    pub(super) fn store_failed(&self, error: &StoreError) {
        let seen = SeenError {
            message: error.to_string(),
            at_ms: SystemClock.now_ms(),
        };
        *self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(seen);
    }

    /// The last store error, `null` if none was seen since the start: the
    /// newer of what the page's own probe met and what `checks_met` (the
    /// limiter's calls) last met. It stays once the store is back, so a
    /// short outage between two looks at the page is still told.
    pub(super) fn last_error_json(
        &self,
        checks_met: Option<(String, std::time::Duration)>,
    ) -> serde_json::Value {
        let now_ms = SystemClock.now_ms();
        let probe_met = self
            .last_error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
            .map(|seen| (seen.message.clone(), now_ms.saturating_sub(seen.at_ms)));
        let checks_met = checks_met.map(|(message, ago)| {
            let ago_ms = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
            (message, ago_ms)
        });
        let newest = [probe_met, checks_met]
            .into_iter()
            .flatten()
            .min_by_key(|(_, ms_ago)| *ms_ago);
        match newest {
            Some((message, ms_ago)) => serde_json::json!({
                "message": message,
                "ms_ago": ms_ago,
            }),
            None => serde_json::Value::Null,
        }
    }
}

/// `failure.mode` as the configuration spells it.
pub(super) fn mode_name(mode: FailureMode) -> &'static str {
    match mode {
        FailureMode::Allow => "allow",
        FailureMode::Deny => "deny",
        FailureMode::Local => "local",
    }
}

/// What this instance does while the store does not answer, in words an
/// engineer paged at night reads without the configuration at hand.
pub(super) fn failing(mode: FailureMode) -> &'static str {
    match mode {
        FailureMode::Allow => "failing open: limits are not enforced",
        FailureMode::Deny => "failing closed: every check refused",
        FailureMode::Local => "deciding locally on this instance",
    }
}

/// The kernel's hostname (a pod's name in Kubernetes), else `HOSTNAME`
/// from the environment, else `unknown`: the page must name the instance
/// even where neither is readable.
fn hostname() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|text| text.trim().to_owned());
    from_kernel
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}
