//! A descriptor as the limiter sees it: its entries, checked, and the key
//! its counters are named by.

use tonic::Status;

use super::super::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

/// A descriptor's entries, checked: at least one, each with a key.
pub(super) fn entries(
    index: usize,
    descriptor: &RateLimitDescriptor,
) -> Result<Vec<(&str, &str)>, Status> {
    if descriptor.entries.is_empty() {
        return Err(Status::invalid_argument(format!(
            "descriptors[{index}].entries: must not be empty"
        )));
    }
    descriptor
        .entries
        .iter()
        .enumerate()
        .map(|(entry_index, entry)| {
            if entry.key.is_empty() {
                Err(Status::invalid_argument(format!(
                    "descriptors[{index}].entries[{entry_index}].key: must not be empty"
                )))
            } else {
                Ok((entry.key.as_str(), entry.value.as_str()))
            }
        })
        .collect()
}

/// The limiter key of a descriptor: each distinct (domain, entries) has its
/// own counters. Values of a `share_threshold` wildcard are replaced by the
/// pattern, so they share one. Hashed, so that descriptors of any length
/// make a key of fixed length.
pub(super) fn counter_key(
    domain: &str,
    entries: &[(&str, &str)],
    shared: &[Option<&str>],
) -> String {
    let mut hasher = blake3::Hasher::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(domain.as_bytes());
    for (index, (key, value)) in entries.iter().enumerate() {
        field(key.as_bytes());
        match shared.get(index).copied().flatten() {
            Some(pattern) => {
                field(b"*");
                field(pattern.as_bytes());
            }
            None => field(value.as_bytes()),
        }
    }
    hasher.finalize().to_hex()[..32].to_owned()
}
