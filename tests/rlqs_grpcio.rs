//! Envoy RLQS with a gRPC client that is not ours: python `grpcio`, with
//! stubs generated here from the vendored protos (`proto/`), against the
//! real `slidegate` binary on a real memcached, in real time. The script
//! (tests/rlqs_grpcio/envoy_like.py) checks first answers, unmatched
//! buckets and bad input, then plays two Envoys at 2.7 x a limit.
//!
//! Python tools live in the tests' venv under target/ (tests/common/tools.rs,
//! shared with tests/rls_grpcio.rs). A tool that cannot be had fails the
//! test, unless SLIDEGATE_ALLOW_SKIP=1 outside CI.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// A small limit in a short window: the script runs in real time.
const LIMIT: u32 = 30;
const WINDOW_S: u32 = 3;

fn generate_stubs(python: &Path, out: &Path) {
    common::tools::grpc_python_stubs(
        python,
        out,
        &[
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
            "envoy/type/v3/ratelimit_strategy.proto",
            "envoy/type/v3/ratelimit_unit.proto",
            "envoy/type/v3/token_bucket.proto",
        ],
    );
}

/// Start the binary with an `[rlqs]` file; return it and the RLQS address.
fn start_slidegate(dir: &Path, memcached: &str) -> (common::process::Logged, String) {
    let config = dir.join("slidegate.toml");
    std::fs::write(
        &config,
        format!(
            "[rlqs]\nlisten = \"127.0.0.1:0\"\n\n[[rlqs.buckets]]\ndomain = \"envoy\"\n\
             match = {{ name = \"api\" }}\nlimit = {LIMIT}\nwindow = \"{WINDOW_S}s\"\nprecision = {WINDOW_S}\n"
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    command
        .args(["--listen", "127.0.0.1:0", "--memcached", memcached])
        .args(["--namespace", &common::unique_namespace()])
        .arg("--config")
        .arg(&config)
        .env_remove("SLIDEGATE_RLQS_LISTEN");
    common::process::start_announcing(command, "serving Envoy RLQS (gRPC) on ")
}

#[test]
fn grpcio_plays_envoy_against_the_binary() {
    let found = common::tools::python_with(&["grpcio", "grpcio-tools"], "grpc, grpc_tools.protoc");
    let test = "grpcio_plays_envoy_against_the_binary";
    let Some(python) = common::tools::require(test, "python grpcio", found) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("slidegate-rlqs-grpcio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    generate_stubs(&python, &dir);

    let memcached = common::shared_memcached();
    let (_server, addr) = start_slidegate(&dir, &memcached.addr());
    let mut script = Command::new(&python);
    script
        .arg(Path::new(ROOT).join("tests/rlqs_grpcio/envoy_like.py"))
        .arg(&dir)
        .arg(&addr)
        .args([LIMIT.to_string(), WINDOW_S.to_string()]);
    let output = common::process::output_within(script, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "envoy_like.py failed:\n{stdout}{stderr}"
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
