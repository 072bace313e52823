//! Hot reload, on the real binary: a Kubernetes ConfigMap update (the
//! `..data` symlink swap) and SIGHUP put new policies in force without a
//! restart or a dropped request, counters are kept, a bad file keeps the
//! running configuration, and restart-only settings are reported.

mod common;

use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::http;
use common::process::{self, Daemon};

const POLICIES_V1: &str = r#"
[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 2, window = "1h" }]
"#;

/// api raised to 3 (its counters kept), a new policy, and a new failure
/// mode, which needs a restart.
const POLICIES_V2: &str = r#"
[failure]
mode = "deny"

[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 3, window = "1h" }]

[policies.extra]
limits = [{ limit = 1, window = "1h" }]
"#;

const BAD: &str = r#"
[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 0, window = "1h" }]
"#;

/// What a kubelet does to a mounted ConfigMap: the new content in a fresh
/// directory, then `..data` switched to it by an atomic rename.
fn configmap_update(dir: &Path, version: &str, text: &str) {
    let data = dir.join(version);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("slidegate.toml"), text).unwrap();
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(version, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
}

fn start(config: &Path, dir: &Path) -> (Daemon, SocketAddr) {
    let addr = process::free_addr();
    let mut command = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    command
        .arg("--config")
        .arg(config)
        .args(["--listen", &addr.to_string()])
        .env_remove("SLIDEGATE_MEMCACHED")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1");
    let mut daemon = Daemon::start("slidegate", command, &dir.join("slidegate.log"));
    daemon.wait_for(addr);
    (daemon, addr)
}

async fn check(addr: SocketAddr, policy: &str) -> http::Response {
    http::post(
        addr,
        "/v1/check",
        &format!(r#"{{"key": "k", "policy": "{policy}"}}"#),
    )
    .await
}

/// Poll (at most 20 s) until `ready` holds.
async fn eventually<F: Future<Output = bool>>(what: &str, mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready().await {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let page = http::get(addr, "/metrics").await.body;
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_configmap_swap_reloads_policies_and_keeps_counters() {
    let dir = process::temp_dir("slidegate-reload");
    configmap_update(&dir, "..v1", POLICIES_V1);
    symlink("..data/slidegate.toml", dir.join("slidegate.toml")).unwrap();
    let (daemon, addr) = start(&dir.join("slidegate.toml"), &dir);

    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 429);
    assert_eq!(check(addr, "extra").await.status, 400, "not configured yet");

    // Requests keep flowing through the reload; every one is answered.
    let load = tokio::spawn(async move {
        let mut answered = Vec::new();
        for _ in 0..150 {
            let response = http::post(
                addr,
                "/v1/check",
                r#"{"key": "load", "limits": [{"limit": 1000000, "window": "1h"}]}"#,
            )
            .await;
            answered.push(response.status);
        }
        answered
    });
    configmap_update(&dir, "..v2", POLICIES_V2);
    eventually("the new policy", || async {
        check(addr, "extra").await.status == 200
    })
    .await;
    let answered = load.await.unwrap();
    assert!(answered.iter().all(|status| *status == 200), "{answered:?}");

    // api's 2 counted requests are still there: one more fits under 3.
    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 429);
    let log = daemon.log();
    assert!(log.contains("configuration reloaded"), "{log}");
    assert!(
        log.contains("only change on a restart") && log.contains("\"failure.mode\""),
        "the new failure mode is reported as needing a restart:\n{log}"
    );
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(1.0)
    );
    assert_eq!(
        metric(addr, "slidegate_config_reloads_total{result=\"ok\"}").await,
        Some(1.0)
    );

    // A bad file: refused, named, counted; the running policies stay.
    configmap_update(&dir, "..v3", BAD);
    eventually("the failed reload", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await == Some(1.0)
    })
    .await;
    let log = daemon.log();
    assert!(
        log.contains("configuration NOT reloaded")
            && log.contains("slidegate.toml")
            && log.contains("policies.api.limits[0].limit"),
        "the error names the file and the field:\n{log}"
    );
    assert_eq!(
        check(addr, "extra").await.status,
        429,
        "extra (limit 1) is still in force and still counting"
    );
    assert_eq!(check(addr, "api").await.status, 429);
}

#[tokio::test]
async fn sighup_reloads() {
    let dir = process::temp_dir("slidegate-sighup");
    let config = dir.join("slidegate.toml");
    // File watching off: only the signal can reload.
    let off = POLICIES_V1.replace("watch_ms = 100", "watch_ms = 0");
    std::fs::write(&config, &off).unwrap();
    let (daemon, addr) = start(&config, &dir);
    assert_eq!(check(addr, "extra").await.status, 400);

    let with_extra =
        format!("{off}\n[policies.extra]\nlimits = [{{ limit = 1, window = \"1h\" }}]\n");
    std::fs::write(&config, with_extra).unwrap();
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(daemon.pid(), libc::SIGHUP) }, 0);
    eventually("the reload on SIGHUP", || async {
        check(addr, "extra").await.status != 400
    })
    .await;
    assert!(
        daemon.log().contains("reason=\"SIGHUP\""),
        "{}",
        daemon.log()
    );
}
