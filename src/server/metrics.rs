//! `GET /metrics`: one `prometheus-client` registry holding the limiter's
//! families, the HTTP answers, the reloads and (with RLS) the RLS counters,
//! encoded as OpenMetrics text, which Prometheus negotiates and parses.

use std::sync::OnceLock;

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
    /// Every key that applies live is in force.
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
    /// The series of 200 and 429, nearly every answer's, taken from
    /// `answers` on the first such answer and counted directly after:
    /// the family's `get_or_create` takes its read lock (a count both
    /// cores write) and hashes the label on every answer. Taken on first
    /// use, not made up front, so that /metrics lists a status only once
    /// it was answered, as it always did.
    usual_answers: [OnceLock<Counter>; 2],
    reloads: [Counter; 2],
    restart_pending: Gauge,
    refusals_not_logged: Counter,
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
            "1 while the last reloaded file differs from the running process in a key that only a restart applies (the log names each)",
            restart_pending.clone(),
        );
        let refusals_not_logged = Counter::default();
        registry.register(
            "slidegate_refusals_not_logged",
            "Refused decisions not logged because log.refusals_per_s were already logged that second",
            refusals_not_logged.clone(),
        );
        ServerMetrics {
            registry,
            answers,
            usual_answers: Default::default(),
            reloads,
            restart_pending,
            refusals_not_logged,
        }
    }

    /// Room for collectors read at each scrape: the store's topology, and
    /// the RLS counters, which only `App::with_rls` adds.
    #[cfg(any(feature = "grpc", feature = "memcached"))]
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Refusals past `log.refusals_per_s` in their second.
    pub fn refusals_not_logged(&self) -> &Counter {
        &self.refusals_not_logged
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

    pub fn reloaded(&self, result: ReloadResult, restart_pending: bool) {
        self.reloads[result as usize].inc();
        if result == ReloadResult::ok {
            self.restart_pending.set(i64::from(restart_pending));
        }
    }
}

/// The whole registry in the OpenMetrics text format, with the guards'
/// figures (which belong to the `App` that owns the registry) encoded by
/// the same crate and placed before the closing `# EOF`.
pub(crate) fn respond(app: &App) -> Response<Body> {
    app.limiter.refresh_gauges();
    let mut text = String::with_capacity(8 * 1024);
    let mut guards = Registry::default();
    guards.register_collector(Box::new(GuardFigures(super::guard::snapshot(app))));
    let mut guards_text = String::with_capacity(1024);
    let encoded = prometheus_client::encoding::text::encode(&mut text, &app.metrics.registry)
        .and_then(|()| prometheus_client::encoding::text::encode(&mut guards_text, &guards));
    if let Err(error) = encoded {
        // Only a writer can fail, and a String does not: still, never a 500
        // with a stack trace.
        return api::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics: could not be encoded: {error}"),
        );
    }
    const EOF: &str = "# EOF\n";
    if let Some(body) = text.strip_suffix(EOF) {
        text.truncate(body.len());
    }
    text.push_str(&guards_text);
    let mut response = Response::new(Body::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

#[derive(Debug)]
struct GuardFigures(Vec<super::guard::Figure>);

impl prometheus_client::collector::Collector for GuardFigures {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;

        for figure in &self.0 {
            let kind = if figure.counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            let metric = encoder.encode_descriptor(figure.name, figure.help, None, kind)?;
            if figure.counter {
                ConstCounter::new(figure.value.max(0) as u64).encode(metric)?;
            } else {
                ConstGauge::new(figure.value).encode(metric)?;
            }
        }
        Ok(())
    }
}

/// The Memcached topology, read at each scrape: nodes known, the cluster
/// config version, discovery polls, TLS handshake failures, and each node's
/// live connections. The node label comes from the configuration or the
/// cluster config, never from requests.
#[cfg(feature = "memcached")]
#[derive(Debug)]
pub(crate) struct TopologyCollector(pub crate::store::TopologySource);

#[cfg(feature = "memcached")]
impl prometheus_client::collector::Collector for TopologyCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;

        let snapshot = self.0.snapshot();
        let gauge = |value: usize| ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
        gauge(snapshot.nodes.len()).encode(encoder.encode_descriptor(
            "slidegate_memcached_nodes",
            "Memcached nodes in use (from the configuration or from discovery).",
            None,
            MetricType::Gauge,
        )?)?;
        if let Some(version) = snapshot.version {
            ConstGauge::new(i64::try_from(version).unwrap_or(i64::MAX)).encode(
                encoder.encode_descriptor(
                    "slidegate_memcached_config_version",
                    "Version of the cluster config in use (Auto Discovery).",
                    None,
                    MetricType::Gauge,
                )?,
            )?;
        }
        let mut polls = encoder.encode_descriptor(
            "slidegate_memcached_discovery_polls",
            "Auto Discovery polls by result: applied, ignored (not newer, or no node), malformed, failed.",
            None,
            MetricType::Counter,
        )?;
        for (result, count) in &snapshot.polls {
            ConstCounter::new(*count).encode(polls.encode_family(&[("result", *result)])?)?;
        }
        ConstCounter::new(snapshot.tls_failures).encode(encoder.encode_descriptor(
            "slidegate_memcached_tls_handshake_failures",
            "TLS handshakes with Memcached that failed (certificate, name, protocol).",
            None,
            MetricType::Counter,
        )?)?;
        let mut connections = encoder.encode_descriptor(
            "slidegate_memcached_connections",
            "Live connections per Memcached node.",
            None,
            MetricType::Gauge,
        )?;
        for node in &snapshot.nodes {
            gauge(node.live())
                .encode(connections.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut states = encoder.encode_descriptor(
            "slidegate_store_connections",
            "Connections per Memcached node by state: ready, overdue (a reply later than the call \
             timeout: it takes no new requests), down (being dialled), draining (given up as \
             stalled, still reading its late replies to take back what they added).",
            None,
            MetricType::Gauge,
        )?;
        for node in &snapshot.nodes {
            let counts = node.states;
            for (state, count) in [
                ("ready", counts.ready),
                ("overdue", counts.overdue),
                ("down", counts.down),
                ("draining", counts.draining),
            ] {
                gauge(count).encode(
                    states.encode_family(&[("node", node.name.as_str()), ("state", state)])?,
                )?;
            }
        }
        let mut redials = encoder.encode_descriptor(
            "slidegate_store_redials",
            "Connections to a Memcached node dialled again, by reason: failed (the connection or a \
             dial failed), stalled (a reply later than the stall bound), overdue (an extra \
             connection while all were overdue), moved (the node's address changed).",
            None,
            MetricType::Counter,
        )?;
        for node in &snapshot.nodes {
            for (reason, count) in &node.redials {
                ConstCounter::new(*count).encode(
                    redials.encode_family(&[("node", node.name.as_str()), ("reason", *reason)])?,
                )?;
            }
        }
        let mut owed = encoder.encode_descriptor(
            "slidegate_store_draining_requests",
            "Requests written on draining connections whose replies have not come yet.",
            None,
            MetricType::Gauge,
        )?;
        for node in &snapshot.nodes {
            gauge(node.states.draining_owed)
                .encode(owed.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut late = encoder.encode_descriptor(
            "slidegate_store_late_take_backs",
            "Counted requests taken back from a reply that came after their connection was given \
             up as stalled: nobody was told they counted.",
            None,
            MetricType::Counter,
        )?;
        for node in &snapshot.nodes {
            ConstCounter::new(node.late_take_backs)
                .encode(late.encode_family(&[("node", node.name.as_str())])?)?;
        }
        let mut lost = encoder.encode_descriptor(
            "slidegate_store_lost_replies",
            "Counted requests whose reply never came (their connection failed, or its drain ran \
             out): what they added, if applied, stays counted until its bucket expires.",
            None,
            MetricType::Counter,
        )?;
        for node in &snapshot.nodes {
            ConstCounter::new(node.lost_replies)
                .encode(lost.encode_family(&[("node", node.name.as_str())])?)?;
        }
        Ok(())
    }
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
        let metrics = ServerMetrics::new(&Metrics::default());
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
