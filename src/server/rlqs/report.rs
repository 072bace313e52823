//! A usage report's buckets, checked before anything is counted: an
//! error is INVALID_ARGUMENT naming the field, as
//! `bucket_quota_usages[i].<field>`.

use std::collections::HashMap;

use tonic::Status;

use super::pb::envoy::service::rate_limit_quota::v3::BucketId;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::config::RlqsBounds;
use crate::policy::MAX_AMOUNT;

/// One bucket's usage, checked.
pub(super) struct Usage<'a> {
    pub bucket_id: &'a BucketId,
    pub allowed: u64,
    pub denied: u64,
    pub elapsed_s: f64,
}

impl Usage<'_> {
    pub(super) fn check<'a>(
        index: usize,
        usage: &'a BucketQuotaUsage,
        bounds: &RlqsBounds,
    ) -> Result<Usage<'a>, Status> {
        let field = |name: &str, message: &str| {
            Status::invalid_argument(format!("bucket_quota_usages[{index}].{name}: {message}"))
        };
        let bucket_id = usage
            .bucket_id
            .as_ref()
            .ok_or_else(|| field("bucket_id", "is required"))?;
        check_labels(&bucket_id.bucket, bounds)
            .map_err(|message| field("bucket_id.bucket", &message))?;
        // Present and zero is valid: Envoy's first report of a new bucket.
        let elapsed = usage
            .time_elapsed
            .as_ref()
            .ok_or_else(|| field("time_elapsed", "is required"))?;
        if elapsed.seconds < 0 || elapsed.nanos < 0 {
            return Err(field("time_elapsed", "must not be negative"));
        }
        let elapsed_s = elapsed.seconds as f64 + f64::from(elapsed.nanos) / 1e9;
        for (name, value) in [
            ("num_requests_allowed", usage.num_requests_allowed),
            ("num_requests_denied", usage.num_requests_denied),
        ] {
            if value > MAX_AMOUNT {
                return Err(field(name, &format!("must be at most {MAX_AMOUNT}")));
            }
        }
        Ok(Usage {
            bucket_id,
            allowed: usage.num_requests_allowed,
            denied: usage.num_requests_denied,
            elapsed_s,
        })
    }
}

/// The most labels a bucket id may hold; each label's name and value are
/// bounded in bytes (`rlqs.max_label_name_bytes`, `rlqs.max_label_value_bytes`):
/// a stream keeps the ids of the buckets it reports, so what one id may
/// weigh is bounded, as an HTTP key is. Envoy's ids are a few short labels
/// (a route's name, a tenant, a header's value).
pub(super) const MAX_LABELS: usize = 8;

fn check_labels(labels: &HashMap<String, String>, bounds: &RlqsBounds) -> Result<(), String> {
    if labels.is_empty() {
        return Err("must hold at least one label".to_owned());
    }
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "holds {} labels; at most {MAX_LABELS}",
            labels.len()
        ));
    }
    if labels
        .iter()
        .any(|(key, value)| key.is_empty() || value.is_empty())
    {
        return Err("labels and their values must not be empty".to_owned());
    }
    if let Some(name) = labels
        .keys()
        .find(|key| key.len() > bounds.label_name_bytes)
    {
        return Err(format!(
            "a label name of {} bytes, longer than rlqs.max_label_name_bytes ({})",
            name.len(),
            bounds.label_name_bytes
        ));
    }
    if let Some(value) = labels
        .values()
        .find(|value| value.len() > bounds.label_value_bytes)
    {
        return Err(format!(
            "a label value of {} bytes, longer than rlqs.max_label_value_bytes ({})",
            value.len(),
            bounds.label_value_bytes
        ));
    }
    Ok(())
}
