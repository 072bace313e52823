//! Where the Memcached nodes come from (a list or an ElastiCache endpoint,
//! layered as one setting) and how they are reached (their form, TLS, the
//! CA file).

use super::*;

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
