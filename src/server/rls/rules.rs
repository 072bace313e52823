//! envoyproxy/ratelimit's configuration, read unchanged: YAML files of
//! `domain` and nested `descriptors`, compiled into one tree per domain, and
//! the lookup that finds the rule of a request's descriptor the way
//! envoyproxy/ratelimit's `GetLimit` (src/config/config_impl.go) does.

use std::collections::HashMap;
use std::path::Path;

use super::metrics::RuleMetrics;
use crate::policy::{Limit, MAX_WINDOW_MS, Policy};

/// The scope of every RLS counter. Not a plain name, so no HTTP policy can
/// share its counters.
pub const RLS_SCOPE: &str = "rls:";

/// What a rule does with the descriptors it matches.
#[derive(Clone, Debug)]
pub enum Action {
    /// `unlimited: true`: always OK, nothing counted.
    Unlimited,
    /// `requests_per_unit: 0`: always OVER_LIMIT, nothing counted.
    Refuse,
    /// A sliding window of `unit` (× `unit_multiplier`), in `policy`.
    Limit(Policy),
}

/// One `rate_limit` of the configuration (or of a request's limit override).
#[derive(Debug)]
pub struct Rule {
    pub domain: String,
    /// The rule's path, as envoyproxy/ratelimit names its stats:
    /// `domain.key_value.key`. Bounded by the configuration.
    pub path: String,
    pub name: Option<String>,
    pub unit: Unit,
    pub requests_per_unit: u32,
    pub action: Action,
    pub shadow_mode: bool,
    pub quota_mode: bool,
    pub replaces: Vec<String>,
    pub metrics: RuleMetrics,
}

impl Rule {
    /// A limit given by the request itself (`RateLimitDescriptor.limit`):
    /// never shadow, replaces nothing.
    pub fn override_of(domain: &str, requests_per_unit: u32, unit: Unit) -> Result<Rule, String> {
        let action = action(requests_per_unit, unit, false, None, None)?;
        Ok(Rule {
            domain: domain.to_owned(),
            path: format!("{domain}.override"),
            name: None,
            unit,
            requests_per_unit,
            action,
            shadow_mode: false,
            quota_mode: false,
            replaces: Vec::new(),
            metrics: RuleMetrics::default(),
        })
    }
}

fn action(
    requests_per_unit: u32,
    unit: Unit,
    unlimited: bool,
    precision: Option<u32>,
    multiplier: Option<u32>,
) -> Result<Action, String> {
    if unlimited {
        return Ok(Action::Unlimited);
    }
    if requests_per_unit == 0 {
        return Ok(Action::Refuse);
    }
    let multiplier = match multiplier {
        Some(0) => return Err("unit_multiplier: must be at least 1".to_owned()),
        Some(multiplier) => u64::from(multiplier),
        None => 1,
    };
    let window_ms = unit.ms().saturating_mul(multiplier);
    if window_ms > MAX_WINDOW_MS {
        return Err("unit_multiplier: the window must be at most 365 days".to_owned());
    }
    let limit = Limit::new(
        u64::from(requests_per_unit),
        window_ms,
        precision.unwrap_or(1),
    )
    .map_err(|error| format!("{}: {error}", error.field()))?;
    Policy::protocol(RLS_SCOPE, vec![limit])
        .map(Action::Limit)
        .map_err(|error| error.to_string())
}

/// One level of a domain's tree.
#[derive(Debug, Default)]
struct Node {
    /// By `key_value`, or by `key` for a descriptor without a value.
    children: HashMap<String, Node>,
    /// Values with `*`: (`key_value` pattern, its parts split on `*`).
    wildcards: Vec<(String, Vec<String>)>,
    rule: Option<usize>,
    share_threshold: bool,
}

/// Every domain's rules, compiled.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, Node>,
    rules: Vec<Rule>,
    /// Hits decided by requests' own limit overrides, per domain.
    overrides: HashMap<String, RuleMetrics>,
}

impl RuleSet {
    /// The rules at `path` as a start (and `--check`) takes them: loaded
    /// and held to `limits.max_counters`, an error naming the path.
    pub fn load_within(path: &Path, max_counters: usize) -> Result<RuleSet, String> {
        let rules = RuleSet::load(path)?;
        rules
            .check_counters(max_counters)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        Ok(rules)
    }

    /// A YAML file, or every `*.yaml` and `*.yml` file of a directory (in
    /// name order), as envoyproxy/ratelimit reads its runtime directory.
    pub fn load(path: &Path) -> Result<RuleSet, String> {
        let files = crate::config::rls::rule_files(path)?;
        let read: Vec<_> = files
            .into_iter()
            .map(|file| {
                let bytes = std::fs::read(&file).map_err(|error| error.to_string());
                (file, bytes)
            })
            .collect();
        RuleSet::from_files(
            read.iter()
                .map(|(file, bytes)| (file.as_path(), bytes.as_deref())),
        )
    }

    /// The rules of files already read (a reload compiles the bytes that
    /// held still, not whatever the files hold by now), each with its
    /// bytes or why they could not be read.
    pub fn from_files<'a, E: std::fmt::Display>(
        files: impl IntoIterator<Item = (&'a Path, Result<&'a [u8], E>)>,
    ) -> Result<RuleSet, String> {
        let mut rules = RuleSet::default();
        for (file, bytes) in files {
            let cannot_read =
                |error: &dyn std::fmt::Display| format!("cannot read {}: {error}", file.display());
            let text = std::str::from_utf8(bytes.map_err(|error| cannot_read(&error))?)
                .map_err(|error| cannot_read(&error))?;
            rules.add_file(&file.display().to_string(), text)?;
        }
        Ok(rules)
    }

    /// Add one file's domain; `origin` names the file in errors.
    pub fn add_file(&mut self, origin: &str, text: &str) -> Result<(), String> {
        // serde_yaml_ng's messages name the path in the file and the line.
        let root: YamlRoot =
            serde_yaml_ng::from_str(text).map_err(|error| format!("{origin}: {error}"))?;
        if root.domain.is_empty() {
            return Err(format!("{origin}: domain: must not be empty"));
        }
        if self.domains.contains_key(&root.domain) {
            return Err(format!(
                "{origin}: domain: {:?} is already defined by another file",
                root.domain
            ));
        }
        let mut node = Node::default();
        self.load_descriptors(
            origin,
            &root.domain,
            "descriptors",
            &root.domain,
            &mut node,
            &root.descriptors,
        )?;
        self.overrides
            .insert(root.domain.clone(), RuleMetrics::default());
        self.domains.insert(root.domain, node);
        Ok(())
    }

    fn load_descriptors(
        &mut self,
        origin: &str,
        domain: &str,
        field: &str,
        parent_path: &str,
        node: &mut Node,
        descriptors: &[YamlDescriptor],
    ) -> Result<(), String> {
        for (index, descriptor) in descriptors.iter().enumerate() {
            let field = format!("{field}[{index}]");
            let error = |what: &str, message: String| format!("{origin}: {field}{what}: {message}");
            if descriptor.key.is_empty() {
                return Err(error(".key", "must not be empty".to_owned()));
            }
            let final_key = if descriptor.value.is_empty() {
                descriptor.key.clone()
            } else {
                format!("{}_{}", descriptor.key, descriptor.value)
            };
            let path = format!("{parent_path}.{final_key}");
            if node.children.contains_key(&final_key) {
                return Err(error(
                    "",
                    format!("duplicate descriptor {path:?} (same key and value at one level)"),
                ));
            }
            if descriptor.share_threshold && !final_key.contains('*') {
                return Err(error(
                    ".share_threshold",
                    "only applies to a value with a wildcard '*'".to_owned(),
                ));
            }
            let mut child = Node {
                share_threshold: descriptor.share_threshold,
                ..Node::default()
            };
            if let Some(rate_limit) = &descriptor.rate_limit {
                let rule = self
                    .rule(domain, &path, descriptor, rate_limit)
                    // `message` starts with the field: "unit: ...".
                    .map_err(|message| format!("{origin}: {field}.rate_limit.{message}"))?;
                child.rule = Some(self.rules.len());
                self.rules.push(rule);
            }
            self.load_descriptors(
                origin,
                domain,
                &format!("{field}.descriptors"),
                &path,
                &mut child,
                &descriptor.descriptors,
            )?;
            if final_key.contains('*') {
                let parts = final_key.split('*').map(str::to_owned).collect();
                node.wildcards.push((final_key.clone(), parts));
            }
            node.children.insert(final_key, child);
        }
        Ok(())
    }

    fn rule(
        &self,
        domain: &str,
        path: &str,
        descriptor: &YamlDescriptor,
        rate_limit: &YamlRateLimit,
    ) -> Result<Rule, String> {
        let unit = match (rate_limit.unlimited, rate_limit.unit.as_deref()) {
            (true, Some(unit)) if Unit::parse(unit).is_some() => {
                return Err("unit: must not be given with unlimited: true".to_owned());
            }
            (true, _) => Unit::Second,
            (false, Some(text)) => Unit::parse(text).ok_or_else(|| {
                format!("unit: {text:?} is not one of second, minute, hour, day, week, month, year")
            })?,
            (false, None) => return Err("unit: is required (or unlimited: true)".to_owned()),
        };
        let name = rate_limit.name.clone().filter(|name| !name.is_empty());
        for (index, replaced) in rate_limit.replaces.iter().enumerate() {
            if replaced.name.is_empty() {
                return Err(format!("replaces[{index}].name: must not be empty"));
            }
            if Some(&replaced.name) == name.as_ref() {
                return Err(format!(
                    "replaces[{index}].name: a rule cannot replace itself"
                ));
            }
        }
        let action = action(
            rate_limit.requests_per_unit,
            unit,
            rate_limit.unlimited,
            rate_limit.precision,
            rate_limit.unit_multiplier,
        )?;
        Ok(Rule {
            domain: domain.to_owned(),
            path: path.to_owned(),
            name,
            unit,
            requests_per_unit: rate_limit.requests_per_unit,
            action,
            shadow_mode: descriptor.shadow_mode,
            quota_mode: descriptor.quota_mode,
            replaces: rate_limit.replaces.iter().map(|r| r.name.clone()).collect(),
            metrics: RuleMetrics::default(),
        })
    }

    /// The metrics of a known domain's limit overrides.
    pub fn override_metrics(&self, domain: &str) -> &RuleMetrics {
        static UNKNOWN: std::sync::OnceLock<RuleMetrics> = std::sync::OnceLock::new();
        self.overrides
            .get(domain)
            .unwrap_or_else(|| UNKNOWN.get_or_init(RuleMetrics::default))
    }

    pub fn overrides(&self) -> impl Iterator<Item = (&str, &RuleMetrics)> {
        self.overrides
            .iter()
            .map(|(domain, metrics)| (domain.as_str(), metrics))
    }

    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Whether every rule's counters fit `limits.max_counters`, as a
    /// configured policy's must: a rule past it would refuse every request
    /// it matches with INVALID_ARGUMENT, so it is an error at load instead,
    /// naming the rule.
    pub fn check_counters(&self, max_counters: usize) -> Result<(), String> {
        for rule in &self.rules {
            if let Action::Limit(policy) = &rule.action {
                policy
                    .within(max_counters)
                    .map_err(|error| format!("rule {}: {error}", rule.path))?;
            }
        }
        Ok(())
    }

    /// Each rule's hit counts added from `before`'s rule of the same
    /// domain and path, so that a reload does not reset their series.
    /// Hits `before` counts while this runs, in the instant before the
    /// swap, are not carried.
    pub fn carry_metrics_from(&self, before: &RuleSet) {
        for rule in &self.rules {
            let same = before
                .rules
                .iter()
                .find(|old| old.domain == rule.domain && old.path == rule.path);
            if let Some(old) = same {
                rule.metrics.carry_from(&old.metrics);
            }
        }
        for (domain, metrics) in &self.overrides {
            if let Some(old) = before.overrides.get(domain) {
                metrics.carry_from(old);
            }
        }
    }

    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }
}

mod format;
mod lookup;
#[cfg(test)]
mod tests;
mod unit;

use format::{YamlDescriptor, YamlRateLimit, YamlRoot};
pub use unit::Unit;
