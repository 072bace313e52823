//! The `[limits]` section: bounds on what one check may touch, whoever
//! sends it. Live on reload (with the policies it bounds; the limiter's
//! own bound only rises, see `server::live`).

use serde::Deserialize;

use super::{ConfigError, Origin};
use crate::policy::{DEFAULT_MAX_COUNTERS, MAX_COUNTERS};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitsSection {
    max_counters: Option<u64>,
}

/// `limits.max_counters`, checked.
pub(super) fn resolve(origin: &Origin, file: &LimitsSection) -> Result<usize, ConfigError> {
    match file.max_counters {
        None => Ok(DEFAULT_MAX_COUNTERS),
        Some(max) if (2..=MAX_COUNTERS as u64).contains(&max) => Ok(max as usize),
        Some(max) => Err(origin.file_error(
            "limits.max_counters",
            format!("must be from 2 to {MAX_COUNTERS}, got {max}"),
        )),
    }
}
