//! `slidegate --check` on the real binary: a good configuration is
//! summarised and exits 0 without contacting anything it names; a bad one
//! exits 1 with the message a start would print (file and field), never a
//! backtrace; and every configuration the repository ships passes.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::process::{self, output_within};
use common::service::Slidegate;

/// A check reads a few small files: far less than this even on a loaded
/// machine.
const CHECK_WITHIN: Duration = Duration::from_secs(30);

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `slidegate --check` with `args`, a backtrace asked for by the
/// environment so that its absence proves something.
fn check(args: &[&str]) -> Output {
    let mut command = Slidegate::command();
    command
        .arg("--check")
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    output_within(command, CHECK_WITHIN)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A self-signed CA certificate, made with openssl as tests/tls.rs does.
fn ca_file(dir: &Path) -> PathBuf {
    let mut openssl = Command::new("openssl");
    openssl.current_dir(dir).args([
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=slidegate check test CA",
        "-days",
        "1",
    ]);
    process::succeed(openssl);
    dir.join("ca.pem")
}

const RULES: &str = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n  - key: path\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n";

/// Connections the listener was sent, counted without blocking: a
/// connection the kernel completed waits in the backlog until accepted.
fn accepted(listener: &TcpListener) -> usize {
    listener.set_nonblocking(true).expect("non-blocking");
    let mut count = 0;
    // Bounded: a backlog holds far fewer than this.
    for _ in 0..1_000 {
        match listener.accept() {
            Ok(_) => count += 1,
            Err(_) => break,
        }
    }
    count
}

#[test]
fn a_good_configuration_is_summarised_and_nothing_is_contacted() {
    let dir = Slidegate::dir("check-good");
    // Stands in for memcached (and, below, a discovery endpoint): counts
    // every connection made to it.
    let memcached = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = TcpListener::bind("127.0.0.1:0").expect("bind");
    let ca = ca_file(&dir);
    std::fs::write(dir.join("rules.yaml"), RULES).unwrap();
    std::fs::write(dir.join("tokens"), "a-token-of-sixteen-bytes\n").unwrap();
    let http = process::free_addr();
    let rls = process::free_addr();
    let rlqs = process::free_addr();
    let config = format!(
        r#"listen = "{http}"
[memcached]
servers = ["{memcached}"]
tls_ca_file = "ca.pem"
[server]
api_tokens_file = "tokens"
[policies.api]
limits = [{{ limit = 10, window = "1s" }}, {{ limit = 3000, window = "10m" }}]
[rls]
listen = "{rls}"
config = "rules.yaml"
[rlqs]
listen = "{rlqs}"
[[rlqs.buckets]]
limit = 100
window = "1s"
"#,
        memcached = memcached.local_addr().unwrap(),
    );
    let file = dir.join("slidegate.toml");
    std::fs::write(&file, config).unwrap();

    let output = check(&["--config", file.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{}",
        stdout,
        text(&output.stderr)
    );
    for expected in [
        &format!("HTTP API        {http}") as &str,
        &format!("Envoy RLS       {rls}"),
        &format!("Envoy RLQS      {rlqs}"),
        &format!("Memcached {}", memcached.local_addr().unwrap()),
        &format!("TLS (CA {})", ca.display()),
        "api: 10 per 1000 ms, 3000 per 600000 ms",
        "edge: 2 rules",
        "RLQS buckets    1 rule",
        "API tokens      required",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    assert!(
        stdout.lines().count() <= 24,
        "more than a screen:\n{stdout}"
    );
    assert_eq!(accepted(&memcached), 0, "the check contacted memcached");
    for address in [http, rls, rlqs] {
        assert!(
            std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err(),
            "{address} is listening after the check"
        );
    }

    // The discovery endpoint is not asked for its nodes either.
    let output = check(&[
        "--memcached-discovery",
        &endpoint.local_addr().unwrap().to_string(),
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("Memcached via discovery at"), "{stdout}");
    assert_eq!(accepted(&endpoint), 0, "the check contacted discovery");
}

/// A failed check: exit 1, `expected` on stderr, no backtrace, nothing on
/// stdout.
fn assert_refused(output: &Output, expected: &[&str]) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{part:?} not in:\n{stderr}");
    }
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
}

fn write_config(name: &str, config: &str) -> (PathBuf, String) {
    let dir = Slidegate::dir(name);
    let file = dir.join("slidegate.toml");
    std::fs::write(&file, config).unwrap();
    let shown = file.display().to_string();
    (dir, shown)
}

#[test]
fn a_bad_field_fails_naming_the_file_and_the_field() {
    let (_dir, file) = write_config("check-field", "[failure]\nmode = \"sometimes\"\n");
    assert_refused(
        &check(&["--config", &file]),
        &[&file, "failure.mode", "sometimes"],
    );
    let (_dir, file) = write_config("check-unknown", "[memcached]\nserverz = []\n");
    assert_refused(&check(&["--config", &file]), &[&file, "serverz"]);
}

#[test]
fn a_bad_rls_rules_file_fails_naming_it() {
    let dir = Slidegate::dir("check-rules");
    let rules = dir.join("rules.yaml");
    std::fs::write(
        &rules,
        "domain: edge\ndescriptors:\n  - key: path\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
    )
    .unwrap();
    assert_refused(
        &check(&[
            "--rls-listen",
            &process::free_addr().to_string(),
            "--rls-config",
            rules.to_str().unwrap(),
        ]),
        &[rules.to_str().unwrap(), "fortnight"],
    );
}

#[test]
fn a_missing_tokens_file_fails_naming_the_field() {
    let (dir, file) = write_config(
        "check-tokens",
        "[server]\napi_tokens_file = \"absent-tokens\"\n",
    );
    assert_refused(
        &check(&["--config", &file]),
        &[
            &file,
            "server.api_tokens_file",
            &dir.join("absent-tokens").display().to_string(),
        ],
    );
}

#[test]
fn a_ca_file_without_a_certificate_fails_naming_it() {
    let (dir, file) = write_config(
        "check-ca",
        "[memcached]\nservers = [\"127.0.0.1:11211\"]\ntls_ca_file = \"ca.pem\"\n",
    );
    std::fs::write(dir.join("ca.pem"), "not a certificate\n").unwrap();
    assert_refused(
        &check(&["--config", &file]),
        &["tls_ca_file", &dir.join("ca.pem").display().to_string()],
    );
}

/// The configurations the repository ships, as their documents run them.
#[test]
fn every_shipped_configuration_passes() {
    for args in [
        &["--config", "docker/slidegate.toml"] as &[&str],
        &["--config", "examples/proxies/slidegate.toml"],
        &["--config", "examples/envoy/rlqs.toml"],
        &[
            "--rls-listen",
            "127.0.0.1:8081",
            "--rls-config",
            "examples/envoy/ratelimit",
        ],
    ] {
        assert!(repo(args[1]).exists() || args[0] != "--config");
        let output = check(args);
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        assert!(text(&output.stdout).starts_with("configuration OK"));
    }
}
