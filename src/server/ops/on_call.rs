//! What the engineer on call needs before any figure: which instance this
//! is (every figure on the page is this instance's own), which code it
//! runs and for how long, and, with the store down, what it does now in
//! words and the store's last error.

use std::time::{Duration, Instant};

use crate::limiter::FailureMode;

/// The version `slidegate --version` prints: with the commit when built
/// from a checkout (build.rs).
pub(super) const VERSION: &str = env!("SLIDEGATE_VERSION");

/// This instance's identity.
pub(super) struct OnCall {
    instance: String,
    started: Instant,
}

impl Default for OnCall {
    fn default() -> OnCall {
        OnCall {
            instance: hostname(),
            started: Instant::now(),
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
}

/// The last store error (a call's or a readiness probe's, as the
/// limiter's metrics keep it), `null` if none was met since the start. It
/// stays once the store is back, so a short outage between two looks at
/// the page is still told.
pub(super) fn last_error_json(last: Option<(String, Duration)>) -> serde_json::Value {
    match last {
        Some((message, ago)) => serde_json::json!({
            "message": message,
            "ms_ago": u64::try_from(ago.as_millis()).unwrap_or(u64::MAX),
        }),
        None => serde_json::Value::Null,
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
