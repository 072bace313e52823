//! Every open stream's latest demand per bucket, on this instance: the sum
//! a client's share is taken of when the shared demand counter lags (it
//! averages over a window) or cannot be read.

use std::collections::HashMap;
use std::sync::Mutex;

/// Demand (requests per second) by bucket key, then by stream.
#[derive(Debug, Default)]
pub struct Demands {
    by_bucket: Mutex<HashMap<String, Bucket>>,
}

/// What a bucket's entry weighs here beside its key, for one stream: its
/// slot in the map, and its map of streams at its smallest (four slots, a
/// stream id and a rate each, with their control bytes).
pub const ENTRY_BYTES: usize =
    size_of::<(String, Bucket)>() + 4 * (size_of::<(u64, f64)>() + 1) + 16;

#[derive(Debug)]
struct Bucket {
    /// When this instance first heard of the bucket.
    since_ms: u64,
    streams: HashMap<u64, f64>,
}

/// A bucket's demand on this instance, after one stream's update.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Local {
    /// Every stream's demand together, requests per second.
    pub total: f64,
    /// Streams reporting the bucket.
    pub streams: usize,
    /// How long this instance has known the bucket: the shared demand
    /// window holds at most that much of its history (as far as this
    /// instance can tell; others may have known it longer).
    pub known_ms: u64,
}

impl Demands {
    /// Record `stream`'s demand for `bucket`; the bucket's demand now.
    pub fn set(&self, bucket: &str, stream: u64, rate: f64, now_ms: u64) -> Local {
        let mut by_bucket = self.lock();
        let entry = by_bucket
            .entry(bucket.to_owned())
            .or_insert_with(|| Bucket {
                since_ms: now_ms,
                streams: HashMap::new(),
            });
        entry.streams.insert(stream, rate);
        Local {
            total: entry.streams.values().sum(),
            streams: entry.streams.len(),
            known_ms: now_ms.saturating_sub(entry.since_ms),
        }
    }

    /// `stream` no longer reports `bucket` (abandoned, or the stream ended).
    pub fn forget(&self, bucket: &str, stream: u64) {
        let mut by_bucket = self.lock();
        if let Some(entry) = by_bucket.get_mut(bucket) {
            entry.streams.remove(&stream);
            if entry.streams.is_empty() {
                by_bucket.remove(bucket);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        // The map holds plain numbers: a panic elsewhere cannot break it.
        self.by_bucket
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_sums_its_streams_until_they_are_forgotten() {
        let demands = Demands::default();
        let local = |total, streams, known_ms| Local {
            total,
            streams,
            known_ms,
        };
        demands.set("b", 1, 10.0, 1_000);
        assert_eq!(demands.set("b", 2, 5.0, 1_500), local(15.0, 2, 500));
        assert_eq!(demands.set("b", 2, 1.0, 2_000), local(11.0, 2, 1_000));
        demands.forget("b", 1);
        assert_eq!(demands.set("b", 2, 1.0, 3_000), local(1.0, 1, 2_000));
        demands.forget("b", 2);
        assert!(demands.lock().is_empty());
    }
}
