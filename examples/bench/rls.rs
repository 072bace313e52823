//! Envoy's `ShouldRateLimit` against the real binary, as Envoy calls it:
//! gRPC over a few HTTP/2 connections, one descriptor per request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use crate::http::Server;
use crate::measure::Row;

const KEYS: u64 = 10_000;
/// HTTP/2 connections the callers share, as an Envoy fleet's few would.
const CHANNELS: usize = 4;

/// `callers` concurrent `ShouldRateLimit` calls until `total` or `limit`.
pub async fn should_rate_limit(
    server: &Server,
    callers: usize,
    total: u64,
    limit: Duration,
) -> Row {
    let addr = server
        .rls_addr
        .expect("slidegate serves RLS in the benchmark");
    let mut clients = Vec::new();
    for _ in 0..CHANNELS {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .expect("a valid address")
            .connect()
            .await
            .expect("connect to slidegate's RLS port");
        clients.push(RateLimitServiceClient::new(channel));
    }
    let unexpected = Arc::new(AtomicU64::new(0));
    let row = crate::run_callers(callers, total, limit, {
        let unexpected = unexpected.clone();
        move |index| {
            let mut client = clients[index as usize % CHANNELS].clone();
            let unexpected = unexpected.clone();
            async move {
                let request = RateLimitRequest {
                    domain: "bench".to_owned(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "client".to_owned(),
                            value: format!("k{}", index % KEYS),
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 0,
                };
                let ok = client
                    .should_rate_limit(request)
                    .await
                    .is_ok_and(|answer| answer.into_inner().overall_code == Code::Ok as i32);
                if !ok {
                    unexpected.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    })
    .await;
    Row {
        name: "gRPC ShouldRateLimit (Envoy RLS), admitted".to_owned(),
        concurrency: format!("{callers} callers, {CHANNELS} HTTP/2 conns"),
        unexpected: unexpected.load(Ordering::Relaxed),
        ..row
    }
}
