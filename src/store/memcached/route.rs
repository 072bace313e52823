//! Which node owns a key: rendezvous hashing on the key digest, so that all
//! counters of one key sit on one node and a batch is one round trip.
//!
//! The `memcache` crate's own router hashes with `DefaultHasher`, whose
//! algorithm Rust does not promise to keep; this one is fixed here (FNV-1a
//! and the SplitMix64 finaliser), so every process, of every release, sends
//! a key to the same node. When a node is added or removed, only the keys
//! it wins or loses move.

use crate::store::KeyDigest;

/// Rendezvous hashing over node names (`host:port`).
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

    /// The index of the server that owns wire key `key` among `servers`.
    pub fn pick(key: &[u8], servers: &[String]) -> usize {
        let node_hashes: Vec<u64> = servers.iter().map(|s| node_hash(s)).collect();
        pick_hashed(fnv1a(Self::routing_part(key)), &node_hashes)
    }

    /// The index of the node that owns `digest`, given each node's
    /// [`node_hash`]: the same answer as [`pick`](Self::pick) on any wire key
    /// of that digest, without formatting the key.
    pub fn pick_digest(digest: &KeyDigest, node_hashes: &[u64]) -> usize {
        pick_hashed(fnv1a(&digest.hex()), node_hashes)
    }
}

/// A node's part of every score, computed once per node list.
pub fn node_hash(node: &str) -> u64 {
    fnv1a(node.as_bytes())
}

fn pick_hashed(key_hash: u64, node_hashes: &[u64]) -> usize {
    let mut best = (0, 0u64);
    for (index, node) in node_hashes.iter().enumerate() {
        let score = splitmix64(key_hash ^ node);
        if index == 0 || score > best.1 {
            best = (index, score);
        }
    }
    best.0
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
    fn picking_by_digest_agrees_with_picking_by_wire_key() {
        let servers: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", 11211 + i)).collect();
        let hashes: Vec<u64> = servers.iter().map(|s| node_hash(s)).collect();
        for key in 0..500 {
            let digest = KeyDigest::of("api", &key.to_string());
            let wire = format!("sg:{digest}:1000.1:7");
            assert_eq!(
                DigestRendezvous::pick_digest(&digest, &hashes),
                DigestRendezvous::pick(wire.as_bytes(), &servers)
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
