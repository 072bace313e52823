//! The `[failure]` section: what decides when the store does not answer.
//! Restart only.

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin, Overrides};
use crate::limiter::FailureMode;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FailureSection {
    mode: Option<String>,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &FailureSection,
    overrides: &Overrides,
) -> Result<FailureMode, ConfigError> {
    Ok(origin
        .layered(
            key!("failure.mode"),
            overrides.failure_mode.as_deref(),
            file.mode.as_deref(),
            parse_failure_mode,
        )?
        .unwrap_or_default())
}

pub fn parse_failure_mode(text: &str) -> Result<FailureMode, String> {
    match text {
        "allow" => Ok(FailureMode::Allow),
        "deny" => Ok(FailureMode::Deny),
        "local" => Ok(FailureMode::Local),
        other => Err(format!("{other:?} is not one of allow, deny, local")),
    }
}
