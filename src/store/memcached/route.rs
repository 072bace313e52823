//! Which node owns a key: rendezvous hashing on the key digest, so that all
//! counters of one key sit on one node and a batch is one round trip.
//!
//! The `memcache` crate's own router hashes with `DefaultHasher`, whose
//! algorithm Rust does not promise to keep; this one is fixed here (FNV-1a
//! and the SplitMix64 finaliser), so every process, of every release, sends
//! a key to the same node. When a node is added or removed, only the keys
//! it wins or loses move.
//!
//! With replicas, a key's counters live on the nodes of its highest scores,
//! in score order: the first is the node it has without replicas, so
//! turning replicas on keeps every count where it was.

use smallvec::SmallVec;

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

    /// The indices of the `n` nodes (at most as many as there are) with the
    /// highest scores for `digest`, highest first: its replicas. The first
    /// is [`pick_digest`](Self::pick_digest)'s.
    pub fn replicas_of_digest(digest: &KeyDigest, node_hashes: &[u64], n: usize) -> Replicas {
        let key_hash = fnv1a(&digest.hex());
        let mut best: SmallVec<[(usize, u64); MAX_REPLICAS]> = SmallVec::new();
        for (index, node) in node_hashes.iter().enumerate() {
            let score = splitmix64(key_hash ^ node);
            // Ties keep the lower index first, as `pick_hashed` does.
            let at = best
                .iter()
                .position(|&(_, known)| score > known)
                .unwrap_or(best.len());
            if at < n.min(MAX_REPLICAS) {
                best.insert(at, (index, score));
                best.truncate(n.min(MAX_REPLICAS));
            }
        }
        best.into_iter().map(|(index, _)| index).collect()
    }
}

/// The most replicas a counter may have.
pub const MAX_REPLICAS: usize = 3;

/// A key's replicas, as indices into the node list, highest score first.
pub type Replicas = SmallVec<[usize; MAX_REPLICAS]>;

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
    fn replicas_are_the_highest_scores_and_start_with_the_owner() {
        let servers: Vec<String> = (0..5).map(|i| format!("10.0.0.{i}:11211")).collect();
        let hashes: Vec<u64> = servers.iter().map(|s| node_hash(s)).collect();
        let mut firsts_of_second = [0usize; 5];
        for key in 0..500 {
            let digest = KeyDigest::of("api", &key.to_string());
            let owner = DigestRendezvous::pick_digest(&digest, &hashes);
            for n in 1..=MAX_REPLICAS {
                let replicas = DigestRendezvous::replicas_of_digest(&digest, &hashes, n);
                assert_eq!(replicas.len(), n);
                assert_eq!(replicas[0], owner);
                let mut distinct = replicas.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), n, "{replicas:?}");
                // One more replica keeps the ones before it.
                if n > 1 {
                    let fewer = DigestRendezvous::replicas_of_digest(&digest, &hashes, n - 1);
                    assert_eq!(&replicas[..n - 1], &fewer[..]);
                }
            }
            let two = DigestRendezvous::replicas_of_digest(&digest, &hashes, 2);
            firsts_of_second[two[1]] += 1;
        }
        // The second replica is spread too, not always one node.
        assert!(
            firsts_of_second.iter().all(|&n| n > 50),
            "{firsts_of_second:?}"
        );
        let two_nodes = &hashes[..2];
        let digest = KeyDigest::of("api", "k");
        assert_eq!(
            DigestRendezvous::replicas_of_digest(&digest, two_nodes, 3).len(),
            2
        );
    }

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
