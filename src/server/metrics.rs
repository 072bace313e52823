//! `GET /metrics`: one `prometheus-client` registry holding the limiter's
//! families, the HTTP answers, the reloads and (with RLS) the RLS counters,
//! encoded as OpenMetrics text, which Prometheus negotiates and parses.

use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::App;
use super::api::{self, Body};
use crate::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: u16,
}

/// How a reload ended, for `slidegate_config_reloads_total{result}`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ReloadResult {
    /// The new policies and forward-auth settings are in force.
    ok,
    /// The file was refused; the running configuration stays.
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: ReloadResult,
}

pub(crate) struct ServerMetrics {
    registry: Registry,
    answers: Family<StatusLabels, Counter>,
    reloads: [Counter; 2],
    restart_pending: Gauge,
}

impl ServerMetrics {
    pub fn new(limiter: &Metrics) -> ServerMetrics {
        let mut registry = Registry::default();
        limiter.register(&mut registry);
        let answers = Family::<StatusLabels, Counter>::default();
        registry.register(
            "slidegate_http_responses",
            "HTTP answers by status",
            answers.clone(),
        );
        let reloads_family = Family::<ReloadLabels, Counter>::default();
        let reloads = [ReloadResult::ok, ReloadResult::failed]
            .map(|result| reloads_family.get_or_create_owned(&ReloadLabels { result }));
        registry.register(
            "slidegate_config_reloads",
            "Configuration reloads (SIGHUP or the file changed) by result",
            reloads_family,
        );
        let restart_pending = Gauge::default();
        registry.register(
            "slidegate_config_restart_pending",
            "1 when the file changes settings that only a restart applies (listen, store, RLS)",
            restart_pending.clone(),
        );
        ServerMetrics {
            registry,
            answers,
            reloads,
            restart_pending,
        }
    }

    /// Room for the RLS collector, which only `App::with_rls` adds.
    #[cfg(feature = "grpc")]
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn answered(&self, status: StatusCode) {
        // A u16 label: looking the series up allocates nothing.
        self.answers
            .get_or_create(&StatusLabels {
                status: status.as_u16(),
            })
            .inc();
    }

    pub fn reloaded(&self, result: ReloadResult, restart_pending: bool) {
        self.reloads[result as usize].inc();
        if result == ReloadResult::ok {
            self.restart_pending.set(i64::from(restart_pending));
        }
    }
}

/// The whole registry in the OpenMetrics text format.
pub(crate) fn respond(app: &App) -> Response<Body> {
    app.limiter.refresh_gauges();
    let mut text = String::with_capacity(8 * 1024);
    if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &app.metrics.registry)
    {
        // Only a writer can fail, and a String does not: still, never a 500
        // with a stack trace.
        return api::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics: could not be encoded: {error}"),
        );
    }
    let mut response = Response::new(Body::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}
