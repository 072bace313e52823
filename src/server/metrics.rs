//! `GET /metrics`: one `prometheus-client` registry, into which each part
//! of the server registers its own families once, as it is built
//! (`build`), encoded as OpenMetrics text, which Prometheus negotiates and
//! parses. This module owns the registry and the HTTP service's own
//! family, its answers by status.

use std::sync::OnceLock;

use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::App;
use super::api::{self, Body};
use crate::metrics::catalogue::{Described, Kind, Label};
use crate::metrics::store::MemoryFigures;
use crate::store::AnyStore;

/// The HTTP service's family, which [`ServerMetrics::new`] registers.
pub(crate) const FAMILIES: &[Described; 1] = &[Described {
    name: "slidegate_http_responses",
    kind: Kind::Counter,
    labels: &[Label {
        name: "status",
        values: "the HTTP status answered (a status is listed once it was answered)",
    }],
    help: "HTTP answers by status.",
}];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: u16,
}

pub(crate) struct ServerMetrics {
    registry: Registry,
    answers: Family<StatusLabels, Counter>,
    /// The series of 200 and 429, nearly every answer's, taken from
    /// `answers` on the first such answer and counted directly after:
    /// the family's `get_or_create` takes its read lock (a count both
    /// cores write) and hashes the label on every answer. Taken on first
    /// use, not made up front, so that /metrics lists a status only once
    /// it was answered, as it always did.
    usual_answers: [OnceLock<Counter>; 2],
    /// The embedded store's figures: registered by the build when the
    /// store is the embedded one, read before each scrape.
    pub(super) memory: MemoryFigures,
}

impl ServerMetrics {
    /// A registry holding the HTTP service's families; the build adds
    /// every other part's ([`registry_mut`](Self::registry_mut)).
    pub fn new() -> ServerMetrics {
        let mut registry = Registry::default();
        let [answered] = FAMILIES;
        let answers = Family::<StatusLabels, Counter>::default();
        answered.register(&mut registry, answers.clone());
        ServerMetrics {
            registry,
            answers,
            usual_answers: Default::default(),
            memory: MemoryFigures::default(),
        }
    }

    /// The registry every part of the server registers its families into,
    /// once, as the server is built.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    pub fn answered(&self, status: StatusCode) {
        let labels = || StatusLabels {
            status: status.as_u16(),
        };
        let usual = match status {
            StatusCode::OK => &self.usual_answers[0],
            StatusCode::TOO_MANY_REQUESTS => &self.usual_answers[1],
            // A u16 label: looking the series up allocates nothing.
            _ => {
                self.answers.get_or_create(&labels()).inc();
                return;
            }
        };
        usual
            .get_or_init(|| self.answers.get_or_create_owned(&labels()))
            .inc();
    }
}

/// The whole registry in the OpenMetrics text format. The figures a
/// collector cannot read by itself (the near-cache's and the embedded
/// store's, which the limiter owns) are brought up to date first.
pub(crate) fn respond(app: &App) -> Response<Body> {
    let text = match exposition(app) {
        Ok(text) => text,
        // Only a writer can fail, and a String does not: still, never a 500
        // with a stack trace.
        Err(error) => {
            return api::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("metrics: could not be encoded: {error}"),
            );
        }
    };
    let mut response = Response::new(Body::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// What /metrics serves now.
pub(crate) fn exposition(app: &App) -> Result<String, std::fmt::Error> {
    app.limiter.refresh_gauges();
    // A build without Memcached has one store: the pattern always matches.
    #[allow(irrefutable_let_patterns)]
    if let AnyStore::Memory(store) = app.limiter.store() {
        app.metrics.memory.refresh(store);
    }
    let mut text = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut text, &app.metrics.registry)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers' series as /metrics lists them.
    fn answers_listed(metrics: &ServerMetrics) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).unwrap();
        text.lines()
            .filter(|line| line.starts_with("slidegate_http_responses_total"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_status_is_listed_once_answered_and_counted_whichever_way() {
        let metrics = ServerMetrics::new();
        assert_eq!(answers_listed(&metrics), Vec::<String>::new());
        for status in [200, 429, 200, 404, 429, 200, 503] {
            metrics.answered(StatusCode::from_u16(status).unwrap());
        }
        let mut listed = answers_listed(&metrics);
        listed.sort();
        assert_eq!(
            listed,
            [
                r#"slidegate_http_responses_total{status="200"} 3"#,
                r#"slidegate_http_responses_total{status="404"} 1"#,
                r#"slidegate_http_responses_total{status="429"} 2"#,
                r#"slidegate_http_responses_total{status="503"} 1"#,
            ]
        );
    }
}
