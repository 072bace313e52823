//! The `[limits]` section: bounds on what one check may touch, whoever
//! sends it. Live on reload (with the policies it bounds; the limiter's
//! own bound only rises, see `server::live`).

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin};
use crate::policy::DEFAULT_MAX_COUNTERS;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsSection {
    max_counters: Option<u64>,
}

/// `limits.max_counters`, checked.
pub(super) fn resolve(origin: &Origin, file: &LimitsSection) -> Result<usize, ConfigError> {
    Ok(origin
        .bounded(key!("limits.max_counters"), None, file.max_counters)?
        .map_or(DEFAULT_MAX_COUNTERS, |max| max as usize))
}
