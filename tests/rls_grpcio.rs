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

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
fn start_slidegate(memcached: &str, namespace: &str) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_slidegate"))
        .args(["--listen", "127.0.0.1:0", "--rls-listen", "127.0.0.1:0"])
        .args(["--memcached", memcached, "--namespace", namespace])
        .arg("--rls-config")
        .arg(Path::new(ROOT).join("tests/data/envoyproxy-ratelimit"))
        .env_remove("SLIDEGATE_CONFIG")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start slidegate");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let (found, addr) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("slidegate: {line}");
            if line.contains("serving Envoy RLS (gRPC) on ") {
                let addr = line.rsplit(' ').next().unwrap_or_default().to_owned();
                let _ = found.send(addr);
            }
        }
    });
    let addr = addr
        .recv_timeout(Duration::from_secs(20))
        .expect("slidegate logs its RLS address within 20 s");
    (server, addr)
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
    let mut script = Command::new("python3")
        .arg(Path::new(ROOT).join("tests/rls_grpcio/replay.py"))
        .arg(&stubs)
        .arg(&addr)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run replay.py");
    // Bounded: a hung server must fail the test, not hang it.
    let deadline = Instant::now() + Duration::from_secs(120);
    while script.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = script.kill();
            panic!("replay.py did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = script.wait_with_output().unwrap();
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
