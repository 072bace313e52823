//! The near-cache's hasher: its keys are BLAKE3 digests already.

use std::hash::{BuildHasher, Hasher};

/// The near-cache's hasher. A [`NearKey`] is a BLAKE3 digest already, so
/// SipHash over it again is wasted work on every check; a fold of its words
/// through a mixer is enough. The fold starts from a per-process random seed:
/// anyone can compute digests, and without the seed they cannot choose keys
/// that pile into one bucket of the table.
#[derive(Clone)]
pub(super) struct SeededFold {
    seed: u64,
}

impl SeededFold {
    pub(super) fn new() -> SeededFold {
        SeededFold {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
        }
    }
}

impl BuildHasher for SeededFold {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher { state: self.seed }
    }
}

pub(super) struct FoldHasher {
    state: u64,
}

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        // SplitMix64's finalizer: every input bit moves every output bit.
        let mut z = (self.state ^ word).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.state = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}
