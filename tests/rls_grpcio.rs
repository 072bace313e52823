//! Envoy RLS with a gRPC client that is not ours: python `grpcio`, with stubs
//! generated here from the vendored protos (`proto/`), against the real
//! `slidegate` binary on a real memcached, loading envoyproxy/ratelimit's
//! example configuration unchanged (tests/data/envoyproxy-ratelimit/). The
//! scenarios are envoyproxy/ratelimit's own integration scripts; see
//! tests/rls_grpcio/replay.py.
//!
//! Needs python3; installs `grpcio grpcio-tools` with pip into a virtual
//! environment under `target/` (PEP 668 refuses a bare `pip install` on
//! Debian 12 and Ubuntu 24.04). When they cannot be had the test fails
//! (see tests/common/tools.rs for the one way to skip it).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::process;
use common::service::Slidegate;
use common::tools;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The protos the script's stubs are generated from.
const PROTOS: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
];

/// The binary with the RLS listener on envoyproxy/ratelimit's example
/// configuration; its RLS address.
fn start_slidegate(memcached: &str, namespace: &str) -> (Slidegate, SocketAddr) {
    let rls = process::free_addr();
    let mut command = Slidegate::command();
    command
        .args(["--rls-listen", &rls.to_string()])
        .args(["--memcached", memcached, "--namespace", namespace])
        // Generous: the scripts expect the store's decisions, not the
        // failure mode's, on a busy machine too.
        .args(["--timeout-ms", "2000"])
        .arg("--rls-config")
        .arg(Path::new(ROOT).join("tests/data/envoyproxy-ratelimit"));
    let addr = process::free_addr();
    command.args(["--listen", &addr.to_string()]);
    let service = Slidegate::start_in(Slidegate::dir("grpcio"), command, addr, &[rls]);
    (service, rls)
}

#[test]
fn grpcio_replays_envoyproxy_ratelimit_integration_scripts() {
    const TEST: &str = "grpcio_replays_envoyproxy_ratelimit_integration_scripts";
    let Some((python, stubs)) = tools::grpc_python(TEST, PROTOS) else {
        return;
    };

    let memcached = common::shared_memcached();
    let (service, addr) = start_slidegate(&memcached.addr(), &common::unique_namespace());
    let said = tools::run_python(
        &python,
        "tests/rls_grpcio/replay.py",
        &[stubs.display().to_string(), addr.to_string()],
        Duration::from_secs(120),
    );
    let _ = std::fs::remove_dir_all(&stubs);
    assert!(
        said.success,
        "replay.py failed:\n{}\nslidegate:\n{}",
        said.all,
        service.log()
    );
    assert!(said.stdout.contains("passed, 0 failed"), "{}", said.stdout);
}
