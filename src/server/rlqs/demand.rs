//! Every open stream's latest demand per bucket, on this instance: the sum
//! a client's share is taken of when the shared demand counter lags (it
//! averages over a window) or cannot be read.

use std::collections::HashMap;
use std::sync::Mutex;

/// Demand (requests per second) by bucket key, then by stream.
#[derive(Debug, Default)]
pub struct Demands {
    by_bucket: Mutex<HashMap<String, HashMap<u64, f64>>>,
}

/// A bucket's demand on this instance, after one stream's update.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Local {
    /// Every stream's demand together, requests per second.
    pub total: f64,
    /// Streams reporting the bucket.
    pub streams: usize,
}

impl Demands {
    /// Record `stream`'s demand for `bucket`; the bucket's demand now.
    pub fn set(&self, bucket: &str, stream: u64, rate: f64) -> Local {
        let mut by_bucket = self.lock();
        let streams = by_bucket.entry(bucket.to_owned()).or_default();
        streams.insert(stream, rate);
        Local {
            total: streams.values().sum(),
            streams: streams.len(),
        }
    }

    /// `stream` no longer reports `bucket` (abandoned, or the stream ended).
    pub fn forget(&self, bucket: &str, stream: u64) {
        let mut by_bucket = self.lock();
        if let Some(streams) = by_bucket.get_mut(bucket) {
            streams.remove(&stream);
            if streams.is_empty() {
                by_bucket.remove(bucket);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, f64>>> {
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
        demands.set("b", 1, 10.0);
        assert_eq!(
            demands.set("b", 2, 5.0),
            Local {
                total: 15.0,
                streams: 2
            }
        );
        assert_eq!(
            demands.set("b", 2, 1.0),
            Local {
                total: 11.0,
                streams: 2
            }
        );
        demands.forget("b", 1);
        assert_eq!(
            demands.set("b", 2, 1.0),
            Local {
                total: 1.0,
                streams: 1
            }
        );
        demands.forget("b", 2);
        assert!(demands.lock().is_empty());
    }
}
