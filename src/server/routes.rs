//! Routes: one table of what the service answers (method, path, handler,
//! and who may call it), and the handlers of the JSON API.

use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::header::{ALLOW, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::answer;
use super::api::{self, Body, Call};
use super::body::read_body;
use super::forward_auth::{forward_auth, forward_auth_path};
use super::ops::{self, Face};
use super::{App, Live};
use crate::limiter::{CheckError, Source};

/// Who may call a route when `server.api_tokens` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only with a valid token: the route counts, or reads counts.
    Token,
    /// With a valid token when `server.metrics_need_token` is true.
    TokenIfMetricsNeedIt,
    /// Anyone: probes must not need a secret.
    Open,
}

/// The paths a route answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutePath {
    Exact(&'static str),
    /// This prefix and anything after it.
    Prefix(&'static str),
}

impl RoutePath {
    fn matches(self, path: &str) -> bool {
        match self {
            RoutePath::Exact(exact) => path == exact,
            RoutePath::Prefix(prefix) => path.starts_with(prefix),
        }
    }
}

/// The methods a route answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Methods {
    Post,
    /// GET, and HEAD (the same answer, without its body).
    Get,
    /// Whatever method the caller sends, each answered as GET (HEAD without
    /// the body): forward-auth, whose proxy may send its client's method
    /// (Envoy's ext_authz does), and a 405 there would refuse the client.
    Any,
}

impl Methods {
    fn admit(self, method: &Method) -> bool {
        match self {
            Methods::Post => method == Method::POST,
            Methods::Get => matches!(*method, Method::GET | Method::HEAD),
            Methods::Any => true,
        }
    }

    /// The value of `Allow` on a 405 (never sent for [`Methods::Any`]).
    pub fn allow(self) -> &'static str {
        match self {
            Methods::Post => "POST",
            Methods::Get => "GET, HEAD",
            Methods::Any => "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
        }
    }
}

/// What answers a route; [`handle`] runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handler {
    Check,
    Peek,
    Report,
    Auth,
    AuthPath,
    Health,
    Ready,
    Metrics,
    Reset,
    Limited,
    Status,
    OpenApi,
    Page,
}

/// One route of the service.
#[derive(Debug)]
pub struct Route {
    pub methods: Methods,
    pub path: RoutePath,
    handler: Handler,
    pub access: Access,
}

const fn route(methods: Methods, path: RoutePath, handler: Handler, access: Access) -> Route {
    Route {
        methods,
        path,
        handler,
        access,
    }
}

/// Everything the service answers, and who may call it. The guard is read
/// from here, so a route cannot be added without saying who may call it.
pub const ROUTES: &[Route] = {
    use Access::{Open, Token, TokenIfMetricsNeedIt};
    use Methods::{Any, Get, Post};
    use RoutePath::{Exact, Prefix};
    &[
        route(Post, Exact("/v1/check"), Handler::Check, Token),
        route(Post, Exact("/v1/peek"), Handler::Peek, Token),
        route(Post, Exact("/v1/report"), Handler::Report, Token),
        route(Any, Exact("/v1/auth"), Handler::Auth, Token),
        route(Any, Prefix("/v1/auth/"), Handler::AuthPath, Token),
        route(Get, Exact("/healthz"), Handler::Health, Open),
        route(Get, Exact("/readyz"), Handler::Ready, Open),
        route(
            Get,
            Exact("/metrics"),
            Handler::Metrics,
            TokenIfMetricsNeedIt,
        ),
        route(Post, Exact("/v1/reset"), Handler::Reset, Token),
        route(Get, Exact("/v1/limited"), Handler::Limited, Token),
        route(Get, Exact("/v1/status"), Handler::Status, Token),
        // The contract and the page hold no data: the page asks
        // /v1/status, with a token when one is needed.
        route(Get, Exact("/openapi.json"), Handler::OpenApi, Open),
        route(Get, Exact("/"), Handler::Page, Open),
    ]
};

#[derive(Clone, Copy)]
enum Operation {
    Check,
    Peek,
    Report,
}

pub(crate) async fn handle(
    app: &App,
    request: Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let path = request.uri().path();
    let Some(route) = ROUTES.iter().find(|route| route.path.matches(path)) else {
        return api::error(StatusCode::NOT_FOUND, format!("no such endpoint: {path}"));
    };
    // Taken once: the call is checked and decided under one configuration,
    // whatever a reload puts in force meanwhile.
    let live = app.live();
    // Before the method: a caller without a token learns nothing of a
    // guarded route, not even which methods it takes.
    if let Some(refusal) = app.guard.refuse(&live.tokens, &request, route.access) {
        return refusal;
    }
    if !route.methods.admit(request.method()) {
        return method_not_allowed(route.methods.allow());
    }
    match route.handler {
        Handler::Check => decide(app, &live, request, Operation::Check).await,
        Handler::Peek => decide(app, &live, request, Operation::Peek).await,
        Handler::Report => decide(app, &live, request, Operation::Report).await,
        Handler::Auth => forward_auth(app, &live, &request, peer).await,
        Handler::AuthPath => {
            let rest = request.uri().path().get("/v1/auth/".len()..);
            forward_auth_path(app, &live, &request, peer, rest.unwrap_or_default()).await
        }
        Handler::Health => api::json(StatusCode::OK, serde_json::json!({ "status": "ok" })),
        Handler::Ready => ready(app).await,
        Handler::Metrics => super::metrics::respond(app),
        Handler::Reset => ops::reset(app, &live, request).await,
        Handler::Limited => ops::limited(app, &request),
        Handler::Status => ops::status(app, &live).await,
        Handler::OpenApi => ops::openapi(),
        Handler::Page => ops::page(),
    }
}

fn method_not_allowed(allowed: &'static str) -> Response<Body> {
    let mut response = api::error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("method not allowed; use {allowed}"),
    );
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allowed));
    response
}

async fn decide(
    app: &App,
    live: &Live,
    request: Request<Incoming>,
    operation: Operation,
) -> Response<Body> {
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Call { key, served, cost } = match api::parse_call(&body, &live.policies, live.max_counters)
    {
        Ok(call) => call,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    let (limiter, policy) = (&app.limiter, &served.policy);
    if live.exemptions.exempts_key(policy.scope(), &key) {
        let decision = match limiter.exempt(&key, policy, cost) {
            Ok(decision) => decision,
            Err(error) => return check_error(error),
        };
        // As for any key: the status page counts the decisions of checks.
        if let Operation::Check = operation {
            app.decided(Face::Check, policy.scope(), &key, &decision);
        }
        // No RateLimit headers: the limits do not apply to this key.
        return api::respond(StatusCode::OK, answer::decision_json(&decision), |_| {});
    }
    let outcome = match operation {
        Operation::Check => limiter.check(&key, policy, cost).await,
        Operation::Peek => limiter.peek(&key, policy, cost).await,
        Operation::Report => limiter.report(&key, policy, cost).await,
    };
    let decision = match outcome {
        Ok(decision) => decision,
        Err(error) => return check_error(error),
    };
    if let Operation::Check = operation {
        app.decided(Face::Check, policy.scope(), &key, &decision);
    }
    let status = match operation {
        Operation::Report => StatusCode::OK,
        Operation::Check | Operation::Peek if decision.allowed => StatusCode::OK,
        Operation::Check | Operation::Peek => StatusCode::TOO_MANY_REQUESTS,
    };
    api::respond(status, answer::decision_json(&decision), |headers| {
        crate::headers::rate_limit_headers(&decision, &served.headers, headers)
    })
}

pub(super) fn check_error(error: CheckError) -> Response<Body> {
    match error {
        CheckError::StoreUnavailable(_) => api::json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({
                "error": error.to_string(),
                "allowed": false,
                "source": Source::Fallback.as_str(),
            }),
        ),
        CheckError::InvalidKey(_) | CheckError::InvalidCost(_) | CheckError::InvalidPolicy(_) => {
            api::error(StatusCode::BAD_REQUEST, error.to_string())
        }
    }
}

/// Ready while the store can decide for some keys: with several Memcached
/// nodes, while any answers (a lost node costs only its own keys; taking
/// every replica out of the load balancer would cost all of them, and
/// under `deny` too, since every replica shares the same nodes). The body
/// names each node and whether it answered. Unready, at once, once a
/// shutdown has begun (`shutdown.rs`).
async fn ready(app: &App) -> Response<Body> {
    let store = crate::store::Store::kind(app.limiter.store());
    if app.leaving.begun() {
        // Not asking the store: whatever it says, this instance is going.
        return api::json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({
                "status": "unavailable",
                "store": store,
                "error": "shutting down",
            }),
        );
    }
    let readiness = app.limiter.readiness().await;
    let (status, mut body) = match &readiness.result {
        Ok(()) => (
            StatusCode::OK,
            serde_json::json!({ "status": "ready", "store": store }),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({
                "status": "unavailable",
                "store": store,
                "error": error.to_string(),
            }),
        ),
    };
    if !readiness.nodes.is_empty() {
        body["nodes"] = nodes_json(&readiness.nodes);
    }
    api::json(status, body)
}

/// Each node and whether it answered, as `/readyz` and `/v1/status` name them.
pub(super) fn nodes_json(nodes: &[crate::store::NodeReadiness]) -> serde_json::Value {
    nodes
        .iter()
        .map(|node| {
            let state = if node.up { "up" } else { "down" };
            serde_json::json!({ "node": node.node, "state": state })
        })
        .collect()
}
