//! Envoy's rate-limit service (RLS v3, `ShouldRateLimit` over gRPC), with
//! envoyproxy/ratelimit's configuration files. One more face over the same
//! [`Limiter`](crate::Limiter) as the HTTP API: the counters, the
//! near-cache and the failure mode are shared.
//!
//! | module | owns |
//! |---|---|
//! | `rules` | the YAML files, compiled to a tree per domain; the descriptor lookup |
//! | `service` | the gRPC service: descriptors to limiter items, decisions to statuses |
//! | `metrics` | counters per domain and rule, bounded by the configuration |
//! | `reload` | the rules a reload brings, compiled, checked and swapped in |
//!
//! The listener (connection cap, quiet timeout, API tokens, codec) is the
//! one every gRPC face shares: `server::grpc`.

mod metrics;
mod reload;
mod rules;
mod service;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use tokio::net::TcpListener;

pub(crate) use metrics::FAMILIES;
pub(crate) use reload::{apply_rules, rules_reloaded};
pub use rules::{RuleSet, Unit};

use super::App;
use metrics::ServiceMetrics;
use service::RlsService;

/// The code generated from `proto/` by `build.rs`, under the protos' own
/// package paths. The client is there for tests and load drivers.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    pub mod envoy {
        pub mod config {
            pub mod core {
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        pub mod extensions {
            pub mod common {
                pub mod ratelimit {
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        pub mod r#type {
            pub mod v3 {
                tonic::include_proto!("envoy.r#type.v3");
            }
        }
        pub mod service {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
    }
}

/// The rules in force and the RLS counters.
#[derive(Debug)]
pub struct Rls {
    /// What a reload replaces, as one: a request takes the rules once and
    /// is decided under them, so it sees the old rules or the new ones,
    /// never a mix.
    rules: ArcSwap<RuleSet>,
    metrics: ServiceMetrics,
}

impl Rls {
    /// Rules from a YAML file or a directory of them (envoyproxy/ratelimit's
    /// format). Errors name the file and the path in it.
    pub fn load(path: &Path) -> Result<Rls, String> {
        RuleSet::load(path).map(Rls::new)
    }

    pub fn new(rules: RuleSet) -> Rls {
        Rls {
            rules: ArcSwap::from_pointee(rules),
            metrics: ServiceMetrics::default(),
        }
    }

    /// The rules in force now.
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Put reloaded rules in force. Requests being decided finish under
    /// the rules they took; counters are kept, since a descriptor's
    /// counters are named by its domain and entries, not its rule. Each
    /// rule's hit counts carry over to the rule of the same domain and
    /// path, so a reload does not reset their series.
    pub fn replace(&self, rules: RuleSet) {
        rules.carry_metrics_from(&self.rules.load());
        self.rules.store(Arc::new(rules));
    }
}

/// The RLS families in the server's registry: read at each scrape from the
/// rules' own counters, whose labels the configuration bounds; none while
/// no rules are given.
#[derive(Debug)]
pub(crate) struct RlsCollector(pub Arc<ArcSwapOption<Rls>>);

impl prometheus_client::collector::Collector for RlsCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let Some(rls) = self.0.load_full() else {
            return Ok(());
        };
        let in_force = rls.rules();
        let rules = in_force.rules().iter().map(|rule| {
            let label = rule.name.as_deref().unwrap_or(rule.path.as_str());
            (rule.domain.as_str(), label, &rule.metrics)
        });
        let overrides = in_force
            .overrides()
            .map(|(domain, metrics)| (domain, "override", metrics));
        metrics::encode(&mut encoder, &rls.metrics, rules.chain(overrides))
    }
}

/// Serve `ShouldRateLimit` on `listener` until `shutdown` completes, deciding
/// with `app`'s limiter and the rules `app` was built with (`rls.config`)
/// or given ([`App::with_rls`]). HTTP/2 without TLS, as Envoy's `envoy_grpc` cluster
/// with `http2_protocol_options` speaks it.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let Some(rls) = app.envoy.rls() else {
        tracing::warn!("RLS listener without RLS rules: every descriptor is answered OK");
        return serve_with(
            listener,
            app,
            Arc::new(Rls::new(RuleSet::default())),
            shutdown,
        )
        .await;
    };
    serve_with(listener, app, rls, shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    app: Arc<App>,
    rls: Arc<Rls>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    use pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
    let service = RlsService {
        app: app.clone(),
        rls,
    };
    let routes = tonic::service::Routes::new(RateLimitServiceServer::new(service));
    super::grpc::serve(listener, app, routes, shutdown).await
}

/// The address a listener is bound to, for logs.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
