//! Hot reload, on the real binary: a Kubernetes ConfigMap update (the
//! `..data` symlink swap) and SIGHUP put new policies in force without a
//! restart or a dropped request, counters are kept, a bad file keeps the
//! running configuration, and restart-only settings are reported.
//!
//! This file starts the binary and asks it what it runs; the tests are in
//! the modules below, by what the reload changes.

#[path = "../common/mod.rs"]
mod common;

mod max_counters;
mod mid_write;
mod policies;
// Every optional part of the service has restart-only keys of its own.
#[cfg(all(feature = "memcached", feature = "tls", feature = "grpc"))]
mod restart_only;
#[cfg(feature = "grpc")]
mod rls_rules;
mod server_section;
mod tokens;

use std::net::SocketAddr;
use std::path::Path;
#[cfg(feature = "grpc")]
use std::time::Duration;

use common::http;
use common::metrics;
use common::process;
use common::service::Slidegate;
use common::wait::{PATIENCE, wait_for};

const POLICIES_V1: &str = r#"
[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 2, window = "1h" }]
"#;

fn start(config: &Path, dir: &Path) -> (Slidegate, SocketAddr) {
    let addr = process::free_addr();
    let service = start_listening(config, dir, Some(addr), &[addr]);
    (service, addr)
}

/// The binary on `config`, with `--listen` when given (else the file's
/// `listen`), once every address of `ready` accepts connections.
fn start_listening(
    config: &Path,
    dir: &Path,
    listen: Option<SocketAddr>,
    ready: &[SocketAddr],
) -> Slidegate {
    let mut command = Slidegate::command();
    command.arg("--config").arg(config);
    if let Some(addr) = listen {
        command.args(["--listen", &addr.to_string()]);
    }
    Slidegate::start_in(dir.to_owned(), command, ready[0], &ready[1..])
}

fn hang_up(service: &Slidegate) {
    service.signal(libc::SIGHUP);
}

/// Wait until the binary has finished `count` successful reloads.
async fn reloaded(addr: SocketAddr, count: f64) {
    eventually("the reload", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"ok\"}").await == Some(count)
    })
    .await;
}

async fn check(addr: SocketAddr, policy: &str) -> http::Response {
    http::post(
        addr,
        "/v1/check",
        &format!(r#"{{"key": "k", "policy": "{policy}"}}"#),
    )
    .await
}

/// Poll until `ready` holds.
async fn eventually<F: Future<Output = bool>>(what: &str, ready: impl FnMut() -> F) {
    wait_for(what, PATIENCE, ready).await;
}

/// One series of the binary's `/metrics`, parsed.
async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    metrics::scrape(addr).await.get(series)
}

const TOKEN_A: &str = "token-a-leaked-0123456789";
const TOKEN_B: &str = "token-b-kept-0123456789";

/// The gRPC code of one ShouldRateLimit call carrying `token`.
#[cfg(feature = "grpc")]
async fn rls_call_with(rls: SocketAddr, token: &str) -> tonic::Code {
    use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor::Entry,
    };
    use slidegate::server::rls::pb::envoy::service::ratelimit::v3::{
        RateLimitRequest, rate_limit_service_client::RateLimitServiceClient,
    };
    let channel = tonic::transport::Channel::from_shared(format!("http://{rls}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut call = tonic::Request::new(RateLimitRequest {
        domain: "test".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: "c".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    });
    call.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    match RateLimitServiceClient::new(channel)
        .should_rate_limit(call)
        .await
    {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}
