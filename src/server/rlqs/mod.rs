//! Envoy's rate-limit quota service (RLQS v3, `StreamRateLimitQuotas`): one
//! global limit for a whole Envoy fleet, off the request path. Envoys report
//! each bucket's usage every few seconds over one stream and enforce the
//! assignments they get back; every report's allowed requests are counted
//! in the bucket's sliding window through the same [`Limiter`] as the other
//! faces, so all slidegate instances share one count. See the book's RLQS chapter (docs/src/guide/rlqs.md).
//!
//! | module | owns |
//! |---|---|
//! | `rules` | the `[[rlqs.buckets]]` rules, compiled; a bucket id's rule and counter key |
//! | `shares` | the quota arithmetic, pure: free quota and demand in, an assignment out |
//! | `stream` | one stream's state: its domain, its buckets, when each was last reported |
//! | `budget` | the buckets all streams keep, against one bound in number and one in bytes |
//! | `demand` | every stream's demand per bucket, on this instance |
//! | `withdraw` | what a stream added to a bucket's shared demand, taken back when it stops |
//! | `report` | a usage report's buckets, checked, with errors that name the field |
//! | `route` | the gRPC method, over frames that keep no buffer between reports |
//! | `service` | a stream's life: reports in, answers and abandons out |
//! | `assign` | one bucket's assignment for one report |
//! | `metrics` | the RLQS counters |
//! | `places` | places and bytes held against a bound: open streams, kept buckets |
//!
//! The listener (connection cap, quiet timeout, API tokens) is the one
//! every gRPC face shares: `server::grpc`.
//!
//! [`Limiter`]: crate::Limiter

mod assign;
mod budget;
mod demand;
mod metrics;
mod places;
mod report;
mod route;
mod rules;
mod service;
pub mod shares;
mod stream;
mod withdraw;

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use super::App;
use crate::config::RlqsConfig;
use budget::{BucketBudget, MAX_BUCKETS};
use demand::Demands;
pub(crate) use metrics::FAMILIES;
use metrics::RlqsMetrics;
use route::RlqsRoute;
use rules::Settings;
use service::RlqsService;

/// The code generated from `proto/` by `build.rs`. The client is there for
/// tests and load drivers.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    pub mod envoy {
        pub mod r#type {
            pub mod v3 {
                pub use crate::server::rls::pb::envoy::r#type::v3::*;
            }
        }
        pub mod service {
            pub mod rate_limit_quota {
                pub mod v3 {
                    tonic::include_proto!("envoy.service.rate_limit_quota.v3");
                }
            }
        }
    }
}

/// The RLQS settings in force, every stream's demand, and the counters.
#[derive(Debug)]
pub struct Rlqs {
    /// What a reload replaces; a report is answered under one snapshot.
    settings: ArcSwap<Settings>,
    demands: Demands,
    metrics: RlqsMetrics,
    /// The buckets all streams keep, against one bound in number and one
    /// in bytes.
    buckets: BucketBudget,
}

impl Rlqs {
    pub fn new(config: &RlqsConfig) -> Rlqs {
        Rlqs {
            settings: ArcSwap::from_pointee(Settings::new(config)),
            demands: Demands::default(),
            metrics: RlqsMetrics::default(),
            buckets: BucketBudget::new(MAX_BUCKETS, config.bounds.tracked_bytes),
        }
    }

    /// Put a reloaded `[rlqs]` in force: the next report of every stream is
    /// answered under it (the listener stays as it was started).
    pub fn apply(&self, config: &RlqsConfig) {
        self.settings.store(Arc::new(Settings::new(config)));
        self.buckets.set_most_bytes(config.bounds.tracked_bytes);
    }

    fn settings(&self) -> Arc<Settings> {
        self.settings.load_full()
    }
}

/// The RLQS families in the server's registry.
#[derive(Debug)]
pub(crate) struct RlqsCollector(pub Arc<Rlqs>);

impl prometheus_client::collector::Collector for RlqsCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        self.0.metrics.encode(&mut encoder)
    }
}

/// Serve `StreamRateLimitQuotas` on `listener` until `shutdown` completes,
/// counting with `app`'s limiter under the `[rlqs]` settings `app` was built
/// with or given ([`App::with_rlqs`]).
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let service = RlqsService {
        app: app.clone(),
        rlqs: app.envoy.rlqs.clone(),
    };
    let routes = tonic::service::Routes::new(RlqsRoute(service));
    // Its streams end with UNAVAILABLE when the drain begins: Envoy would
    // keep them open for ever.
    super::grpc::serve_streams(listener, app, routes, shutdown).await
}
