//! New policies put in force without a restart: by a ConfigMap's `..data`
//! swap, seen by the watch, and by SIGHUP; counters are kept, a bad file is
//! refused, and a request in flight finishes under the policies it started
//! with.

use std::os::unix::fs::symlink;
use std::path::Path;

#[cfg(feature = "memcached")]
use crate::common;
use crate::common::{http, process};

use super::{POLICIES_V1, check, eventually, hang_up, metric, reloaded, start};

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
    hang_up(&daemon);
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

/// A request in flight when a reload lands finishes under the policies it
/// started with: here its store call is held on the wire (a proxy between
/// the binary and memcached) while `api` changes from 1 an hour to 5 a
/// minute, and its answer still carries the old policy. The next request
/// is decided under the new one.
// Multi-threaded: the proxy must relay while this thread waits for the
// binary to start (a blocking wait).
#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_finishes_under_the_policies_it_started_with() {
    let memcached = common::shared_memcached();
    let proxy = common::proxy::CountingProxy::start(memcached.addr()).await;
    let dir = process::temp_dir("slidegate-reload-in-flight");
    let config = dir.join("slidegate.toml");
    let policies = |limit: &str| {
        format!(
            "[reload]\nwatch_ms = 0\n[memcached]\nservers = [\"{}\"]\nnamespace = \"{}\"\n\
             timeout_ms = 30000\n[policies.api]\nlimits = [{limit}]\n",
            proxy.addr,
            common::unique_namespace()
        )
    };
    std::fs::write(&config, policies("{ limit = 1, window = \"1h\" }")).unwrap();
    let (service, addr) = start(&config, &dir);
    eventually("the store ready", || async {
        http::get(addr, "/readyz").await.status == 200
    })
    .await;

    proxy.hold();
    let in_flight = tokio::spawn(check(addr, "api"));
    proxy.holding_a_request().await;
    std::fs::write(&config, policies("{ limit = 5, window = \"1m\" }")).unwrap();
    hang_up(&service);
    reloaded(addr, 1.0).await;
    proxy.release();

    let answered = in_flight.await.unwrap();
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(
        answered.header("ratelimit-policy"),
        Some("\"api\";q=1;w=3600"),
        "the request in flight was decided under the new policy"
    );
    assert_eq!(answered.json()["limits"][0]["window_ms"], 3_600_000);
    let after = check(addr, "api").await;
    assert_eq!(after.header("ratelimit-policy"), Some("\"api\";q=5;w=60"));
}

/// A policy a reload removes takes its `slidegate_decisions_total` series
/// with it (Prometheus then marks them stale), so the series follow the
/// configuration in force, not every configuration there ever was; a
/// policy configured again starts its series afresh.
#[tokio::test]
async fn a_removed_policy_takes_its_series_with_it() {
    let dir = process::temp_dir("slidegate-reload-series");
    let config = dir.join("slidegate.toml");
    let write = |names: &[&str]| {
        let policies: String = names
            .iter()
            .map(|name| format!("[policies.{name}]\nlimits = [{{ limit = 5, window = \"1h\" }}]\n"))
            .collect();
        std::fs::write(&config, format!("[reload]\nwatch_ms = 0\n{policies}")).unwrap();
    };
    let series = |policy: &str| {
        format!("slidegate_decisions_total{{policy=\"{policy}\",outcome=\"allowed\"}}")
    };
    write(&["api", "old"]);
    let (daemon, addr) = start(&config, &dir);
    assert_eq!(check(addr, "old").await.status, 200);
    assert_eq!(metric(addr, &series("old")).await, Some(1.0));

    write(&["api"]);
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    assert_eq!(
        metric(addr, &series("old")).await,
        None,
        "the removed policy's series stays"
    );
    assert_eq!(metric(addr, &series("api")).await, Some(0.0));

    write(&["api", "old"]);
    hang_up(&daemon);
    reloaded(addr, 2.0).await;
    assert_eq!(
        metric(addr, &series("old")).await,
        Some(0.0),
        "configured again, afresh"
    );
    assert_eq!(check(addr, "old").await.status, 200);
    assert_eq!(metric(addr, &series("old")).await, Some(1.0));
}
