//! The `[rlqs]` section: Envoy's rate-limit quota service (RLQS), its
//! listener, its bucket rules and what a client may make it hold
//! (`bounds`). Everything but `listen` applies live on a reload (see
//! `server::rlqs`).

pub(super) mod bounds;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Key, Origin, Overrides, parse_listen};
use crate::policy::{Limit, parse_duration_ms};
pub use bounds::RlqsBounds;

/// Sub-buckets of the window RLQS counts each bucket's fleet-wide demand
/// in (one a second of 10 s): its counters are this plus one, which
/// `limits.max_counters` must allow.
pub(crate) const RLQS_DEMAND_PRECISION: u32 = 10;

/// How long an assignment lives in Envoy without a refresh, by default.
pub const DEFAULT_ASSIGNMENT_TTL: Duration = Duration::from_secs(10);
/// How long a stream may leave a bucket unreported before it is abandoned.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RlqsSection {
    listen: Option<String>,
    assignment_ttl: Option<String>,
    abandon_after: Option<String>,
    unmatched: Option<String>,
    max_report_bytes: Option<u64>,
    max_domain_bytes: Option<u64>,
    max_label_name_bytes: Option<u64>,
    max_label_value_bytes: Option<u64>,
    max_tracked_bytes: Option<u64>,
    buckets: Option<Vec<BucketSection>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketSection {
    domain: Option<String>,
    #[serde(rename = "match", default)]
    matches: BTreeMap<String, String>,
    limit: u64,
    window: String,
    precision: Option<u32>,
}

/// The RLQS settings, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct RlqsConfig {
    /// Where to serve RLQS (gRPC); `None`: not served.
    pub listen: Option<SocketAddr>,
    /// The TTL of every assignment sent, in whole seconds (Envoy drops nanos).
    pub assignment_ttl: Duration,
    pub abandon_after: Duration,
    /// What a bucket no rule matches gets.
    pub unmatched: Unmatched,
    /// What one report and all streams' buckets may weigh.
    pub bounds: RlqsBounds,
    /// In order: the first rule that matches a bucket decides it.
    pub buckets: Vec<BucketRule>,
}

impl Default for RlqsConfig {
    fn default() -> RlqsConfig {
        RlqsConfig {
            listen: None,
            assignment_ttl: DEFAULT_ASSIGNMENT_TTL,
            abandon_after: DEFAULT_ABANDON_AFTER,
            unmatched: Unmatched::Allow,
            bounds: RlqsBounds::default(),
            buckets: Vec::new(),
        }
    }
}

/// The blanket rule of a bucket no rule matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unmatched {
    #[default]
    Allow,
    Deny,
}

/// One `[[rlqs.buckets]]`: which bucket ids it matches and their limit.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketRule {
    /// `None`: every domain.
    pub domain: Option<String>,
    /// Labels a bucket id must hold; a value of `*` is any value.
    pub matches: BTreeMap<String, String>,
    /// Requests per window, across every Envoy and slidegate instance.
    pub limit: Limit,
}

impl BucketRule {
    /// Whether a bucket id (its labels) of `domain` is this rule's.
    pub fn matches<'a>(
        &self,
        domain: &str,
        mut label: impl FnMut(&str) -> Option<&'a str>,
    ) -> bool {
        self.domain.as_deref().is_none_or(|own| own == domain)
            && self.matches.iter().all(|(key, wanted)| {
                label(key).is_some_and(|value| wanted == "*" || value == wanted)
            })
    }
}

pub(super) fn resolve(
    origin: &Origin,
    overrides: &Overrides,
    section: &RlqsSection,
    max_counters: usize,
) -> Result<RlqsConfig, ConfigError> {
    let in_file = |field: &str, message: String| origin.file_error(field, message);
    let listen = origin.layered(
        key!("rlqs.listen"),
        overrides.rlqs_listen.as_deref(),
        section.listen.as_deref(),
        parse_listen,
    )?;
    if !cfg!(feature = "grpc") && listen.is_some() {
        return Err(ConfigError(
            "Envoy RLQS is configured, but this build has no `grpc` feature".to_owned(),
        ));
    }
    let demand_counters = RLQS_DEMAND_PRECISION as usize + 1;
    if listen.is_some() && max_counters < demand_counters {
        return Err(in_file(
            "limits.max_counters",
            format!(
                "{max_counters} is fewer than RLQS needs: it counts each bucket's demand in \
                 {demand_counters} counters (raise it, or serve no rlqs.listen)"
            ),
        ));
    }
    let duration = |key: &'static Key, text: Option<&String>, default: Duration, whole: bool| {
        let parse = |text: &str| {
            let ms = key.check(parse_duration_ms(text)?)?;
            if whole && !ms.is_multiple_of(1_000) {
                return Err(format!("must be whole seconds, got {text:?}"));
            }
            Ok(Duration::from_millis(ms))
        };
        origin
            .layered(key, None, text.map(String::as_str), parse)
            .map(|given| given.unwrap_or(default))
    };
    // Envoy reads an assignment's TTL in whole seconds.
    let assignment_ttl = duration(
        key!("rlqs.assignment_ttl"),
        section.assignment_ttl.as_ref(),
        DEFAULT_ASSIGNMENT_TTL,
        true,
    )?;
    let abandon_after = duration(
        key!("rlqs.abandon_after"),
        section.abandon_after.as_ref(),
        DEFAULT_ABANDON_AFTER,
        false,
    )?;
    let unmatched = match section.unmatched.as_deref() {
        None | Some("allow") => Unmatched::Allow,
        Some("deny") => Unmatched::Deny,
        Some(other) => {
            return Err(in_file(
                "rlqs.unmatched",
                format!("{other:?} is not one of allow, deny"),
            ));
        }
    };
    let bounds = bounds::resolve(
        origin,
        &bounds::Given {
            max_report_bytes: section.max_report_bytes,
            max_domain_bytes: section.max_domain_bytes,
            max_label_name_bytes: section.max_label_name_bytes,
            max_label_value_bytes: section.max_label_value_bytes,
            max_tracked_bytes: section.max_tracked_bytes,
        },
    )?;
    let buckets = section
        .buckets
        .iter()
        .flatten()
        .enumerate()
        .map(|(index, bucket)| {
            bucket_rule(bucket, max_counters, &bounds).map_err(|(field, message)| {
                in_file(&format!("rlqs.buckets[{index}].{field}"), message)
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(RlqsConfig {
        listen,
        assignment_ttl,
        abandon_after,
        unmatched,
        bounds,
        buckets,
    })
}

fn bucket_rule(
    bucket: &BucketSection,
    max_counters: usize,
    bounds: &RlqsBounds,
) -> Result<BucketRule, (&'static str, String)> {
    if bucket.domain.as_deref() == Some("") {
        return Err((
            "domain",
            "must not be empty (leave it out for every domain)".into(),
        ));
    }
    // A rule no report could name is a mistake, not a rule.
    if let Some(domain) = bucket
        .domain
        .as_deref()
        .filter(|d| d.len() > bounds.domain_bytes)
    {
        return Err((
            "domain",
            format!(
                "{} bytes, longer than rlqs.max_domain_bytes ({}): no report could name it",
                domain.len(),
                bounds.domain_bytes
            ),
        ));
    }
    for (key, value) in &bucket.matches {
        if key.is_empty() || value.is_empty() {
            return Err(("match", "labels and values must not be empty".into()));
        }
        if key.len() > bounds.label_name_bytes || value.len() > bounds.label_value_bytes {
            return Err((
                "match",
                format!(
                    "label {key:?} is longer than rlqs.max_label_name_bytes ({}) or its value \
                     than rlqs.max_label_value_bytes ({}): no bucket id could hold it",
                    bounds.label_name_bytes, bounds.label_value_bytes
                ),
            ));
        }
    }
    let window_ms = parse_duration_ms(&bucket.window).map_err(|message| ("window", message))?;
    let limit = Limit::new(bucket.limit, window_ms, bucket.precision.unwrap_or(1))
        .map_err(|error| (error.field(), error.to_string()))?;
    let counters = limit.window().precision() as usize + 1;
    if counters > max_counters {
        return Err((
            "precision",
            format!("touches {counters} counters, more than limits.max_counters ({max_counters})"),
        ));
    }
    Ok(BucketRule {
        domain: bucket.domain.clone(),
        matches: bucket.matches.clone(),
        limit,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Config;
    use super::bounds::DEFAULT_MAX_LABEL_VALUE_BYTES;
    use super::*;

    fn resolve(text: &str) -> Result<RlqsConfig, String> {
        Config::resolve(
            Some((Path::new("slidegate.toml"), text)),
            &Overrides::default(),
        )
        .map(|config| config.rlqs)
        .map_err(|error| error.to_string())
    }

    #[cfg(feature = "grpc")]
    #[test]
    fn the_issue_example_loads() {
        let rlqs = resolve(
            r#"
[rlqs]
listen = "0.0.0.0:18082"
assignment_ttl = "10s"
abandon_after = "60s"
unmatched = "deny"

[[rlqs.buckets]]
domain = "envoy"
match = { name = "api", tenant = "*" }
limit = 1000
window = "1m"
precision = 10
"#,
        )
        .unwrap();
        assert_eq!(rlqs.listen.unwrap().to_string(), "0.0.0.0:18082");
        assert_eq!(rlqs.unmatched, Unmatched::Deny);
        let rule = &rlqs.buckets[0];
        assert_eq!(rule.limit.limit(), 1000);
        assert_eq!(rule.limit.window().precision(), 10);
        let labels = [("name", "api"), ("tenant", "t1")];
        let label = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        assert!(rule.matches("envoy", label));
        assert!(!rule.matches("other", label));
        assert!(!rule.matches("envoy", |key| (key == "name").then_some("api")));
    }

    #[test]
    fn defaults_need_no_section() {
        assert_eq!(resolve("").unwrap(), RlqsConfig::default());
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases = [
            (
                "[rlqs]\nassignment_ttl = \"1500ms\"",
                "rlqs.assignment_ttl: must be whole seconds",
            ),
            ("[rlqs]\nassignment_ttl = \"0s\"", "rlqs.assignment_ttl:"),
            ("[rlqs]\nabandon_after = \"soon\"", "rlqs.abandon_after:"),
            (
                "[rlqs]\nunmatched = \"maybe\"",
                "rlqs.unmatched: \"maybe\" is not one of",
            ),
            (
                "[[rlqs.buckets]]\nlimit = 0\nwindow = \"1s\"",
                "rlqs.buckets[0].limit:",
            ),
            (
                "[[rlqs.buckets]]\nlimit = 1\nwindow = \"1s\"\nprecision = 7",
                "rlqs.buckets[0].precision:",
            ),
            (
                "[[rlqs.buckets]]\nlimit = 1\nwindow = \"1y\"",
                "rlqs.buckets[0].window:",
            ),
            (
                "[[rlqs.buckets]]\nlimit = 1\nwindow = \"1s\"\nmatch = { name = \"\" }",
                "rlqs.buckets[0].match:",
            ),
            ("[rlqs]\nlisten = \"nowhere\"", "rlqs.listen:"),
            (
                "[rlqs]\nmax_report_bytes = 100",
                "rlqs.max_report_bytes: must be from 4096",
            ),
            ("[rlqs]\nmax_domain_bytes = 0", "rlqs.max_domain_bytes:"),
            (
                "[rlqs]\nmax_label_name_bytes = 0",
                "rlqs.max_label_name_bytes:",
            ),
            (
                "[rlqs]\nmax_label_value_bytes = 100000",
                "rlqs.max_label_value_bytes:",
            ),
            ("[rlqs]\nmax_tracked_bytes = 1", "rlqs.max_tracked_bytes:"),
            (
                "[rlqs]\nmax_domain_bytes = 4\n[[rlqs.buckets]]\ndomain = \"envoy\"\nlimit = 1\nwindow = \"1s\"",
                "rlqs.buckets[0].domain: 5 bytes, longer than rlqs.max_domain_bytes (4)",
            ),
        ];
        for (text, expected) in cases {
            let error = resolve(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let long_value = format!(
            "[[rlqs.buckets]]\nlimit = 1\nwindow = \"1s\"\nmatch = {{ name = \"{}\" }}",
            "v".repeat(DEFAULT_MAX_LABEL_VALUE_BYTES + 1)
        );
        let error = resolve(&long_value).unwrap_err();
        assert!(
            error.contains("rlqs.buckets[0].match: label \"name\""),
            "{error}"
        );
    }
}
