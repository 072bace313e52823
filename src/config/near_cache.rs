//! The `[near_cache]` section: how many hot rejects this instance
//! remembers, in keys and in bytes, and how long it trusts one before
//! reading the store again. Restart only: the limiter is built with them.

use std::time::Duration;

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin, Overrides};
use crate::limiter::DEFAULT_NEAR_CACHE_CAPACITY;
use crate::near_cache::{DEFAULT_MAX_BYTES, DEFAULT_REVALIDATE};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NearCacheSection {
    capacity: Option<u64>,
    max_bytes: Option<u64>,
    revalidate_ms: Option<u64>,
}

/// What the section settles.
pub(super) struct NearCache {
    pub capacity: u64,
    pub max_bytes: u64,
    pub revalidate: Duration,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &NearCacheSection,
    overrides: &Overrides,
) -> Result<NearCache, ConfigError> {
    // Below 10 ms the near-cache saves hardly a read; above an hour, a
    // reset would wait that long (the bounds: the key's row).
    let revalidate_ms = origin
        .bounded(
            key!("near_cache.revalidate_ms"),
            overrides.near_cache_revalidate_ms,
            file.revalidate_ms,
        )?
        .map_or(DEFAULT_REVALIDATE, Duration::from_millis);
    Ok(NearCache {
        capacity: overrides
            .near_cache_capacity
            .or(file.capacity)
            .unwrap_or(DEFAULT_NEAR_CACHE_CAPACITY),
        max_bytes: file.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
        revalidate: revalidate_ms,
    })
}
