//! The `slidegate` binary itself: configuration layering, errors that
//! name the file and field, SIGTERM.

use super::common::process::free_addr;
use super::common::service::Slidegate;
use super::common::wait::{PATIENCE, wait_for};
use super::common::{Memcached, http};

/// The README: "the log says once when the store starts failing and
/// once when it answers again", however many checks fail meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_says_once_when_the_store_fails_and_once_when_it_is_back() {
    const FAILING: &str = "store failing; the failure mode decides until it answers";
    const BACK: &str = "store answers again";
    let mut memcached = Memcached::start();
    let mut command = Slidegate::command();
    command.args(["--memcached", &memcached.addr(), "--timeout-ms", "2000"]);
    let service = Slidegate::start("store-log", command);
    let check = || async {
        let response = http::post(
            service.addr,
            "/v1/check",
            r#"{"key": "k", "limits": [{"limit": 1000, "window": "1h"}]}"#,
        )
        .await;
        response.json()["source"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(check().await, "store");
    memcached.kill();
    for _ in 0..20 {
        assert_eq!(check().await, "fallback");
    }
    memcached.restart();
    wait_for("the store to decide again", PATIENCE, || async {
        check().await == "store"
    })
    .await;
    for _ in 0..5 {
        assert_eq!(check().await, "store");
    }
    let log = service.stop();
    let lines = |what: &str| log.lines().filter(|line| line.contains(what)).count();
    assert_eq!((lines(FAILING), lines(BACK)), (1, 1), "{log}");
}

/// An orchestrator may stop the process the moment it listens: that
/// SIGTERM is a clean stop, not the default action's kill. Asked as
/// soon as a connection is accepted, a few times over, since the
/// window is short.
#[test]
fn a_sigterm_right_after_it_listens_is_a_clean_stop() {
    use super::common::process::Daemon;
    for attempt in 0..20 {
        let dir = Slidegate::dir("early-sigterm");
        let addr = free_addr();
        let mut command = Slidegate::command();
        command.args(["--listen", &addr.to_string()]);
        let mut daemon = Daemon::start("slidegate", command, &dir.join("slidegate.log"));
        super::common::wait::wait_for_blocking("it listens", super::PATIENCE, || {
            std::net::TcpStream::connect(addr).is_ok()
        });
        let status = daemon.terminate(std::time::Duration::from_secs(15));
        assert!(
            status.is_some_and(|status| status.success()),
            "attempt {attempt}: {status:?}\n{}",
            daemon.log()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn flags_beat_environment_beat_file() {
    let dir = Slidegate::dir("layers");
    let file = dir.join("layers.toml");
    let (in_file, in_env, in_flag) = (free_addr(), free_addr(), free_addr());
    std::fs::write(&file, format!("listen = \"{in_file}\"\n")).unwrap();

    let mut command = Slidegate::command();
    command
        .arg("--config")
        .arg(&file)
        .args(["--listen", &in_flag.to_string()])
        .env("SLIDEGATE_LISTEN", in_env.to_string());
    let log = Slidegate::start_in(Slidegate::dir("flag"), command, in_flag, &[]).stop();
    assert!(log.contains("no Memcached server configured"), "{log}");
    assert!(
        log.contains(&format!("listening on http://{in_flag}")),
        "{log}"
    );

    let mut command = Slidegate::command();
    command
        .arg("--config")
        .arg(&file)
        .env("SLIDEGATE_LISTEN", in_env.to_string());
    Slidegate::start_in(Slidegate::dir("env"), command, in_env, &[]).stop();

    let mut command = Slidegate::command();
    command.env("SLIDEGATE_CONFIG", &file);
    Slidegate::start_in(Slidegate::dir("file"), command, in_file, &[]).stop();
}

/// With only a discovery endpoint, the store is Memcached, and the log
/// says so (the endpoint need not answer for the start to go on).
#[test]
fn discovery_alone_is_logged_as_memcached() {
    let endpoint = free_addr();
    let mut command = Slidegate::command();
    command.args(["--memcached-discovery", &endpoint.to_string()]);
    let log = Slidegate::start("discovery-alone", command).stop();
    assert!(!log.contains("no Memcached server configured"), "{log}");
    assert!(
        log.contains(&format!(
            "counting in Memcached via discovery at {endpoint}"
        )),
        "{log}"
    );
}

#[test]
fn a_bad_file_stops_the_start_naming_file_and_field() {
    let dir = Slidegate::dir("bad-file");
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[policies.api]\nlimits = [{ limit = 10, window = \"1s\", precision = 7 }]\n",
    )
    .unwrap();
    let mut command = Slidegate::command();
    command.arg("--config").arg(&file);
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success());
    let expected = format!(
        "{}: policies.api.limits[0].precision: 7 does not divide",
        file.display()
    );
    assert!(output.contains(&expected), "{output}");

    let mut command = Slidegate::command();
    command.args(["--failure-mode", "sometimes"]);
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success());
    assert!(
        output.contains("--failure-mode (or SLIDEGATE_FAILURE_MODE)"),
        "{output}"
    );
}
