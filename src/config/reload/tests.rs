use std::collections::BTreeSet;
use std::path::Path;

use super::keys::file_keys;
use super::*;

#[test]
fn every_key_of_the_file_is_either_live_or_restart_only() {
    let keys = file_keys();
    assert!(keys.contains("server.api_tokens"), "{keys:?}");
    let live: BTreeSet<String> = APPLIED_LIVE.iter().map(|k| (*k).to_owned()).collect();
    let restart: BTreeSet<String> = RESTART_ONLY.iter().map(|k| (*k).to_owned()).collect();
    let both: Vec<_> = live.intersection(&restart).collect();
    assert!(both.is_empty(), "in both lists: {both:?}");
    let unclassified: Vec<_> = keys
        .iter()
        .filter(|key| !live.contains(*key) && !restart.contains(*key))
        .collect();
    assert!(
        unclassified.is_empty(),
        "keys a reload would ignore silently: put each in APPLIED_LIVE (and apply it in \
         server::reload) or in RESTART_ONLY (and compare it in restart_only_changes): \
         {unclassified:?}"
    );
    let stale: Vec<_> = live
        .union(&restart)
        .filter(|k| !keys.contains(*k))
        .collect();
    assert!(stale.is_empty(), "not keys of the file: {stale:?}");
}

fn load(dir: &Path, text: &str) -> Config {
    Config::resolve(
        Some((&dir.join("slidegate.toml"), text)),
        &Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"))
}

fn test_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "slidegate-reload-keys-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), "not read by the config").unwrap();
    std::fs::write(dir.join("tokens"), "tokens-file-0123456789\n").unwrap();
    dir
}

/// A file that differs from the defaults in every restart-only key
/// (`{ca}` stands for a CA file that exists) but `memcached.discovery`,
/// which a file gives instead of `memcached.servers`, never with it.
#[cfg(all(feature = "memcached", feature = "tls", feature = "grpc"))]
const EVERY_RESTART_KEY_CHANGED: &str = r#"
listen = "127.0.0.1:9999"
[memcached]
servers = ["127.0.0.1:1", "127.0.0.1:3"]
timeout_ms = 51
namespace = "other"
connections = 3
replicas = 2
coalesce = false
discovery_interval_ms = 5000
tls = true
tls_ca_file = "{ca}"
tls_server_name = "cache.example"
[near_cache]
capacity = 7
max_bytes = 1000000
revalidate_ms = 250
[failure]
mode = "deny"
[rls]
listen = "127.0.0.1:9998"
config = "rules.yaml"
max_descriptors = 8
[rlqs]
listen = "127.0.0.1:9997"
[memory]
capacity = 5
[clock]
source = "memcached"
[server]
shutdown_delay_ms = 5000
drain_timeout_ms = 2000
[log]
format = "json"
"#;

// Memcached, TLS and RLS keys load only in a build that has them.
#[cfg(all(feature = "memcached", feature = "tls", feature = "grpc"))]
#[test]
fn a_file_changing_every_restart_only_key_names_each_and_only_those() {
    let dir = test_dir();
    let running = load(&dir, "");
    let ca = dir.join("ca.pem").display().to_string();
    let changed = load(&dir, &EVERY_RESTART_KEY_CHANGED.replace("{ca}", &ca));
    let mut named = restart_only_changes(&running, &changed);
    // The node list's other source, in a file of its own.
    let discovered = load(
        &dir,
        &EVERY_RESTART_KEY_CHANGED.replace("{ca}", &ca).replace(
            "servers = [\"127.0.0.1:1\", \"127.0.0.1:3\"]",
            "discovery = \"127.0.0.1:2\"",
        ),
    );
    named.extend(restart_only_changes(&running, &discovered));
    named.sort_unstable();
    named.dedup();
    let mut expected = RESTART_ONLY.to_vec();
    expected.sort_unstable();
    assert_eq!(named, expected);
    assert!(restart_only_changes(&changed, &changed).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_changing_every_live_key_needs_no_restart() {
    let dir = test_dir();
    let running = load(&dir, "");
    let changed = load(
        &dir,
        r#"
[reload]
watch_ms = 0
[limits]
max_counters = 64
[server]
max_connections = 5
api_tokens = ["listed-token-0123456789"]
api_tokens_file = "tokens"
metrics_need_token = true
[auth]
trusted_proxies = ["10.0.0.0/8"]
deny_status = 403
exempt_addresses = ["192.0.2.0/24"]
[policies.api]
limits = [{ limit = 1, window = "1s" }]
exempt_keys = ["health-checker", "internal-*"]
[rlqs]
assignment_ttl = "5s"
abandon_after = "30s"
unmatched = "deny"
[[rlqs.buckets]]
match = { name = "api" }
limit = 10
window = "1m"
[log]
refusals_per_s = 7
"#,
    );
    assert_eq!(restart_only_changes(&running, &changed), Vec::<&str>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file that loads but is then refused (the server's own check, say the
/// RLS rules no longer fit its `limits.max_counters`) must not change how
/// often the files are watched: the running configuration stays whole.
/// `reload.watch_ms` changes when the server applies the file.
#[test]
fn a_reloaded_watch_applies_only_with_the_file() {
    let dir = test_dir().join("watch");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("slidegate.toml");
    std::fs::write(&path, "[reload]\nwatch_ms = 100\n").unwrap();
    let overrides = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    let started = Config::load(&overrides).unwrap();
    let mut reloader = Reloader::new(overrides, started);
    assert_eq!(
        reloader.watch(),
        Some(std::time::Duration::from_millis(100))
    );

    std::fs::write(&path, "[reload]\nwatch_ms = 0\n").unwrap();
    let reloaded = reloader.reload().unwrap();
    assert_eq!(
        reloader.watch(),
        Some(std::time::Duration::from_millis(100)),
        "loaded, not yet applied"
    );
    reloader.applied(&reloaded);
    assert_eq!(reloader.watch(), None);
}

/// A ConfigMap swap or an editor can leave a watched file missing for an
/// instant: when it is back with the bytes that were loaded, nothing
/// changed, and no reload is made (or counted) for it. Back with other
/// bytes, it changed.
#[test]
fn a_file_briefly_missing_and_back_unchanged_is_no_change() {
    let dir = test_dir().join("missing");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("slidegate.toml");
    let text = "[policies.api]\nlimits = [{ limit = 5, window = \"1s\" }]\n";
    std::fs::write(&path, text).unwrap();
    let overrides = Overrides {
        config: Some(path.clone()),
        ..Overrides::default()
    };
    let reloader = Reloader::new(overrides.clone(), Config::load(&overrides).unwrap());
    assert!(!reloader.changed());

    std::fs::remove_file(&path).unwrap();
    assert!(!reloader.changed(), "missing is no change");
    std::fs::write(&path, text).unwrap();
    assert!(!reloader.changed(), "back with the same bytes is no change");

    std::fs::write(&path, text.replace('5', "6")).unwrap();
    assert!(reloader.changed(), "back with other bytes is a change");
}
