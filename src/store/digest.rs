//! The name of a key's counters: a digest of (scope, key), and the last
//! one each thread computed, remembered for a hot key.

use std::fmt;

/// A 128-bit digest of (scope, key). Counters are named by it, never by the
/// key itself, so any user key, whatever its length or bytes, becomes a short
/// legal Memcached key, and nothing a client sends reaches the wire as text.
/// BLAKE3 rather than a fast non-cryptographic hash: a client must not be
/// able to craft a key that shares another client's counters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 16]);

/// The last key a thread digested, and its digest.
struct LastDigested {
    scope: String,
    key: String,
    digest: Option<KeyDigest>,
}

/// Keys longer than this are digested without being remembered, so what a
/// thread keeps stays small whatever a caller passes (a checked key is at
/// most 1024 bytes).
const REMEMBERED_KEY_MAX: usize = 1024;

/// What is hashed in one call from a buffer on the stack (one BLAKE3
/// chunk); longer input is streamed through a `Hasher`.
const ONE_SHOT_MAX: usize = 1024;
/// Input up to this long (most keys, with their scope) is hashed from a
/// buffer of this size.
const SHORT_MAX: usize = 128;

thread_local! {
    static LAST_DIGESTED: std::cell::RefCell<LastDigested> = const {
        std::cell::RefCell::new(LastDigested {
            scope: String::new(),
            key: String::new(),
            digest: None,
        })
    };
}

impl KeyDigest {
    /// The digest of `key` in `scope`. Each thread remembers the last key
    /// it digested: a hot key (a tenant's whole fleet behind one API key)
    /// is digested once per thread while it stays hot, where BLAKE3 was a
    /// large share of a hot key's instructions per check
    /// (`bench/instructions.sh` measures it). Another key costs a
    /// comparison and a copy more.
    pub fn of(scope: &str, key: &str) -> KeyDigest {
        if key.len() > REMEMBERED_KEY_MAX {
            return KeyDigest::digest(scope, key);
        }
        LAST_DIGESTED.with_borrow_mut(|last| match last.digest {
            Some(digest) if last.key == key && last.scope == scope => digest,
            _ => {
                let digest = KeyDigest::digest(scope, key);
                last.scope.clear();
                last.scope.push_str(scope);
                last.key.clear();
                last.key.push_str(key);
                last.digest = Some(digest);
                digest
            }
        })
    }

    fn digest(scope: &str, key: &str) -> KeyDigest {
        // The length prefix keeps ("ab", "c") and ("a", "bc") apart.
        let prefix = (scope.len() as u64).to_le_bytes();
        match prefix.len() + scope.len() + key.len() {
            // A buffer as long as the input needs: zeroing all 1,024 bytes
            // for a key of 20 was a tenth of what digesting it cost.
            ..=SHORT_MAX => KeyDigest::one_shot::<SHORT_MAX>(&prefix, scope, key),
            length if length <= ONE_SHOT_MAX => {
                KeyDigest::one_shot::<ONE_SHOT_MAX>(&prefix, scope, key)
            }
            _ => KeyDigest::streamed(&prefix, scope, key),
        }
    }

    /// The same bytes in one buffer and one call: a `Hasher` (its 1.9 KB of
    /// state set up, three updates) cost twice what hashing a short key
    /// does (`bench/instructions.sh`, distinct keys).
    fn one_shot<const N: usize>(prefix: &[u8], scope: &str, key: &str) -> KeyDigest {
        let (scope_at, key_at) = (prefix.len(), prefix.len() + scope.len());
        let length = key_at + key.len();
        let mut bytes = [0u8; N];
        bytes[..scope_at].copy_from_slice(prefix);
        bytes[scope_at..key_at].copy_from_slice(scope.as_bytes());
        bytes[key_at..length].copy_from_slice(key.as_bytes());
        KeyDigest::truncated(&blake3::hash(&bytes[..length]))
    }

    fn streamed(prefix: &[u8], scope: &str, key: &str) -> KeyDigest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(prefix);
        hasher.update(scope.as_bytes());
        hasher.update(key.as_bytes());
        KeyDigest::truncated(&hasher.finalize())
    }

    fn truncated(hash: &blake3::Hash) -> KeyDigest {
        let mut digest = [0u8; 16];
        digest.copy_from_slice(&hash.as_bytes()[..16]);
        KeyDigest(digest)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Its bytes as two little-endian words, for hashers that take a word
    /// at a time.
    pub fn words(&self) -> [u64; 2] {
        let word = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&self.0[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        [word(0), word(8)]
    }

    /// Lowercase hex, as [`Display`](fmt::Display) writes it, without
    /// formatting machinery or allocation: it is on every check's wire path.
    #[inline]
    pub fn hex(&self) -> [u8; 32] {
        // Two digits a byte from one table: a check writes its digest three
        // times (routing, and the key of each command), and digit by digit
        // it showed in a check's instruction profile.
        const PAIRS: [[u8; 2]; 256] = {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let mut pairs = [[0u8; 2]; 256];
            let mut byte = 0;
            while byte < 256 {
                pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0x0f]];
                byte += 1;
            }
            pairs
        };
        let mut hex = [0u8; 32];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0) {
            pair.copy_from_slice(&PAIRS[usize::from(byte)]);
        }
        hex
    }
}

impl fmt::Display for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hex digits are ASCII.
        f.write_str(std::str::from_utf8(&self.hex()).unwrap_or_default())
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_separate_scopes_and_keys() {
        assert_ne!(KeyDigest::of("ab", "c"), KeyDigest::of("a", "bc"));
        assert_ne!(KeyDigest::of("api", "k"), KeyDigest::of("inline", "k"));
        assert_eq!(KeyDigest::of("api", "k"), KeyDigest::of("api", "k"));
        assert_eq!(KeyDigest::of("api", "k").to_string().len(), 32);
    }

    /// What a thread remembers is the digest of exactly the key and scope
    /// asked: a remembered digest is never answered for another pair, one
    /// that shares a prefix, or the same bytes split differently.
    #[test]
    fn a_remembered_digest_answers_only_its_own_key_and_scope() {
        let long = "k".repeat(REMEMBERED_KEY_MAX + 1);
        // Each after the one before it, which is what the thread remembers.
        let pairs = [
            ("api", "client-42"),
            ("api", "client-42"),
            ("inline", "client-42"),
            ("inline", "client-4"),
            ("inlin", "eclient-4"),
            ("api", long.as_str()),
            ("api", long.as_str()),
            ("api", "client-42"),
        ];
        for (scope, key) in pairs {
            assert_eq!(
                KeyDigest::of(scope, key),
                KeyDigest::digest(scope, key),
                "{scope:?} {key:?}"
            );
        }
        assert_eq!(
            KeyDigest::of("api", "client-42").to_string(),
            "edce31df96748419b36acbefd989743c"
        );
    }

    /// The short buffer, the long one and the streamed path hash the same
    /// bytes, on either side of where each gives way to the next.
    #[test]
    fn short_and_long_input_digest_alike() {
        for scope in ["", "api", "a-policy-name-of-some-length"] {
            let edges = [SHORT_MAX, ONE_SHOT_MAX].map(|edge| edge - 48..edge + 16);
            for length in (0..40).chain(edges.into_iter().flatten()) {
                let key = "k".repeat(length);
                let prefix = (scope.len() as u64).to_le_bytes();
                assert_eq!(
                    KeyDigest::digest(scope, &key),
                    KeyDigest::streamed(&prefix, scope, &key),
                    "{scope:?}, a key of {length}"
                );
            }
        }
    }

    #[test]
    fn digest_is_stable_across_builds() {
        // Counters outlive deploys: a digest that changed with a release
        // would silently reset every count. Pinned to the value an independent
        // BLAKE3 (Python's `blake3` package) gives for the same bytes.
        assert_eq!(
            KeyDigest::of("api", "client-42").to_string(),
            "edce31df96748419b36acbefd989743c"
        );
    }
}
