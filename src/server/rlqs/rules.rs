//! The `[[rlqs.buckets]]` rules compiled into policies, and what identifies
//! a bucket's counters.

use std::collections::HashMap;
use std::time::Duration;

use crate::config::{BucketRule, RlqsBounds, RlqsConfig, Unmatched};
use crate::policy::{Limit, MAX_AMOUNT, Policy};

/// The scope of every RLQS bucket's counters. Not a plain name, so no HTTP
/// policy (or RLS rule) can share its counters.
pub const RLQS_SCOPE: &str = "rlqs:";
/// The scope of the demand counters: requests asked for (allowed and
/// denied), whatever was admitted.
const DEMAND_SCOPE: &str = "rlqs-demand:";
/// Demand is averaged over this window, shared by every instance: long
/// enough to hold several reports of a client, short enough that an idle
/// client's share moves to the busy ones within it.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(10);
/// Sub-buckets of the demand window: one a second.
const DEMAND_PRECISION: u32 = crate::config::rlqs::RLQS_DEMAND_PRECISION;

/// The `[rlqs]` settings in force, compiled.
#[derive(Debug)]
pub struct Settings {
    /// Whole seconds, at least 1: Envoy drops nanos, and expires an
    /// assignment of 0 s at once.
    pub assignment_ttl_s: u64,
    pub abandon_after_ms: u64,
    pub unmatched: Unmatched,
    /// What a report, its domain and its labels may weigh.
    pub bounds: RlqsBounds,
    rules: Vec<(BucketRule, Policy)>,
    /// The demand counters' policy, the same for every bucket.
    pub demand: Policy,
}

impl Settings {
    pub fn new(config: &RlqsConfig) -> Settings {
        let rules = config
            .buckets
            .iter()
            .filter_map(
                |rule| match Policy::protocol(RLQS_SCOPE, vec![rule.limit]) {
                    Ok(policy) => Some((rule.clone(), policy)),
                    // One limit always makes a policy; say so if that changes.
                    Err(error) => {
                        tracing::error!(%error, "an RLQS bucket rule makes no policy; skipped");
                        None
                    }
                },
            )
            .collect();
        Settings {
            assignment_ttl_s: config.assignment_ttl.as_secs().max(1),
            abandon_after_ms: config.abandon_after.as_millis() as u64,
            unmatched: config.unmatched,
            bounds: config.bounds,
            rules,
            demand: demand_policy(),
        }
    }

    /// The policy of the first rule matching a bucket id of `domain`.
    pub fn find(&self, domain: &str, labels: &HashMap<String, String>) -> Option<&Policy> {
        self.rules
            .iter()
            .find(|(rule, _)| rule.matches(domain, |key| labels.get(key).map(String::as_str)))
            .map(|(_, policy)| policy)
    }
}

fn demand_policy() -> Policy {
    let window_ms = DEMAND_WINDOW.as_millis() as u64;
    let limit = Limit::new(MAX_AMOUNT, window_ms, DEMAND_PRECISION);
    let policy = limit.map_err(|error| error.to_string()).and_then(|limit| {
        Policy::protocol(DEMAND_SCOPE, vec![limit]).map_err(|error| error.to_string())
    });
    match policy {
        Ok(policy) => policy,
        // Constants: a test builds it.
        Err(error) => unreachable!("the RLQS demand policy is valid: {error}"),
    }
}

/// The limiter key of a bucket: each distinct (domain, labels) has its own
/// counters, whichever rule matched it and in whatever order the labels
/// came. Hashed, so that bucket ids of any size make a key of fixed length.
pub fn counter_key(domain: &str, labels: &HashMap<String, String>) -> String {
    let mut sorted: Vec<(&String, &String)> = labels.iter().collect();
    sorted.sort_unstable();
    let mut hasher = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(domain.as_bytes());
    for (key, value) in sorted {
        field(key.as_bytes());
        field(value.as_bytes());
    }
    hasher.finalize().to_hex()[..32].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_first_matching_rule_wins_and_star_is_any_value() {
        let rule = |domain: Option<&str>, matches: &[(&str, &str)], limit: u64| BucketRule {
            domain: domain.map(str::to_owned),
            matches: matches
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            limit: Limit::new(limit, 60_000, 1).unwrap(),
        };
        let config = RlqsConfig {
            buckets: vec![
                rule(Some("envoy"), &[("name", "api"), ("tenant", "*")], 1),
                rule(None, &[("name", "api")], 2),
            ],
            ..RlqsConfig::default()
        };
        let settings = Settings::new(&config);
        let limit_of = |domain: &str, pairs: &[(&str, &str)]| {
            settings
                .find(domain, &labels(pairs))
                .map(|policy| policy.limits()[0].limit())
        };
        assert_eq!(
            limit_of("envoy", &[("name", "api"), ("tenant", "a")]),
            Some(1)
        );
        assert_eq!(limit_of("envoy", &[("name", "api")]), Some(2));
        assert_eq!(
            limit_of("other", &[("name", "api"), ("tenant", "a")]),
            Some(2)
        );
        assert_eq!(limit_of("envoy", &[("name", "web")]), None);
        assert_eq!(demand_policy().limits()[0].window().precision(), 10);
    }

    #[test]
    fn a_bucket_key_is_its_domain_and_labels_in_any_order() {
        let one = labels(&[("a", "1"), ("b", "2")]);
        let other = labels(&[("b", "2"), ("a", "1")]);
        assert_eq!(counter_key("d", &one), counter_key("d", &other));
        assert_ne!(counter_key("d", &one), counter_key("e", &one));
        // Lengths are part of the hash: no two label sets run together.
        assert_ne!(
            counter_key("d", &labels(&[("ab", "c")])),
            counter_key("d", &labels(&[("a", "bc")]))
        );
    }
}
