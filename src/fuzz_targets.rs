//! Fuzz targets: each takes arbitrary bytes, and panics only on a bug.
//! Shared by the stable harness (`src/fuzz.rs`, proptest, part of `cargo
//! test`) and by cargo-fuzz (`fuzz/`, libFuzzer on a nightly toolchain).
//! Not an API: public only so that the `fuzz/` crate can call them.

use std::path::Path;
use std::sync::OnceLock;

use crate::config::{Config, Overrides};
use crate::policy::{Limit, Policy, Window, parse_duration_ms};
use crate::server::api::{NamedPolicies, Served, flat_reading_agrees, parse_call};
use crate::store::memcached::wire;
use crate::store::{CounterKey, KeyDigest};

/// The body of check, peek and report: accepted, or refused with a
/// message that names a field; read flat only as serde would read it.
pub fn request_body(body: &[u8]) {
    static POLICIES: OnceLock<NamedPolicies> = OnceLock::new();
    let policies = POLICIES.get_or_init(|| {
        let limit = Limit::new(10, 1_000, 1).expect("a valid limit");
        let policy = Policy::new("api", vec![limit]).expect("a valid policy");
        [("api".to_owned(), Served::new(policy))]
            .into_iter()
            .collect()
    });
    assert!(
        flat_reading_agrees(body),
        "read flat otherwise than serde reads it"
    );
    match parse_call(body, policies, crate::policy::DEFAULT_MAX_COUNTERS) {
        Ok(call) => assert!(call.cost == 1 || body.windows(4).any(|w| w == b"cost")),
        Err(message) => assert!(message.contains(": "), "{message}"),
    }
}

/// A window length: only a number and a unit is ever accepted.
pub fn duration(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(ms) = parse_duration_ms(&text) {
        assert!(
            text.starts_with(|c: char| c.is_ascii_digit()),
            "{text:?} -> {ms}"
        );
        assert!(text.ends_with(['s', 'm', 'h', 'd']), "{text:?} -> {ms}");
    }
}

/// The configuration loader: accepts or refuses with a message.
pub fn config(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Err(error) =
        Config::resolve(Some((Path::new("fuzz.toml"), &text)), &Overrides::default())
    {
        assert!(!error.to_string().is_empty());
    }
}

/// Any key, namespace, window and bucket map to a legal Memcached key.
pub fn wire_key(key: &[u8], namespace: &str, window_ms: u64, precision: u32, bucket: u64) {
    let key = String::from_utf8_lossy(key);
    let Ok(window) = Window::new(window_ms, precision) else {
        return;
    };
    let counter = CounterKey {
        digest: KeyDigest::of("api", &key),
        window,
        bucket,
    };
    let wire = wire::key_string(namespace, &counter);
    assert!(wire.len() <= 250, "{wire}");
    assert!(wire.bytes().all(|b| b.is_ascii_graphic()), "{wire:?}");
    assert!(wire.starts_with(namespace) && wire[namespace.len()..].starts_with(':'));
}

/// [`wire_key`] from raw bytes: a bucket, a window, a precision, a
/// namespace drawn from its legal alphabet, then the key.
pub fn wire_key_bytes(bytes: &[u8]) {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.";
    let mut at = 0;
    let mut take = |n: usize| {
        let end = (at + n).min(bytes.len());
        let mut word = [0u8; 8];
        word[..end - at].copy_from_slice(&bytes[at..end]);
        at = end;
        u64::from_le_bytes(word)
    };
    let bucket = take(8);
    let window_ms = take(8) % (crate::policy::MAX_WINDOW_MS + 1);
    let precision = (take(2) % u64::from(crate::policy::MAX_PRECISION + 1)) as u32;
    let length = (take(1) % 64) as usize + 1;
    let namespace: String = (0..length)
        .map(|index| {
            let byte = bytes.get(at + index).copied().unwrap_or(index as u8);
            char::from(ALPHABET[usize::from(byte) % ALPHABET.len()])
        })
        .collect();
    let key = bytes
        .get((at + length).min(bytes.len())..)
        .unwrap_or_default();
    wire_key(key, &namespace, window_ms, precision, bucket);
}

/// A stream of Memcached replies: parsed one by one, each taking some
/// bytes and never more than there are, or refused as out of step.
pub fn memcached_reply(stream: &[u8]) {
    let mut offset = 0;
    assert!(wire::readings_agree(stream));
    while let Ok(Some(parsed)) = wire::parse(&stream[offset..]) {
        assert!(parsed.len > 0 && offset + parsed.len <= stream.len());
        offset += parsed.len;
    }
}
