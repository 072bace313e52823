//! The whole configuration, assembled: the design's example, defaults,
//! layering of file, environment and flags, and messages naming fields.

use super::*;
use crate::limiter::DEFAULT_TIMEOUT;

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
fn every_flag_has_the_environment_twin_its_errors_name() {
    // Origin::layered derives `SLIDEGATE_X_Y` from `--x-y` for messages;
    // the twins clap actually reads must be those names.
    use clap::CommandFactory;
    let command = Overrides::command();
    let flags: Vec<_> = command
        .get_arguments()
        .filter(|arg| arg.get_long().is_some())
        .collect();
    assert_eq!(flags.len(), 16);
    for arg in flags {
        let long = arg.get_long().unwrap_or_default();
        if long == "no-coalesce" {
            // Its twin, SLIDEGATE_COALESCE, says the opposite and is read
            // by hand (memcached.rs); checked below.
            assert_eq!(arg.get_env(), None);
            continue;
        }
        let twin = format!("SLIDEGATE_{}", long.to_uppercase().replace('-', "_"));
        assert_eq!(
            arg.get_env().and_then(|env| env.to_str()),
            Some(twin.as_str()),
            "--{long}"
        );
    }
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

/// A server written without its port (or not as host:port at all) is a
/// start error naming it, not a node that never answers: with failure
/// mode `allow`, its share of the keys would be admitted unlimited, while
/// `/readyz` stays ready on the other nodes.
#[test]
fn memcached_servers_must_be_host_and_port() {
    for (servers, bad) in [
        (r#"["127.0.0.1"]"#, "memcached.servers[0]"),
        (r#"["10.0.0.1:11211", "10.0.0.2"]"#, "memcached.servers[1]"),
        (r#"["cache:0"]"#, "memcached.servers[0]"),
        (r#"["cache:eleven"]"#, "memcached.servers[0]"),
    ] {
        let error = resolve(
            &format!("[memcached]\nservers = {servers}\n"),
            &Overrides::default(),
        )
        .err()
        .unwrap_or_default();
        assert!(error.contains(bad), "{servers}: {error}");
    }
    let flag = Overrides {
        memcached: Some(vec!["127.0.0.1".to_owned()]),
        ..Overrides::default()
    };
    let error = resolve("", &flag).err().unwrap_or_default();
    assert!(error.contains("--memcached"), "{error}");
    assert!(
        resolve(
            "[memcached]\nservers = [\"127.0.0.1:11211\", \"cache.internal:11211\", \"[::1]:11211\"]\n",
            &Overrides::default()
        )
        .is_ok()
    );
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

/// Where the nodes come from is one setting, layered like the others: a
/// node list or endpoint given by a flag (or its environment twin)
/// replaces the file's, whichever of the two the file gave; both in one
/// layer is a start error naming both.
#[cfg(feature = "memcached")]
#[test]
fn the_node_source_is_layered_as_one_setting() {
    let flag_servers = Overrides {
        memcached: Some(vec!["127.0.0.1:11211".to_owned()]),
        ..Overrides::default()
    };
    let config = resolve(
        "[memcached]\ndiscovery = \"cfg.example:11211\"\n",
        &flag_servers,
    )
    .unwrap();
    assert_eq!(config.servers, ["127.0.0.1:11211"]);
    assert_eq!(config.cluster.discovery, None, "the flag's list wins");

    let flag_discovery = Overrides {
        memcached_discovery: Some("cfg.example:11211".to_owned()),
        ..Overrides::default()
    };
    let config = resolve(
        "[memcached]\nservers = [\"127.0.0.1:11211\"]\n",
        &flag_discovery,
    )
    .unwrap();
    assert!(config.servers.is_empty(), "the flag's endpoint wins");
    assert_eq!(
        config.cluster.discovery.as_deref(),
        Some("cfg.example:11211")
    );

    let both_in_file =
        "[memcached]\nservers = [\"127.0.0.1:11211\"]\ndiscovery = \"cfg.example:11211\"\n";
    let error = resolve(both_in_file, &Overrides::default())
        .err()
        .unwrap_or_default();
    assert!(
        error.contains("memcached.servers") && error.contains("memcached.discovery"),
        "{error}"
    );
    let both_flags = Overrides {
        memcached: Some(vec!["127.0.0.1:11211".to_owned()]),
        memcached_discovery: Some("cfg.example:11211".to_owned()),
        ..Overrides::default()
    };
    let error = resolve("", &both_flags).err().unwrap_or_default();
    assert!(
        error.contains("--memcached") && error.contains("--memcached-discovery"),
        "{error}"
    );
}

/// A node list given but empty (an unset variable in a template, say) is
/// not taken for "no Memcached": each instance would then count alone,
/// and admit the whole limit. Omitting it is how to count in memory.
#[test]
fn a_node_list_given_empty_is_a_start_error() {
    for empty in [
        vec![],
        vec![String::new()],
        vec![" ".to_owned(), String::new()],
    ] {
        let flag = Overrides {
            memcached: Some(empty.clone()),
            ..Overrides::default()
        };
        let error = resolve("", &flag).err().unwrap_or_default();
        assert!(
            error.contains("--memcached (or SLIDEGATE_MEMCACHED)"),
            "{empty:?}: {error}"
        );
    }
    let error = resolve("[memcached]\nservers = []\n", &Overrides::default())
        .err()
        .unwrap_or_default();
    assert!(error.contains("memcached.servers"), "{error}");
    assert!(
        resolve("", &Overrides::default())
            .unwrap()
            .servers
            .is_empty()
    );
}

/// An IPv6 node must be written in brackets: `::1` alone would be read as
/// host `:`, port 1, a node that never answers.
#[test]
fn an_ipv6_node_needs_its_brackets() {
    for bad in ["::1", "fe80::1", "::", "[::1]"] {
        let flag = Overrides {
            memcached: Some(vec![bad.to_owned()]),
            ..Overrides::default()
        };
        let error = resolve("", &flag).err().unwrap_or_default();
        assert!(error.contains("--memcached"), "{bad}: {error}");
    }
    #[cfg(feature = "memcached")]
    {
        let flag = Overrides {
            memcached: Some(vec!["[::1]:11211".to_owned()]),
            ..Overrides::default()
        };
        assert_eq!(resolve("", &flag).unwrap().servers, ["[::1]:11211"]);
    }
}

/// `SLIDEGATE_MEMCACHED_TLS=false` turns off the file's `tls = true`: the
/// environment wins over the file, whichever way.
#[cfg(all(feature = "memcached", feature = "tls"))]
#[test]
fn tls_from_the_environment_wins_over_the_file_either_way() {
    let file = "[memcached]\nservers = [\"127.0.0.1:11211\"]\ntls = true\n";
    let off = Overrides {
        memcached_tls: Some(false),
        ..Overrides::default()
    };
    assert_eq!(resolve(file, &off).unwrap().cluster.tls, None);
    assert!(
        resolve(file, &Overrides::default())
            .unwrap()
            .cluster
            .tls
            .is_some()
    );
    let on = Overrides {
        memcached_tls: Some(true),
        ..Overrides::default()
    };
    let plain = "[memcached]\nservers = [\"127.0.0.1:11211\"]\n";
    assert!(resolve(plain, &on).unwrap().cluster.tls.is_some());
}

/// A relative `memcached.tls_ca_file` is found beside the configuration
/// file, as `server.api_tokens_file` and `rls.config` are, wherever the
/// process was started.
#[cfg(all(feature = "memcached", feature = "tls"))]
#[test]
fn a_relative_ca_file_is_found_beside_the_configuration_file() {
    let dir = std::env::temp_dir().join(format!("slidegate-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), "read later, by the store").unwrap();
    let path = dir.join("slidegate.toml");
    let text = "[memcached]\nservers = [\"127.0.0.1:11211\"]\ntls_ca_file = \"ca.pem\"\n";
    let config = Config::resolve(Some((&path, text)), &Overrides::default());
    let _ = std::fs::remove_dir_all(&dir);
    let tls = config
        .unwrap_or_else(|error| panic!("{error}"))
        .cluster
        .tls
        .unwrap();
    assert_eq!(tls.ca_file, Some(dir.join("ca.pem")));
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

/// Each bounded setting the README gives a range for takes its ends and
/// refuses one past each, naming the key.
#[test]
fn every_ranged_setting_takes_its_ends_and_refuses_past_them() {
    let cases: &[(&str, &str, &[u64], &[u64])] = &[
        ("memcached", "connections", &[1, 64], &[0, 65]),
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
