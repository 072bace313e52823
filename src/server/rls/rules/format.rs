//! The file format: envoyproxy/ratelimit's `YamlRoot`, `YamlDescriptor` and
//! `YamlRateLimit` (src/config/config_impl.go), with its list of valid keys;
//! any other key is an error, as it is there.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlRoot {
    #[serde(default)]
    pub(super) domain: String,
    #[serde(default)]
    pub(super) descriptors: Vec<YamlDescriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlDescriptor {
    #[serde(default)]
    pub(super) key: String,
    #[serde(default)]
    pub(super) value: String,
    pub(super) rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    pub(super) descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    pub(super) shadow_mode: bool,
    #[serde(default)]
    pub(super) quota_mode: bool,
    /// Per-value metrics in envoyproxy/ratelimit; slidegate's metrics never
    /// carry request values, so it is accepted and changes nothing.
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) detailed_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) value_to_metric: bool,
    #[serde(default)]
    pub(super) share_threshold: bool,
    /// Returned as dynamic metadata by envoyproxy/ratelimit; accepted, not
    /// returned (see the book's Envoy RLS chapter).
    #[allow(dead_code)]
    pub(super) metadata: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlRateLimit {
    #[serde(default)]
    pub(super) requests_per_unit: u32,
    pub(super) unit: Option<String>,
    #[serde(default)]
    pub(super) unlimited: bool,
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) replaces: Vec<YamlReplaces>,
    /// slidegate: sub-buckets per window (default 1).
    pub(super) precision: Option<u32>,
    /// slidegate: the window is this many units (default 1), e.g. 5 minutes.
    pub(super) unit_multiplier: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlReplaces {
    pub(super) name: String,
}
