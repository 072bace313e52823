//! Restart-only settings: a reload applies what it can, names every key it
//! cannot, and says a restart is pending until the file agrees with the
//! running process again.

use crate::common::process;

use super::{check, hang_up, metric, reloaded, start_listening};

/// Every restart-only key changed at once (the node list's two sources,
/// `servers` and `discovery`, one reload after the other, since a file
/// gives one of them): the reload applies what it can and names each of
/// the others in its "restart needed" line, and
/// `slidegate_config_restart_pending` is 1 until the file agrees with the
/// running process again.
#[cfg(all(feature = "memcached", feature = "tls", feature = "grpc"))]
#[tokio::test]
async fn a_reload_names_every_restart_only_key_it_cannot_apply() {
    let dir = process::temp_dir("slidegate-restart-keys");
    let config = dir.join("slidegate.toml");
    let addr = process::free_addr();
    let running = format!("listen = \"{addr}\"\n[reload]\nwatch_ms = 0\n");
    std::fs::write(&config, &running).unwrap();
    std::fs::write(dir.join("ca.pem"), "read only when connecting").unwrap();
    let daemon = start_listening(&config, &dir, None, &[addr]);
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(0.0)
    );

    let ca = dir.join("ca.pem");
    let every_key_changed = format!(
        r#"{running}
[memcached]
servers = ["127.0.0.1:9", "127.0.0.1:14"]
replicas = 2
timeout_ms = 75
namespace = "elsewhere"
connections = 3
coalesce = false
discovery_interval_ms = 2000
tls = true
tls_ca_file = "{ca}"
tls_server_name = "cache.internal"
[near_cache]
capacity = 10
max_bytes = 2000000
revalidate_ms = 250
[failure]
mode = "local"
[rls]
listen = "127.0.0.1:11"
config = "rules.yaml"
max_descriptors = 16
[rlqs]
listen = "127.0.0.1:13"
[memory]
capacity = 100
[clock]
source = "memcached"
[server]
shutdown_delay_ms = 1000
drain_timeout_ms = 3000
[log]
format = "json"
[policies.new]
limits = [{{ limit = 1, window = "1h" }}]
"#,
        ca = ca.display()
    )
    .replace(&format!("listen = \"{addr}\""), "listen = \"127.0.0.1:12\"");
    let discovered = every_key_changed.replace(
        "servers = [\"127.0.0.1:9\", \"127.0.0.1:14\"]",
        "discovery = \"127.0.0.1:10\"",
    );
    std::fs::write(&config, every_key_changed).unwrap();
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    std::fs::write(&config, discovered).unwrap();
    hang_up(&daemon);
    reloaded(addr, 2.0).await;
    let log = daemon.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("restart needed"))
        .collect();
    assert_eq!(lines.len(), 2, "restart-needed lines:\n{log}");
    let missing: Vec<&str> = slidegate::config::reload::RESTART_ONLY
        .iter()
        .copied()
        .filter(|key| {
            !lines
                .iter()
                .any(|line| line.contains(&format!("\"{key}\"")))
        })
        .collect();
    assert!(missing.is_empty(), "not named: {missing:?} in\n{lines:#?}");
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(1.0)
    );
    // What could apply did, on the old listener and store.
    assert_eq!(check(addr, "new").await.status, 200);

    // The policy stays: a reload may not take every policy away, and it
    // is applied live anyway.
    let policy = "[policies.new]\nlimits = [{ limit = 1, window = \"1h\" }]\n";
    std::fs::write(&config, format!("{running}{policy}")).unwrap();
    hang_up(&daemon);
    reloaded(addr, 3.0).await;
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(0.0),
        "the file agrees with the running process again"
    );
}
