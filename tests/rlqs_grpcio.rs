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

use std::net::SocketAddr;
use std::time::Duration;

use common::process;
use common::service::Slidegate;
use common::tools;

/// A small limit in a short window: the script runs in real time.
const LIMIT: u32 = 30;
const WINDOW_S: u32 = 3;

/// The protos the script's stubs are generated from.
const PROTOS: &[&str] = &[
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
    "envoy/type/v3/ratelimit_strategy.proto",
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/type/v3/token_bucket.proto",
];

/// Start the binary with an `[rlqs]` file; return it and the RLQS address.
fn start_slidegate(memcached: &str) -> (Slidegate, SocketAddr) {
    let rlqs = process::free_addr();
    let config = format!(
        "[rlqs]\nlisten = \"{rlqs}\"\n\n[[rlqs.buckets]]\ndomain = \"envoy\"\n\
         match = {{ name = \"api\" }}\nlimit = {LIMIT}\nwindow = \"{WINDOW_S}s\"\nprecision = {WINDOW_S}\n"
    );
    let namespace = common::unique_namespace();
    let flags = ["--memcached", memcached, "--namespace", &namespace];
    let service = Slidegate::start_with_file("rlqs-grpcio", &config, &flags, &[rlqs]);
    (service, rlqs)
}

#[test]
fn grpcio_plays_envoy_against_the_binary() {
    let test = "grpcio_plays_envoy_against_the_binary";
    let Some((python, stubs)) = tools::grpc_python(test, PROTOS) else {
        return;
    };

    let memcached = common::shared_memcached();
    let (service, addr) = start_slidegate(&memcached.addr());
    let said = tools::run_python(
        &python,
        "tests/rlqs_grpcio/envoy_like.py",
        &[
            stubs.display().to_string(),
            addr.to_string(),
            LIMIT.to_string(),
            WINDOW_S.to_string(),
        ],
        Duration::from_secs(90),
    );
    let _ = std::fs::remove_dir_all(&stubs);
    assert!(
        said.success,
        "envoy_like.py failed:\n{}\nslidegate:\n{}",
        said.all,
        service.log()
    );
    assert!(said.stdout.contains(" passed, 0 failed"), "{}", said.stdout);
}
