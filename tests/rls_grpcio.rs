//! Envoy RLS with a gRPC client that is not ours: python `grpcio`, with stubs
//! generated here from the vendored protos (`proto/`), against the real
//! `slidegate` binary on a real memcached, loading envoyproxy/ratelimit's
//! example configuration unchanged (tests/data/envoyproxy-ratelimit/). The
//! scenarios are envoyproxy/ratelimit's own integration scripts; see
//! tests/rls_grpcio/replay.py.
//!
//! Needs python3; installs `grpcio grpcio-tools` with pip when missing, and
//! skips (saying so loudly) only when that install is impossible.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Whether python3 can import grpc and grpc_tools, installing them if not.
fn python_with_grpcio() -> Result<(), String> {
    let importable = || {
        Command::new("python3")
            .args(["-c", "import grpc, grpc_tools.protoc"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if importable() {
        return Ok(());
    }
    let install = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet", "grpcio", "grpcio-tools"])
        .output()
        .map_err(|error| format!("cannot run python3 -m pip: {error}"))?;
    if !install.status.success() || !importable() {
        return Err(format!(
            "pip install grpcio grpcio-tools failed: {}",
            String::from_utf8_lossy(&install.stderr)
        ));
    }
    Ok(())
}

/// Generate the Python stubs of the vendored protos into `out`.
fn generate_stubs(out: &Path) {
    let well_known = Command::new("python3")
        .args([
            "-c",
            "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'))",
        ])
        .output()
        .expect("python3 runs");
    let well_known = String::from_utf8(well_known.stdout).unwrap();
    let protos = Path::new(ROOT).join("proto");
    let files = [
        "envoy/service/ratelimit/v3/rls.proto",
        "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
        "envoy/type/v3/ratelimit_unit.proto",
        "envoy/config/core/v3/base.proto",
    ];
    let output = Command::new("python3")
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", protos.display()))
        .arg(format!("-I{}", well_known.trim()))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .args(files)
        .output()
        .expect("grpc_tools.protoc runs");
    assert!(
        output.status.success(),
        "grpc_tools.protoc failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Start the binary; return it and the RLS address it logged.
fn start_slidegate(memcached: &str, namespace: &str) -> (common::process::Logged, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    command
        .args(["--listen", "127.0.0.1:0", "--rls-listen", "127.0.0.1:0"])
        .args(["--memcached", memcached, "--namespace", namespace])
        .arg("--rls-config")
        .arg(Path::new(ROOT).join("tests/data/envoyproxy-ratelimit"))
        .env_remove("SLIDEGATE_CONFIG");
    common::process::start_announcing(command, "serving Envoy RLS (gRPC) on ")
}

#[test]
fn grpcio_replays_envoyproxy_ratelimit_integration_scripts() {
    if let Err(reason) = python_with_grpcio() {
        eprintln!("SKIPPED grpcio_replays_envoyproxy_ratelimit_integration_scripts: {reason}");
        return;
    }
    let stubs: PathBuf =
        std::env::temp_dir().join(format!("slidegate-rls-stubs-{}", std::process::id()));
    std::fs::create_dir_all(&stubs).unwrap();
    generate_stubs(&stubs);

    let memcached = common::shared_memcached();
    let (_server, addr) = start_slidegate(&memcached.addr(), &common::unique_namespace());
    let mut script = Command::new("python3");
    script
        .arg(Path::new(ROOT).join("tests/rls_grpcio/replay.py"))
        .arg(&stubs)
        .arg(&addr);
    let output = common::process::output_within(script, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&stubs);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "replay.py failed:\n{stdout}{stderr}"
    );
    assert!(stdout.contains("passed, 0 failed"), "{stdout}");
}
