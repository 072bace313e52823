//! The whole configuration, assembled: the design's example, defaults,
//! layering of file, environment and flags, and messages naming fields.

use super::*;
use crate::limiter::DEFAULT_TIMEOUT;

// Where the Memcached nodes come from and how they are reached.
mod nodes;

const EXAMPLE: &str = r#"
listen = "127.0.0.1:9090"

[memcached]
servers = ["127.0.0.1:11211"]
timeout_ms = 50
namespace = "sg"

[near_cache]
capacity = 100000

[failure]
mode = "allow"

[policies.api]
limits = [{ limit = 10, window = "1s" },
      { limit = 3000, window = "10m", precision = 10 }]
"#;

fn resolve(text: &str, overrides: &Overrides) -> Result<Config, String> {
    Config::resolve(Some((Path::new("slidegate.toml"), text)), overrides).map_err(|e| e.to_string())
}

#[test]
fn the_design_example_loads() {
    let config = resolve(EXAMPLE, &Overrides::default()).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:9090");
    assert_eq!(config.servers, ["127.0.0.1:11211"]);
    assert_eq!(config.timeout, Duration::from_millis(50));
    assert_eq!(config.policies["api"].limits().len(), 2);
    assert_eq!(config.policies["api"].limits()[1].window().precision(), 10);
}

#[test]
fn defaults_need_no_file() {
    let config = Config::resolve(None, &Overrides::default()).unwrap();
    assert_eq!(config.listen, DEFAULT_LISTEN);
    assert_eq!(DEFAULT_LISTEN.to_string(), "127.0.0.1:8080");
    assert!(
        config.servers.is_empty(),
        "no memcached: the in-memory store"
    );
    assert_eq!(config.failure_mode, FailureMode::Allow);
    assert_eq!(config.timeout, DEFAULT_TIMEOUT);
}

#[test]
fn flags_and_environment_override_the_file() {
    let overrides = Overrides {
        listen: Some("127.0.0.1:7000".into()),
        memcached: Some(vec!["10.0.0.1:11211".into(), " 10.0.0.2:11211".into()]),
        namespace: Some("prod".into()),
        failure_mode: Some("deny".into()),
        timeout_ms: Some(20),
        near_cache_capacity: Some(0),
        ..Overrides::default()
    };
    let config = resolve(EXAMPLE, &overrides).unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:7000");
    assert_eq!(config.servers, ["10.0.0.1:11211", "10.0.0.2:11211"]);
    assert_eq!(config.namespace, "prod");
    assert_eq!(config.failure_mode, FailureMode::Deny);
    assert_eq!(config.timeout, Duration::from_millis(20));
    assert_eq!(config.near_cache_capacity, 0);
}

#[test]
fn bad_values_name_the_file_and_field() {
    let cases = [
        (
            "listen = \"nowhere\"",
            "slidegate.toml: listen: \"nowhere\" is not an IP address",
        ),
        ("[memcached]\nservrs = []", "unknown field `servrs`"),
        (
            "[memcached]\ntimeout_ms = 0",
            "slidegate.toml: memcached.timeout_ms: must be from 1",
        ),
        (
            "[memcached]\nnamespace = \"a b\"",
            "slidegate.toml: memcached.namespace:",
        ),
        (
            "[failure]\nmode = \"maybe\"",
            "slidegate.toml: failure.mode: \"maybe\" is not one of",
        ),
        (
            "[policies.api]\nlimits = [{ limit = 10, window = \"1s\", precision = 7 }]",
            "slidegate.toml: policies.api.limits[0].precision: 7 does not divide",
        ),
        (
            "[policies.api]\nlimits = [{ limit = 0, window = \"1s\" }]",
            "policies.api.limits[0].limit:",
        ),
        (
            "[policies.api]\nlimits = [{ limit = 1, window = \"1y\" }]",
            "policies.api.limits[0].window:",
        ),
        (
            "[policies.api]\nlimits = []",
            "slidegate.toml: policies.api.limits: must not be empty",
        ),
        (
            "[policies.inline]\nlimits = [{ limit = 1, window = \"1s\" }]",
            "policies.inline: the name `inline` is reserved",
        ),
        (
            "[auth]\ntrusted_proxies = [\"10.0.0.0/33\"]",
            "auth.trusted_proxies[0]:",
        ),
        (
            "[auth]\ndeny_status = 200",
            "auth.deny_status: must be a 4xx or 5xx",
        ),
        ("listen = ", "slidegate.toml: TOML parse error"),
        (
            "[log]\nformat = \"xml\"",
            "slidegate.toml: log.format: expected \"text\" or \"json\", got \"xml\"",
        ),
        (
            "[log]\nrefusals_per_s = 10001",
            "slidegate.toml: log.refusals_per_s: must be from 0 to 10000 refusals a second, got 10001",
        ),
    ];
    for (text, expected) in cases {
        let error = resolve(text, &Overrides::default()).unwrap_err();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
    let overrides = Overrides {
        failure_mode: Some("open".into()),
        ..Overrides::default()
    };
    let error = resolve("", &overrides).unwrap_err();
    assert!(
        error.starts_with("--failure-mode (or SLIDEGATE_FAILURE_MODE): "),
        "{error}"
    );
}

#[test]
fn coalescing_is_on_unless_the_file_the_environment_or_the_flag_turns_it_off() {
    let resolve = |file: &str, env: Option<&str>, flag: bool| {
        let overrides = Overrides {
            no_coalesce: flag,
            coalesce_env: env.map(str::to_owned),
            ..Overrides::default()
        };
        resolve(file, &overrides).map(|config| config.coalesce)
    };
    assert!(resolve("", None, false).unwrap());
    assert!(!resolve("[memcached]\ncoalesce = false\n", None, false).unwrap());
    assert!(!resolve("", Some("false"), false).unwrap());
    assert!(resolve("[memcached]\ncoalesce = false\n", Some("true"), false).unwrap());
    assert!(!resolve("", Some("true"), true).unwrap(), "the flag wins");
    let error = resolve("", Some("perhaps"), false).unwrap_err().to_string();
    assert!(error.contains("SLIDEGATE_COALESCE"), "{error}");
}

/// RLQS counts each bucket's fleet-wide demand in a policy of its own (a
/// 10 s window at precision 10: 11 counters). A `limits.max_counters`
/// below that would have every demand count refused, and each instance
/// share out quota as if its own clients were the whole fleet.
#[cfg(feature = "grpc")]
#[test]
fn rlqs_needs_max_counters_to_hold_its_demand() {
    let rlqs = "[rlqs]\nlisten = \"127.0.0.1:0\"\n";
    let error = resolve(
        &format!("[limits]\nmax_counters = 10\n{rlqs}"),
        &Overrides::default(),
    )
    .err()
    .unwrap_or_default();
    assert!(error.contains("limits.max_counters"), "{error}");
    assert!(error.contains("11"), "{error}");
    assert!(
        resolve(
            &format!("[limits]\nmax_counters = 11\n{rlqs}"),
            &Overrides::default()
        )
        .is_ok()
    );
    // Without RLQS, a low bound is the operator's to choose.
    assert!(resolve("[limits]\nmax_counters = 2\n", &Overrides::default()).is_ok());
}

/// The latency histograms reach the longest store timeout a file may set:
/// a check that waits out its whole timeout is counted in a finite bucket,
/// not only in `+Inf`, where every slow check would look alike.
#[test]
fn the_latency_buckets_reach_the_longest_store_timeout() {
    let longest = resolve("[memcached]\ntimeout_ms = 60000\n", &Overrides::default())
        .unwrap()
        .timeout;
    assert!(resolve("[memcached]\ntimeout_ms = 60001\n", &Overrides::default()).is_err());
    let last = crate::metrics::LATENCY_BUCKETS.last().copied().unwrap();
    assert!(
        last >= longest.as_secs_f64(),
        "the last finite bucket is {last} s, under a timeout of {longest:?}"
    );
}

/// `memcached.replicas` is 1 unless given; a flag (or its environment
/// twin) overrides the file; more copies than nodes is refused, naming the
/// field the value came from.
#[test]
fn replicas_are_one_by_default_and_no_more_than_the_nodes() {
    let two = "[memcached]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n";
    assert_eq!(resolve(two, &Overrides::default()).unwrap().replicas, 1);
    let file = format!("{two}replicas = 2\n");
    let config = resolve(&file, &Overrides::default()).unwrap();
    assert_eq!(config.replicas, 2);
    assert_eq!(config.memcached_options().unwrap().replicas, 2);
    let error = resolve(&format!("{two}replicas = 3\n"), &Overrides::default())
        .err()
        .unwrap_or_default();
    assert!(
        error.contains("memcached.replicas") && error.contains("servers given (2)"),
        "{error}"
    );
    // The same server twice is one server: it cannot hold two copies.
    let twice = "[memcached]\nservers = [\"127.0.0.1:1\", \"127.0.0.1:1\"]\nreplicas = 2\n";
    let error = resolve(twice, &Overrides::default())
        .err()
        .unwrap_or_default();
    assert!(error.contains("servers given (1)"), "{error}");
    let flag = Overrides {
        memcached_replicas: Some(3),
        ..Overrides::default()
    };
    let error = resolve(&file, &flag).err().unwrap_or_default();
    assert!(
        error.contains("--memcached-replicas (or SLIDEGATE_MEMCACHED_REPLICAS)"),
        "{error}"
    );
    let flag = Overrides {
        memcached_replicas: Some(1),
        ..Overrides::default()
    };
    assert_eq!(resolve(&file, &flag).unwrap().replicas, 1);
}

/// A window whose number does not fit says so, not that it has none.
#[test]
fn a_window_too_long_to_count_is_named_so() {
    let text = "[policies.api]\nlimits = [{ limit = 1, window = \"99999999999999999999d\" }]\n";
    let error = resolve(text, &Overrides::default())
        .err()
        .unwrap_or_default();
    assert!(error.contains("too long"), "{error}");
}

/// Each bounded setting the configuration reference gives a range for takes its ends and
/// refuses one past each, naming the key.
#[test]
fn every_ranged_setting_takes_its_ends_and_refuses_past_them() {
    let cases: &[(&str, &str, &[u64], &[u64])] = &[
        ("memcached", "connections", &[1, 64], &[0, 65]),
        ("memcached", "replicas", &[1, 3], &[0, 4]),
        (
            "near_cache",
            "revalidate_ms",
            &[10, 3_600_000],
            &[9, 3_600_001],
        ),
        ("rls", "max_descriptors", &[1, 100_000], &[0, 100_001]),
        ("reload", "watch_ms", &[0, 100, 3_600_000], &[99, 3_600_001]),
        ("memcached", "timeout_ms", &[1, 60_000], &[0, 60_001]),
    ];
    for (section, key, good, bad) in cases {
        let text = |value: u64| format!("[{section}]\n{key} = {value}\n");
        for value in *good {
            let resolved = resolve(&text(*value), &Overrides::default());
            assert!(
                resolved.is_ok(),
                "{section}.{key} = {value}: {:?}",
                resolved.err()
            );
        }
        for value in *bad {
            let error = resolve(&text(*value), &Overrides::default())
                .err()
                .unwrap_or_default();
            assert!(
                error.contains(&format!("{section}.{key}")),
                "{section}.{key} = {value}: {error}"
            );
        }
    }
}
