//! The RLS rules on reload: the rule files that held still compiled,
//! held to the reloaded `limits.max_counters`, and swapped in whole
//! (see [`Rls::replace`]).

use super::{Rls, RuleSet};
use crate::config::reload::Reloaded;

/// The rules a reload puts in force: the changed rule files compiled, or
/// `None` when they did not change. Either way the rules that will serve
/// must fit the reloaded `limits.max_counters`, as at start; an error names
/// the file and what is wrong, and the reload is refused whole, the running
/// rules kept.
pub(crate) fn rules_reloaded(
    rls: Option<&Rls>,
    reloaded: &Reloaded,
) -> Result<Option<RuleSet>, String> {
    let max_counters = reloaded.config.max_counters;
    let Some(files) = &reloaded.rules else {
        if let Some(rls) = rls {
            rls.rules().check_counters(max_counters)?;
        }
        return Ok(None);
    };
    let rules = RuleSet::from_files(files.iter())?;
    rules.check_counters(max_counters)?;
    Ok(Some(rules))
}

/// Put reloaded rules in force, from the next request on.
pub(crate) fn apply_rules(rls: &Rls, rules: RuleSet) {
    let domains: Vec<&str> = rules.domains().collect();
    tracing::info!(
        ?domains,
        rules = rules.rules().len(),
        "Envoy RLS rules reloaded"
    );
    rls.replace(rules);
}
