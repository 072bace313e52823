//! The log as a pipeline reads it, on the real binary: with
//! `--log-format json` every line the process writes (start-up, a check,
//! refusals, a refused reload, a failing store) is one JSON object with a
//! timestamp, level, target and message; and `log.refusals_per_s` bounds
//! the refusal lines, the rest counted in a metric, and applies live.

mod common;

use std::time::{Duration, Instant};

use common::http;
use common::process::output_within;
use common::service::Slidegate;
use common::wait::{PATIENCE, wait_for};

/// Every line of `log` parsed: one JSON object with the fields a log
/// pipeline indexes. Panics naming the first line that is not.
fn parsed_lines(log: &str) -> Vec<serde_json::Value> {
    log.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}\nin:\n{log}"));
            for field in ["timestamp", "level", "target"] {
                assert!(value[field].is_string(), "no {field}: {line}");
            }
            assert!(
                value["fields"]["message"].is_string(),
                "no fields.message: {line}"
            );
            value
        })
        .collect()
}

fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or_default()
}

async fn check(addr: std::net::SocketAddr, key: &str) -> u16 {
    let body = format!(r#"{{"key": "{key}", "policy": "api"}}"#);
    http::post(addr, "/v1/check", &body).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_is_json_and_refusals_are_logged_at_a_bounded_rate() {
    let mut memcached = common::Memcached::start();
    let config = format!(
        r#"[memcached]
servers = ["{}"]
namespace = "{}"
[policies.api]
limits = [{{ limit = 1, window = "1m" }}]
[reload]
watch_ms = 0
[log]
refusals_per_s = 2
"#,
        memcached.addr(),
        common::unique_namespace()
    );
    let service = Slidegate::start_with_file("logs-json", &config, &["--log-format", "json"], &[]);

    // A burst of refusals: one admitted, then 50 refused, timed so the
    // bound counts every second the burst touched.
    assert_eq!(check(service.addr, "flooder").await, 200);
    let started = Instant::now();
    for _ in 0..50 {
        assert_eq!(check(service.addr, "flooder").await, 429);
    }
    let seconds_touched = started.elapsed().as_secs() + 2;
    let refusal_lines: Vec<serde_json::Value> = parsed_lines(&service.log())
        .into_iter()
        .filter(|line| message(line) == "refused")
        .collect();
    let logged = refusal_lines.len() as u64;
    assert!(
        (2..=2 * seconds_touched).contains(&logged),
        "{logged} refusal lines for a burst within {seconds_touched} s"
    );
    let line = &refusal_lines[0]["fields"];
    assert_eq!(line["face"], "http_check");
    assert_eq!(line["key"], "flooder");
    assert_eq!(line["policy"], "api");
    assert_eq!(line["limit"], 1);
    assert_eq!(line["window_ms"], 60_000);
    assert!(
        line["estimate"].as_f64().is_some_and(|e| e >= 1.0),
        "{line}"
    );
    let not_logged = service
        .metrics()
        .await
        .value("slidegate_refusals_not_logged_total");
    assert_eq!(
        not_logged as u64 + logged,
        50,
        "every refusal logged or counted"
    );

    // The rate applies live: a reload turns the refusal log off, and
    // further refusals are neither logged nor counted as unlogged.
    let config_file = service.dir.join("slidegate.toml");
    std::fs::write(
        &config_file,
        config.replace("refusals_per_s = 2", "refusals_per_s = 0"),
    )
    .unwrap();
    service.signal(libc::SIGHUP);
    wait_for(
        "the reload that turns the refusal log off",
        PATIENCE,
        || async {
            service
                .metrics()
                .await
                .get("slidegate_config_reloads_total{result=\"ok\"}")
                .is_some_and(|ok| ok >= 1.0)
        },
    )
    .await;
    for _ in 0..10 {
        assert_eq!(check(service.addr, "flooder").await, 429);
    }
    let refusals_now = parsed_lines(&service.log())
        .iter()
        .filter(|line| message(line) == "refused")
        .count() as u64;
    assert_eq!(refusals_now, logged, "no refusal logged once turned off");
    assert_eq!(
        service
            .metrics()
            .await
            .value("slidegate_refusals_not_logged_total"),
        not_logged
    );

    // A reload refused: a broken file, SIGHUP.
    std::fs::write(
        service.dir.join("slidegate.toml"),
        "[policies.api]\nlimits = 3\n",
    )
    .unwrap();
    service.signal(libc::SIGHUP);
    wait_for("the refused reload in the log", PATIENCE, || async {
        service.log().contains("configuration NOT reloaded")
    })
    .await;

    // The store failing: memcached gone, a check on a fresh key.
    memcached.kill();
    let deadline = Instant::now() + PATIENCE;
    while !service.log().contains("store failing") {
        assert!(
            Instant::now() < deadline,
            "no store failure logged:\n{}",
            service.log()
        );
        check(service.addr, "after-the-outage").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let log = service.stop();
    let lines = parsed_lines(&log);
    for expected in ["configuration NOT reloaded", "store failing", "refused"] {
        assert!(
            lines.iter().any(|line| message(line).contains(expected)),
            "no {expected:?} line in:\n{log}"
        );
    }
    assert!(lines.iter().any(|line| line["level"] == "ERROR"));
}

#[test]
fn a_check_and_a_refused_start_log_json_too() {
    let dir = Slidegate::dir("logs-check");
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[log]\nformat = \"json\"\n[policies.api]\nlimits = [{ limit = 5, window = \"1m\" }]\n",
    )
    .unwrap();
    let mut command = Slidegate::command();
    command.arg("--check").arg("--config").arg(&good);
    let output = output_within(command, PATIENCE);
    assert!(output.status.success());
    assert!(output.stdout.is_empty(), "JSON goes to stderr, one stream");
    let lines = parsed_lines(&String::from_utf8_lossy(&output.stderr));
    assert!(
        lines.iter().any(|line| line["fields"]["summary"]
            .as_str()
            .is_some_and(|summary| summary.contains("api: 5 per 60000 ms"))),
        "{lines:?}"
    );

    // A start refused by its configuration: the error is a JSON line.
    let mut command = Slidegate::command();
    command.args(["--log-format", "json", "--failure-mode", "sometimes"]);
    let (status, log) = Slidegate::run_to_exit(command);
    assert_eq!(status.code(), Some(1), "{log}");
    let lines = parsed_lines(&log);
    assert!(
        lines.iter().any(|line| line["level"] == "ERROR"
            && line["fields"]["error"]
                .as_str()
                .is_some_and(|error| error.contains("--failure-mode"))),
        "{log}"
    );

    // A bad format is named like any field.
    let mut command = Slidegate::command();
    command.args(["--check", "--log-format", "xml"]);
    let (status, log) = Slidegate::run_to_exit(command);
    assert_eq!(status.code(), Some(1));
    assert!(
        log.contains(
            r#"--log-format (or SLIDEGATE_LOG_FORMAT): expected "text" or "json", got "xml""#
        ),
        "{log}"
    );
}
