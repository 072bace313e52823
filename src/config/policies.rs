//! The `[policies.NAME]` sections: each policy's limits, shadow mode and
//! exempt keys. Applied live (`policies` in the reload lists stands for
//! all of them).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::exempt::KeyPatterns;
use super::{ConfigError, Origin};
use crate::policy::{LimitSpec, Policy, PolicyError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PolicySection {
    limits: Vec<LimitSpec>,
    #[serde(default)]
    shadow: bool,
    #[serde(default)]
    exempt_keys: Vec<String>,
}

/// What the sections settle: the policies, and the keys each exempts
/// (only policies that exempt some).
pub(super) struct Policies {
    pub policies: BTreeMap<String, Policy>,
    pub exempt_keys: BTreeMap<String, KeyPatterns>,
}

pub(super) fn resolve(
    origin: &Origin,
    sections: &BTreeMap<String, PolicySection>,
    max_counters: usize,
) -> Result<Policies, ConfigError> {
    let in_file = |field: &str, message: String| origin.file_error(field, message);
    let mut resolved = Policies {
        policies: BTreeMap::new(),
        exempt_keys: BTreeMap::new(),
    };
    for (name, section) in sections {
        let field = format!("policies.{name}");
        let mut limits = Vec::with_capacity(section.limits.len());
        for (index, spec) in section.limits.iter().enumerate() {
            let limit = spec.to_limit().map_err(|error| {
                in_file(
                    &format!("{field}.limits[{index}].{}", error.field),
                    error.message,
                )
            })?;
            limits.push(limit);
        }
        let policy = Policy::new(name.clone(), limits).map_err(|error| match error {
            PolicyError::Name(_) | PolicyError::ReservedName => in_file(&field, error.to_string()),
            _ => in_file(&format!("{field}.limits"), error.to_string()),
        })?;
        policy
            .within(max_counters)
            .map_err(|error| in_file(&format!("{field}.limits"), error.to_string()))?;
        resolved
            .policies
            .insert(name.clone(), policy.with_shadow(section.shadow));
        let exempt = KeyPatterns::parse(section.exempt_keys.iter().map(String::as_str)).map_err(
            |(index, message)| in_file(&format!("{field}.exempt_keys[{index}]"), message),
        )?;
        if !exempt.is_empty() {
            resolved.exempt_keys.insert(name.clone(), exempt);
        }
    }
    Ok(resolved)
}
