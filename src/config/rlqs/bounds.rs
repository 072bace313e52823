//! What an RLQS client can make an instance hold, in bytes: one report, its
//! domain and its labels, and the buckets all streams keep together. Each
//! is a key of `[rlqs]`, applied live on a reload; their ranges are
//! the keys' rows in `config::keys`.

use super::super::keys::{Key, key};
use super::super::{ConfigError, Origin};

/// The largest usage report: Envoy sends every bucket of its cache in one
/// message each interval, a few short labels each (about 100 bytes a
/// bucket), so 1,000 buckets (the most a report may name) fit ten times
/// over.
pub const DEFAULT_MAX_REPORT_BYTES: usize = 1 << 20;
/// The longest domain: Envoy's is a name from its filter configuration.
pub const DEFAULT_MAX_DOMAIN_BYTES: usize = 256;
/// The longest label name (`name`, `tenant`, a header's name).
pub const DEFAULT_MAX_LABEL_NAME_BYTES: usize = 64;
/// The longest label value (a route's name, a tenant, a header's value).
pub const DEFAULT_MAX_LABEL_VALUE_BYTES: usize = 512;
/// What the buckets all streams keep may weigh together: 100,000 buckets of
/// a few short labels each (their count's own bound) fit with room, while
/// buckets with the largest ids the label bounds allow stop well before it.
pub const DEFAULT_MAX_TRACKED_BYTES: u64 = 64 << 20;

/// The bounds in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlqsBounds {
    /// The largest usage report, its message's bytes (`RESOURCE_EXHAUSTED`
    /// past it, read no further than its length).
    pub report_bytes: usize,
    pub domain_bytes: usize,
    pub label_name_bytes: usize,
    pub label_value_bytes: usize,
    /// What the buckets all streams keep may weigh together, each weighed
    /// by its id, its key and its entries.
    pub tracked_bytes: u64,
}

impl Default for RlqsBounds {
    fn default() -> RlqsBounds {
        RlqsBounds {
            report_bytes: DEFAULT_MAX_REPORT_BYTES,
            domain_bytes: DEFAULT_MAX_DOMAIN_BYTES,
            label_name_bytes: DEFAULT_MAX_LABEL_NAME_BYTES,
            label_value_bytes: DEFAULT_MAX_LABEL_VALUE_BYTES,
            tracked_bytes: DEFAULT_MAX_TRACKED_BYTES,
        }
    }
}

/// The bounds as the `[rlqs]` section gives them (fields of its own, not a
/// flattened struct: serde cannot deny unknown fields beside a flattened
/// one).
#[derive(Debug, Default)]
pub(super) struct Given {
    pub max_report_bytes: Option<u64>,
    pub max_domain_bytes: Option<u64>,
    pub max_label_name_bytes: Option<u64>,
    pub max_label_value_bytes: Option<u64>,
    pub max_tracked_bytes: Option<u64>,
}

pub(super) fn resolve(origin: &Origin, section: &Given) -> Result<RlqsBounds, ConfigError> {
    let defaults = RlqsBounds::default();
    let bytes = |key: &'static Key, given: Option<u64>, default: u64| {
        origin
            .bounded(key, None, given)
            .map(|bytes| bytes.unwrap_or(default))
    };
    let size = |key: &'static Key, given: Option<u64>, default: usize| {
        bytes(key, given, default as u64).map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX))
    };
    Ok(RlqsBounds {
        report_bytes: size(
            key!("rlqs.max_report_bytes"),
            section.max_report_bytes,
            defaults.report_bytes,
        )?,
        domain_bytes: size(
            key!("rlqs.max_domain_bytes"),
            section.max_domain_bytes,
            defaults.domain_bytes,
        )?,
        label_name_bytes: size(
            key!("rlqs.max_label_name_bytes"),
            section.max_label_name_bytes,
            defaults.label_name_bytes,
        )?,
        label_value_bytes: size(
            key!("rlqs.max_label_value_bytes"),
            section.max_label_value_bytes,
            defaults.label_value_bytes,
        )?,
        tracked_bytes: bytes(
            key!("rlqs.max_tracked_bytes"),
            section.max_tracked_bytes,
            defaults.tracked_bytes,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::super::{Config, Overrides};
    use super::*;

    fn resolve(text: &str) -> Result<super::super::RlqsConfig, String> {
        Config::resolve(
            Some((Path::new("slidegate.toml"), text)),
            &Overrides::default(),
        )
        .map(|config| config.rlqs)
        .map_err(|error| error.to_string())
    }

    #[test]
    fn the_bounds_load_and_default_to_the_readmes_figures() {
        let defaults = RlqsBounds::default();
        assert_eq!(
            (
                defaults.report_bytes,
                defaults.domain_bytes,
                defaults.label_name_bytes,
                defaults.label_value_bytes,
                defaults.tracked_bytes
            ),
            (1_048_576, 256, 64, 512, 67_108_864)
        );
        let rlqs = resolve(
            "[rlqs]\nmax_report_bytes = 65536\nmax_domain_bytes = 32\nmax_label_name_bytes = 16\n\
             max_label_value_bytes = 128\nmax_tracked_bytes = 1048576",
        )
        .unwrap();
        assert_eq!(
            rlqs.bounds,
            RlqsBounds {
                report_bytes: 65_536,
                domain_bytes: 32,
                label_name_bytes: 16,
                label_value_bytes: 128,
                tracked_bytes: 1_048_576,
            }
        );
    }
}
