//! The stable fuzz harness over the targets of [`crate::fuzz_targets`]:
//! the request body parser, the duration parser, the config loader, the
//! key-to-wire-key mapping and the Memcached reply parser.
//!
//! A stable harness (proptest over arbitrary bytes, and over mutations of
//! valid inputs, which reach far deeper than random bytes into a JSON or
//! TOML parser), so it runs wherever `cargo test` does. A short run of each
//! target is part of `cargo test`; a long one:
//!
//! ```sh
//! SLIDEGATE_FUZZ_SECS=600 cargo test --release --lib fuzz:: -- --nocapture --test-threads 5
//! ```
//!
//! Each target then prints how many cases it ran in how long. A failure is
//! shrunk by proptest to a small input and printed.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};

use crate::fuzz_targets as targets;

/// Cases per target in a plain `cargo test`.
const SHORT_CASES: u32 = 2_000;
/// Cases per runner in a long run; each runner draws a fresh seed.
const CHUNK_CASES: u32 = 20_000;

/// Run `check` over `inputs` until `SLIDEGATE_FUZZ_SECS` have passed (or
/// `SLIDEGATE_FUZZ_CASES` cases, or a short run when neither is set).
fn fuzz<S: Strategy>(name: &str, inputs: S, check: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let seconds = env_number("SLIDEGATE_FUZZ_SECS");
    let total_cases = env_number("SLIDEGATE_FUZZ_CASES").unwrap_or(u64::from(SHORT_CASES));
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let started = Instant::now();
    let mut ran = 0u64;
    loop {
        let cases = match deadline {
            Some(_) => CHUNK_CASES,
            None => u32::try_from(total_cases - ran)
                .unwrap_or(CHUNK_CASES)
                .min(CHUNK_CASES),
        };
        if cases == 0 {
            break;
        }
        let mut runner = TestRunner::new(RunnerConfig {
            cases,
            failure_persistence: None,
            // Rejections are not used; shrinking a failure should be quick.
            max_shrink_iters: 10_000,
            ..RunnerConfig::default()
        });
        if let Err(failure) = runner.run(&inputs, &check) {
            panic!("fuzz {name}: failed after {ran} cases: {failure}");
        }
        ran += u64::from(cases);
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            break;
        }
    }
    println!(
        "fuzz {name}: {ran} cases in {:.1} s, no failure",
        started.elapsed().as_secs_f64()
    );
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Arbitrary bytes, or a valid input with a few bytes replaced, inserted
/// or removed.
fn bytes_near(seeds: &'static [&'static str]) -> impl Strategy<Value = Vec<u8>> {
    let edits = prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 0..8);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        (prop::sample::select(seeds), edits).prop_map(|(seed, edits)| {
            let mut bytes = seed.as_bytes().to_vec();
            for (at, byte, kind) in edits {
                let at = at % (bytes.len() + 1);
                match kind {
                    0 if at < bytes.len() => bytes[at] = byte,
                    1 => bytes.insert(at, byte),
                    _ if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    _ => bytes.push(byte),
                }
            }
            bytes
        }),
    ]
}

const BODIES: &[&str] = &[
    r#"{"key": "client-42", "policy": "api", "cost": 1}"#,
    r#"{"key": "client-42", "cost": 1, "limits": [{"limit": 10, "window": "1s"}, {"limit": 3000, "window": "10m", "precision": 10}]}"#,
    r#"{"key": "k\u0000\n", "limits": [{"limit": 1, "window_ms": 250}]}"#,
    r#"{"key": "k", "limits": [{"limit": 18446744073709551615, "window": "365d", "precision": 1000}]}"#,
    r#"{"key": "", "policy": "nope", "cost": 0}"#,
];

#[test]
fn fuzz_request_body() {
    fuzz("request_body", bytes_near(BODIES), |body| {
        targets::request_body(&body);
        Ok(())
    });
}

const DURATIONS: &[&str] = &[
    "250ms",
    "1s",
    "10m",
    "1h",
    "1d",
    "365d",
    "18446744073709551615ms",
];

#[test]
fn fuzz_duration() {
    fuzz("duration", bytes_near(DURATIONS), |bytes| {
        targets::duration(&bytes);
        Ok(())
    });
}

const CONFIGS: &[&str] = &[
    "listen = \"127.0.0.1:9090\"\n[memcached]\nservers = [\"127.0.0.1:11211\"]\ntimeout_ms = 50\nnamespace = \"sg\"\n[near_cache]\ncapacity = 100000\n[failure]\nmode = \"allow\"\n",
    "[policies.api]\nlimits = [{ limit = 10, window = \"1s\" }, { limit = 3000, window = \"10m\", precision = 10 }]\n",
    "[auth]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\ndeny_status = 403\n",
    "[memory]\ncapacity = 1000\n[server]\nmax_connections = 10\napi_tokens = [\"t0123456789abcdef\"]\nmetrics_need_token = true\n[clock]\nsource = \"memcached\"\n",
];

#[test]
fn fuzz_config() {
    fuzz("config", bytes_near(CONFIGS), |bytes| {
        targets::config(&bytes);
        Ok(())
    });
}

#[test]
fn fuzz_wire_key() {
    let inputs = (
        bytes_near(&["client-42", "a b\r\nc", "ключ", ""]),
        "[A-Za-z0-9_.-]{1,64}",
        1u64..=crate::policy::MAX_WINDOW_MS,
        1u32..=crate::policy::MAX_PRECISION,
        any::<u64>(),
    );
    fuzz(
        "wire_key",
        inputs,
        |(key, namespace, window_ms, precision, bucket)| {
            targets::wire_key(&key, &namespace, window_ms, precision, bucket);
            Ok(())
        },
    );
}

const REPLIES: &[&str] = &[
    "VA 2 O7\r\n15\r\nEN O8\r\nNF O9\r\nMN\r\nVA 3 O10\r\n0  \r\n",
    "SERVER_ERROR out of memory\r\nEN O3\r\nHD t59 O4\r\n",
    "CLIENT_ERROR bad command line format\r\nNS O4\r\nEX O5\r\nHD O6\r\n",
];

#[test]
fn fuzz_memcached_reply() {
    fuzz("memcached_reply", bytes_near(REPLIES), |stream| {
        targets::memcached_reply(&stream);
        Ok(())
    });
}
