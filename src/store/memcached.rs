//! The Memcached store, on the meta protocol (memcached >= 1.6, every
//! supported ElastiCache engine).
//!
//! A batch goes out as one pipelined write: an `mg <key> v` per counter read
//! and an `ma <key> N<ttl> J<n> D<n> v` per addition, which creates a missing
//! counter holding `n` (auto-vivify) or adds `n` atomically, and answers the
//! value after. Every counter of one key lives on one server (routing is on
//! the key digest), so a batch is one round trip.
//!
//! Keys are `{namespace}:{digest}:{window_ms}.{precision}:{bucket}`: ASCII,
//! no spaces, at most 64 + 1 + 32 + 1 + 14 + 1 + 4 + 1 + 20 < 250 bytes.

use std::fmt::Write as _;
use std::time::Duration;

use memcache::exp::{Arithmetic, AsyncMetaClient, Error as WireError, Get, Op, OpResult, Router};

use super::{BatchCounts, CounterBatch, CounterKey, Store, StoreError, bucket_ttl_secs};
use crate::policy::{PLAIN_NAME_RULE, is_plain_name};

/// Memcached reads a TTL above 30 days as an absolute Unix time; a longer
/// relative TTL would be taken as a date in 1970 and expire at once.
const MAX_RELATIVE_TTL_SECS: u64 = 30 * 24 * 60 * 60;

/// How to reach Memcached.
#[derive(Clone, Debug)]
pub struct MemcachedOptions {
    /// `host:port` of each server.
    pub servers: Vec<String>,
    /// Prefix of every key, so several deployments can share a cluster.
    pub namespace: String,
    /// Bound on connecting and on each exchange. The limiter applies its own
    /// timeout around every call too; this one makes a stuck connection be
    /// dropped rather than returned to the pool.
    pub timeout: Duration,
    /// Connections kept open per server; concurrency beyond it waits (within
    /// the timeout) rather than opening connections without bound.
    pub max_connections: usize,
}

impl Default for MemcachedOptions {
    fn default() -> MemcachedOptions {
        MemcachedOptions {
            servers: vec!["127.0.0.1:11211".to_owned()],
            namespace: "sg".to_owned(),
            timeout: Duration::from_millis(50),
            max_connections: 64,
        }
    }
}

pub struct MemcachedStore {
    client: AsyncMetaClient,
    namespace: String,
}

impl MemcachedStore {
    /// Resolve the servers and set up the connection pools. Connections are
    /// opened on first use, so a server that is down now does not stop the
    /// start; [`ping`](Store::ping) tells whether it answers.
    pub async fn connect(options: &MemcachedOptions) -> Result<MemcachedStore, StoreError> {
        if !is_plain_name(&options.namespace) {
            return Err(StoreError::Protocol(format!(
                "namespace {:?} must be {PLAIN_NAME_RULE}",
                options.namespace
            )));
        }
        let client = AsyncMetaClient::builder()
            .router(DigestRendezvous)
            .connect_timeout(Some(options.timeout))
            .io_timeout(Some(options.timeout))
            .max_idle(options.max_connections)
            .max_connections(Some(options.max_connections))
            .connect_multiple_async(options.servers.iter().map(String::as_str))
            .await
            .map_err(|error| StoreError::Unreachable(error.to_string()))?;
        Ok(MemcachedStore {
            client,
            namespace: options.namespace.clone(),
        })
    }

    /// The Memcached key of a counter.
    pub fn wire_key(&self, counter: &CounterKey) -> String {
        self.wire_keys(std::slice::from_ref(counter))
            .pop()
            .unwrap_or_default()
    }

    /// The Memcached keys of `counters`, in order. A batch holds one key's
    /// counters, so the `namespace:digest:` prefix (32 hex digits) is
    /// formatted once and reused while the digest stays the same.
    fn wire_keys(&self, counters: &[CounterKey]) -> Vec<String> {
        let mut keys = Vec::with_capacity(counters.len());
        let mut prefix = String::new();
        let mut prefix_digest = None;
        for counter in counters {
            if prefix_digest != Some(counter.digest) {
                prefix.clear();
                // Writing to a String cannot fail.
                let _ = write!(prefix, "{}:{}:", self.namespace, counter.digest);
                prefix_digest = Some(counter.digest);
            }
            let mut key = String::with_capacity(prefix.len() + 48);
            key.push_str(&prefix);
            let _ = write!(
                key,
                "{}.{}:{}",
                counter.window.window_ms(),
                counter.window.precision(),
                counter.bucket
            );
            keys.push(key);
        }
        keys
    }
}

/// The TTL to send for a counter created at `now_ms`.
pub fn wire_ttl(ttl_secs: u64, now_ms: u64) -> u32 {
    let ttl = if ttl_secs > MAX_RELATIVE_TTL_SECS {
        now_ms / 1000 + ttl_secs
    } else {
        ttl_secs
    };
    // Windows are at most a year, so this only saturates after 2105.
    u32::try_from(ttl).unwrap_or(u32::MAX)
}

impl Store for MemcachedStore {
    async fn read_and_add(&self, batch: &CounterBatch) -> Result<BatchCounts, StoreError> {
        let reads = self
            .wire_keys(&batch.reads)
            .into_iter()
            .map(|key| Op::from(Get::new(key)));
        let adds = batch
            .adds
            .iter()
            .zip(self.wire_keys(&batch.adds))
            .map(|(counter, key)| {
                let ttl = wire_ttl(bucket_ttl_secs(counter.window), batch.now_ms);
                Op::from(
                    Arithmetic::new(key)
                        .delta(batch.amount)
                        .initial(batch.amount, ttl),
                )
            });
        let results = self
            .client
            .run_batch(reads.chain(adds))
            .await
            .map_err(from_wire)?;
        let mut counts = BatchCounts {
            read: Vec::with_capacity(batch.reads.len()),
            added: Vec::with_capacity(batch.adds.len()),
        };
        for result in results {
            match result.map_err(from_wire)? {
                OpResult::Get(get) if get.hit() => {
                    counts.read.push(parse_counter(get.value.as_deref())?)
                }
                OpResult::Get(_) => counts.read.push(0),
                OpResult::Arithmetic(sum) => counts.added.push(
                    sum.value
                        .filter(|_| sum.applied())
                        .ok_or_else(|| unexpected("an addition was not applied"))?,
                ),
                _ => return Err(unexpected("an answer of the wrong kind")),
            }
        }
        if counts.read.len() != batch.reads.len() || counts.added.len() != batch.adds.len() {
            return Err(unexpected("answers missing from a batch"));
        }
        Ok(counts)
    }

    async fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        _now_ms: u64,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let operations = self
            .wire_keys(counters)
            .into_iter()
            .map(|key| Arithmetic::new(key).decrement().delta(amount));
        let results = self.client.run_many(operations).await.map_err(from_wire)?;
        results
            .into_iter()
            .map(|result| {
                let result = result.map_err(from_wire)?;
                Ok(result.value.filter(|_| result.applied()))
            })
            .collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.client.noop().await.map_err(from_wire)
    }

    fn kind(&self) -> &'static str {
        "memcached"
    }
}

fn parse_counter(value: Option<&[u8]>) -> Result<u64, StoreError> {
    value
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .and_then(|text| text.trim().parse().ok())
        .ok_or_else(|| {
            unexpected(
                "a counter that is not a number (is another program writing under this namespace?)",
            )
        })
}

fn unexpected(what: &str) -> StoreError {
    StoreError::Protocol(what.to_owned())
}

fn from_wire(error: WireError) -> StoreError {
    match error {
        WireError::Ambiguous { .. } => StoreError::Ambiguous(error.to_string()),
        WireError::Timeout { .. } => StoreError::Unreachable(error.to_string()),
        WireError::Io(_) => StoreError::Unreachable(error.to_string()),
        other => StoreError::Protocol(other.to_string()),
    }
}

/// Rendezvous hashing on the key digest, so that all counters of one key sit
/// on one server and a batch is one round trip. The crate's own router
/// hashes with `DefaultHasher`, whose algorithm Rust does not promise to
/// keep; this one is fixed here (FNV-1a and the SplitMix64 finaliser), so
/// every process, of every release, sends a key to the same server.
#[derive(Clone, Copy, Debug, Default)]
pub struct DigestRendezvous;

impl DigestRendezvous {
    /// The digest field of a wire key (`namespace:digest:...`); the whole key
    /// for anything else, which then still routes stably.
    fn routing_part(key: &[u8]) -> &[u8] {
        let mut fields = key.splitn(3, |&byte| byte == b':');
        match (fields.next(), fields.next()) {
            (Some(_), Some(digest)) => digest,
            _ => key,
        }
    }

    /// The index of the server that owns `key` among `servers`.
    pub fn pick(key: &[u8], servers: &[String]) -> usize {
        let key_hash = fnv1a(Self::routing_part(key));
        let mut best = (0, 0u64);
        for (index, server) in servers.iter().enumerate() {
            let score = splitmix64(key_hash ^ fnv1a(server.as_bytes()));
            if index == 0 || score > best.1 {
                best = (index, score);
            }
        }
        best.0
    }
}

impl Router for DigestRendezvous {
    fn route(&self, key: &[u8], servers: &[String]) -> usize {
        DigestRendezvous::pick(key, servers)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn splitmix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_over_thirty_days_become_absolute_times() {
        let now_ms = 1_800_000_000_000;
        assert_eq!(wire_ttl(122, now_ms), 122);
        assert_eq!(wire_ttl(MAX_RELATIVE_TTL_SECS, now_ms), 2_592_000);
        assert_eq!(
            wire_ttl(MAX_RELATIVE_TTL_SECS + 1, now_ms),
            1_800_000_000 + 2_592_001
        );
    }

    #[test]
    fn routing_uses_only_the_digest() {
        let servers: Vec<String> = (0..5).map(|i| format!("10.0.0.{i}:11211")).collect();
        let digest = "0123456789abcdef0123456789abcdef";
        let owner = DigestRendezvous::pick(format!("sg:{digest}:1000.1:1").as_bytes(), &servers);
        for other in ["sg:{d}:1000.1:2", "sg:{d}:60000.10:999", "other:{d}:5.1:0"] {
            let key = other.replace("{d}", digest);
            assert_eq!(
                DigestRendezvous::pick(key.as_bytes(), &servers),
                owner,
                "{key}"
            );
        }
    }

    #[test]
    fn routing_is_pinned_and_balanced() {
        // Pinned: a change here moves every key to another server, which
        // resets its counts. Do not change these numbers.
        let servers: Vec<String> = (0..4).map(|i| format!("10.0.0.{i}:11211")).collect();
        let picks: Vec<usize> = ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .map(|digest| DigestRendezvous::pick(format!("sg:{digest}:1.1:1").as_bytes(), &servers))
            .collect();
        assert_eq!(picks, PINNED_PICKS);

        let mut load = [0usize; 4];
        for key in 0..4000 {
            load[DigestRendezvous::pick(format!("sg:{key:032x}:1.1:1").as_bytes(), &servers)] += 1;
        }
        assert!(load.iter().all(|&n| n > 850), "unbalanced: {load:?}");
    }

    // Computed independently (a Python FNV-1a + SplitMix64), not by this code.
    const PINNED_PICKS: [usize; 8] = [1, 3, 0, 3, 2, 2, 2, 0];

    #[test]
    fn removing_a_server_moves_only_its_keys() {
        let four: Vec<String> = (0..4).map(|i| format!("10.0.0.{i}:11211")).collect();
        let three: Vec<String> = four
            .iter()
            .filter(|s| !s.starts_with("10.0.0.2"))
            .cloned()
            .collect();
        for key in 0..2000 {
            let key = format!("sg:{key:032x}:1.1:1");
            let before = &four[DigestRendezvous::pick(key.as_bytes(), &four)];
            let after = &three[DigestRendezvous::pick(key.as_bytes(), &three)];
            if !before.starts_with("10.0.0.2") {
                assert_eq!(before, after);
            }
        }
    }
}
