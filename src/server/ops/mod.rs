//! Operator faces over the same [`Limiter`](crate::Limiter): a key reset
//! everywhere (`POST /v1/reset`), the most limited keys (`GET
//! /v1/limited`), what the status page shows (`GET /v1/status`, and the
//! page itself at `/`), and the OpenAPI document of the whole API (`GET
//! /openapi.json`).

mod on_call;
mod recent;
mod refusal_log;
mod top_refused;

pub(crate) use refusal_log::{FAMILIES, Face};
pub use top_refused::{DEFAULT_CAPACITY, Refused, TopRefused};

use std::sync::Mutex;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};

use super::api::{self, Body, Call};
use super::body::read_body;
use super::routes::{check_error, nodes_json};
use super::{App, Live};
use crate::clock::{Clock, SystemClock};
use crate::limiter::Decision;
use recent::{Kind, RecentDecisions};

/// `GET /v1/limited` answers 20 keys unless asked, and at most this many.
const MAX_TOP: usize = 1000;
const DEFAULT_TOP: usize = 20;

/// The OpenAPI 3.1 document of the HTTP API, kept in the repository.
const OPENAPI: &str = include_str!("../../../docs/openapi.json");
/// The status page: one HTML file with its script and style inline.
const STATUS_PAGE: &str = include_str!("status.html");

/// What this instance remembers of its decisions for operators.
pub(crate) struct Ops {
    top: Mutex<TopRefused>,
    recent: RecentDecisions,
    refusals: refusal_log::RefusalLog,
    on_call: on_call::OnCall,
}

impl Default for Ops {
    fn default() -> Ops {
        Ops {
            top: Mutex::new(TopRefused::new(DEFAULT_CAPACITY)),
            recent: RecentDecisions::default(),
            refusals: refusal_log::RefusalLog::default(),
            on_call: on_call::OnCall::default(),
        }
    }
}

impl App {
    /// One decision of a check or forward-auth, from whichever face: kept
    /// for the status page and `/v1/limited`, and a refusal logged at the
    /// rate `log.refusals_per_s` allows. The one place these decisions
    /// pass through, so no face logs its own.
    pub(crate) fn decided(&self, face: Face, policy: &str, key: &str, decision: &Decision) {
        self.ops.decided(policy, key, decision);
        if !decision.allowed {
            self.refused_logged(face, policy, key, Some(decision));
        }
    }

    /// A refusal for the refusal log only, at the rate `log.refusals_per_s`
    /// allows: the Envoy RLS face's, which `/v1/limited` and the status
    /// page do not list (the book says so: `/metrics` counts them per
    /// rule), but which answer "which limit refused this client" as well.
    pub(crate) fn refused_logged(
        &self,
        face: Face,
        policy: &str,
        key: &str,
        decision: Option<&Decision>,
    ) {
        self.ops.refusals.refused(face, policy, key, decision);
    }

    /// Log at most `per_second` refused decisions a second (0: none).
    pub fn log_refusals(&self, per_second: u32) {
        self.ops.refusals.set_per_second(per_second);
    }
}

impl Ops {
    /// Add the operators' families to `registry`: the refusal log's.
    pub(crate) fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        self.refusals.register(registry);
    }

    /// One decision of a check or forward-auth: counted for the page, and
    /// a refusal (or a shadow policy's would-be refusal) for the most
    /// limited keys.
    fn decided(&self, policy: &str, key: &str, decision: &Decision) {
        let now_ms = SystemClock.now_ms();
        let kind = Kind::of(decision);
        self.recent.count(policy, kind, now_ms);
        let record = match kind {
            Kind::Refused => TopRefused::record,
            Kind::Shadow => TopRefused::record_shadow,
            Kind::Allowed | Kind::Exempt => return,
        };
        record(
            &mut self
                .top
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            policy,
            key,
            now_ms,
        );
    }

    /// A policy a reload removed: its last minute is forgotten.
    pub fn forget_policy(&self, policy: &str) {
        self.recent.forget(policy);
    }

    fn top(&self, top: usize) -> Vec<serde_json::Value> {
        let now_ms = SystemClock.now_ms();
        let found = self
            .top
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .top(top, now_ms);
        found
            .into_iter()
            .map(|refused| {
                serde_json::json!({
                    "key": refused.key,
                    "policy": refused.policy,
                    "refused": refused.refused,
                    "shadow": refused.shadow,
                    "last_refused_ms_ago": now_ms.saturating_sub(refused.last_refused_ms),
                })
            })
            .collect()
    }
}

/// `POST /v1/reset`: the key's counters of those limits removed from the
/// store; the next check starts from zero.
pub(super) async fn reset(app: &App, live: &Live, request: Request<Incoming>) -> Response<Body> {
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Call { key, served, cost } = match api::parse_call(&body, &live.policies, live.max_counters)
    {
        Ok(call) => call,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    // The body of a check: a cost a check would refuse is refused here
    // too, though a reset does not use it, so one body means one thing on
    // every route.
    if let Err(error) = crate::limiter::valid_cost(cost) {
        return check_error(error);
    }
    match app.limiter.reset(&key, &served.policy).await {
        Ok(removed) => {
            tracing::info!(
                policy = served.policy.scope(),
                counters = removed,
                "key reset"
            );
            api::json(
                StatusCode::OK,
                serde_json::json!({
                    "reset": true,
                    "key": key,
                    "policy": served.policy.scope(),
                    "counters_removed": removed,
                }),
            )
        }
        Err(error) => check_error(error),
    }
}

/// `GET /v1/limited?top=N`.
pub(super) fn limited(app: &App, request: &Request<Incoming>) -> Response<Body> {
    let mut top = DEFAULT_TOP;
    for (name, value) in form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "top" => match value.parse::<usize>() {
                Ok(n @ 1..=MAX_TOP) => top = n,
                _ => {
                    return api::error(
                        StatusCode::BAD_REQUEST,
                        format!("top: must be a whole number from 1 to {MAX_TOP}, got {value:?}"),
                    );
                }
            },
            other => {
                return api::error(
                    StatusCode::BAD_REQUEST,
                    format!("{other}: unknown query parameter"),
                );
            }
        }
    }
    api::json(
        StatusCode::OK,
        serde_json::json!({ "keys": app.ops.top(top) }),
    )
}

/// `GET /v1/status`: what the status page shows: this instance, its
/// failure mode and, with the store down, what it does now.
pub(super) async fn status(app: &App, live: &Live) -> Response<Body> {
    let now_ms = SystemClock.now_ms();
    let mut names: Vec<&String> = live.policies.keys().collect();
    names.sort_unstable();
    let policies: Vec<serde_json::Value> = names
        .into_iter()
        .map(|name| {
            let policy = &live.policies[name].policy;
            let limits: Vec<serde_json::Value> = policy
                .limits()
                .iter()
                .map(|limit| {
                    serde_json::json!({
                        "limit": limit.limit(),
                        "window_ms": limit.window().window_ms(),
                        "precision": limit.window().precision(),
                    })
                })
                .collect();
            serde_json::json!({
                "name": name,
                "limits": limits,
                "shadow": policy.is_shadow(),
                "last_minute": app.ops.recent.minute(name, now_ms),
            })
        })
        .collect();
    let readiness = app.limiter.readiness().await;
    let on_call = &app.ops.on_call;
    let mode = app.limiter.failure_mode();
    let failing = readiness.result.is_err().then(|| on_call::failing(mode));
    let store = serde_json::json!({
        "kind": crate::store::Store::kind(app.limiter.store()),
        "ready": readiness.result.is_ok(),
        // Ready with a node down: its keys are counted by their other
        // replicas (`memcached.replicas`), or, without, by no node.
        "degraded": readiness.result.is_ok() && readiness.nodes.iter().any(|node| !node.up),
        "nodes": nodes_json(&readiness.nodes),
        "last_error": on_call::last_error_json(app.limiter.metrics_handles().last_store_error()),
    });
    api::json(
        StatusCode::OK,
        serde_json::json!({
            "instance": on_call.instance(),
            "version": on_call::VERSION,
            "uptime_s": on_call.uptime_s(),
            "failure_mode": on_call::mode_name(mode),
            "failing": failing,
            "policies": policies,
            "store": store,
            "limited": app.ops.top(DEFAULT_TOP),
        }),
    )
}

/// `GET /openapi.json`.
pub(super) fn openapi() -> Response<Body> {
    api::respond(
        StatusCode::OK,
        Bytes::from_static(OPENAPI.as_bytes()),
        |_| {},
    )
}

/// `GET /`: the status page. It reads `/v1/status` itself, every few
/// seconds, with the token given in the page's address (`#token=...`)
/// when the API needs one: the page holds no data, so it is open.
pub(super) fn page() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(STATUS_PAGE.as_bytes())));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}
