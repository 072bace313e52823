//! Routes: method and path to handler, and the handlers themselves.

use std::net::SocketAddr;
use std::task::Poll;

use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_LENGTH, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};

use super::api::{self, Body, Call};
use super::{App, MAX_BODY_BYTES, READ_TIMEOUT};
use crate::config::check_deny_status;
use crate::limiter::{CheckError, Source};

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
    if let Some(refusal) = app.guard.refuse(&request) {
        return refusal;
    }
    let get = matches!(*request.method(), Method::GET | Method::HEAD);
    let post = request.method() == Method::POST;
    match request.uri().path() {
        "/v1/check" if post => decide(app, request, Operation::Check).await,
        "/v1/peek" if post => decide(app, request, Operation::Peek).await,
        "/v1/report" if post => decide(app, request, Operation::Report).await,
        "/v1/check" | "/v1/peek" | "/v1/report" => method_not_allowed("POST"),
        "/v1/auth" if get => forward_auth(app, &request, peer).await,
        path if get && path.starts_with("/v1/auth/") => {
            forward_auth_path(app, &request, peer, &path["/v1/auth/".len()..]).await
        }
        "/healthz" if get => api::json(StatusCode::OK, serde_json::json!({ "status": "ok" })),
        "/readyz" if get => ready(app).await,
        "/metrics" if get => super::metrics::respond(app),
        "/v1/auth" | "/healthz" | "/readyz" | "/metrics" => method_not_allowed("GET, HEAD"),
        path => api::error(StatusCode::NOT_FOUND, format!("no such endpoint: {path}")),
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

async fn decide(app: &App, request: Request<Incoming>, operation: Operation) -> Response<Body> {
    let body = match read_body(request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let live = app.live();
    let Call { key, served, cost } = match api::parse_call(&body, &live.policies) {
        Ok(call) => call,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    let (limiter, policy) = (&app.limiter, &served.policy);
    let outcome = match operation {
        Operation::Check => limiter.check(&key, policy, cost).await,
        Operation::Peek => limiter.peek(&key, policy, cost).await,
        Operation::Report => limiter.report(&key, policy, cost).await,
    };
    let decision = match outcome {
        Ok(decision) => decision,
        Err(error) => return check_error(error),
    };
    let status = match operation {
        Operation::Report => StatusCode::OK,
        Operation::Check | Operation::Peek if decision.allowed => StatusCode::OK,
        Operation::Check | Operation::Peek => StatusCode::TOO_MANY_REQUESTS,
    };
    api::respond(status, api::decision_json(&decision), |headers| {
        crate::headers::rate_limit_headers(&decision, &served.headers, headers)
    })
}

fn check_error(error: CheckError) -> Response<Body> {
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

/// The whole body, or the response that refuses it: 413 over 64 KiB (told
/// by Content-Length up front, or found while reading), 408 when it does
/// not arrive in time, 400 when the client breaks off.
async fn read_body(request: Request<Incoming>) -> Result<Bytes, Response<Body>> {
    let too_large = || {
        api::error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body: larger than {MAX_BODY_BYTES} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let reading = Limited::new(request.into_body(), MAX_BODY_BYTES).collect();
    let mut reading = std::pin::pin!(reading);
    // A small body has nearly always arrived with its headers: take it
    // without arming a timer, which would cost every request.
    let read = match std::future::poll_fn(|cx| Poll::Ready(reading.as_mut().poll(cx))).await {
        Poll::Ready(read) => Ok(read),
        Poll::Pending => tokio::time::timeout(READ_TIMEOUT, reading).await,
    };
    match read {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(error)) => Err(api::error(
            StatusCode::BAD_REQUEST,
            format!("body: could not be read: {error}"),
        )),
        Err(_) => Err(api::error(
            StatusCode::REQUEST_TIMEOUT,
            "body: not received in time",
        )),
    }
}

/// Forward-auth for proxies: `GET /v1/auth?policy=NAME[&cost=N][&deny_status=S]`.
/// Admitted: 200 with the rate-limit headers and an empty body.
async fn forward_auth(app: &App, request: &Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let live = app.live();
    let mut policy_name = None;
    let mut cost = 1;
    let mut deny_status = live.auth.deny_status;
    for (name, value) in form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "policy" => policy_name = Some(value.into_owned()),
            // The range is the limiter's to check, as for every caller.
            "cost" => match value.parse::<u64>() {
                Ok(parsed) => cost = parsed,
                Err(_) => {
                    let message = format!("cost: {value:?} is not a whole number");
                    return api::error(StatusCode::BAD_REQUEST, message);
                }
            },
            "deny_status" => match value
                .parse::<u16>()
                .map_err(|_| format!("must be a 4xx or 5xx status, got {value:?}"))
                .and_then(check_deny_status)
            {
                Ok(status) => deny_status = status,
                Err(message) => {
                    let message = format!("deny_status: {message}");
                    return api::error(StatusCode::BAD_REQUEST, message);
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
    let Some(policy_name) = policy_name else {
        return api::error(StatusCode::BAD_REQUEST, "policy: is required");
    };
    authorize(app, &live, &policy_name, cost, deny_status, request, peer).await
}

/// Forward-auth for proxies that append the client's path and query to the
/// one they are given (Envoy ext_authz's `path_prefix`):
/// `GET /v1/auth/NAME[/anything][?anything]`. The policy is the segment
/// after `/v1/auth/`; the rest and the query are the client's, ignored;
/// cost 1, the configured `deny_status`.
async fn forward_auth_path(
    app: &App,
    request: &Request<Incoming>,
    peer: SocketAddr,
    rest: &str,
) -> Response<Body> {
    let live = app.live();
    let policy_name = rest.split('/').next().unwrap_or_default();
    let deny_status = live.auth.deny_status;
    authorize(app, &live, policy_name, 1, deny_status, request, peer).await
}

async fn authorize(
    app: &App,
    live: &super::Live,
    policy_name: &str,
    cost: u64,
    deny_status: u16,
    request: &Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let served = match api::named_policy(policy_name, &live.policies) {
        Ok(served) => served,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    let key = match auth_key(request.headers(), peer, &live.auth.trusted_proxies) {
        Ok(key) => key,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    let decision = match app.limiter.check(&key, &served.policy, cost).await {
        Ok(decision) => decision,
        Err(error) => return check_error(error),
    };
    let (status, body) = if decision.allowed {
        (StatusCode::OK, Bytes::new())
    } else {
        // deny_status was checked to be 4xx or 5xx.
        let status = StatusCode::from_u16(deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        (status, api::decision_json(&decision))
    };
    api::respond(status, body, |headers| {
        crate::headers::rate_limit_headers(&decision, &served.headers, headers)
    })
}

/// Whose request it is: the `X-RateLimit-Key` the proxy set, else the first
/// `X-Forwarded-For` hop when the peer is a trusted proxy, else the peer.
fn auth_key(
    headers: &HeaderMap,
    peer: SocketAddr,
    trusted: &[crate::config::IpNet],
) -> Result<String, String> {
    if let Some(value) = headers.get("x-ratelimit-key") {
        let key = std::str::from_utf8(value.as_bytes())
            .map_err(|_| "X-RateLimit-Key: must be UTF-8".to_owned())?
            .trim();
        if key.is_empty() || key.len() > crate::limiter::MAX_KEY_BYTES {
            return Err("X-RateLimit-Key: must be 1 to 1024 bytes".to_owned());
        }
        return Ok(key.to_owned());
    }
    let peer_ip = peer.ip();
    if trusted.iter().any(|network| network.contains(peer_ip))
        && let Some(forwarded) = headers
            .get("x-forwarded-for")
            .and_then(|value| value.to_str().ok())
        && let Some(client) = forwarded
            .split(',')
            .next()
            .map(str::trim)
            .filter(|hop| !hop.is_empty())
    {
        if client.len() > crate::limiter::MAX_KEY_BYTES {
            return Err("X-Forwarded-For: first hop longer than 1024 bytes".to_owned());
        }
        return Ok(client.to_owned());
    }
    Ok(peer_ip.to_string())
}

async fn ready(app: &App) -> Response<Body> {
    let store = app.limiter.store();
    match app.limiter.ready().await {
        Ok(()) => api::json(
            StatusCode::OK,
            serde_json::json!({ "status": "ready", "store": crate::store::Store::kind(store) }),
        ),
        Err(error) => api::json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({
                "status": "unavailable",
                "store": crate::store::Store::kind(store),
                "error": error.to_string(),
            }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpNet;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    hyper::header::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn auth_key_prefers_the_header_then_trusted_forwarding_then_the_peer() {
        let peer: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        let trusted = [IpNet::parse("10.0.0.0/8").unwrap()];
        let forwarded = headers(&[("x-forwarded-for", "203.0.113.7, 10.0.0.5")]);
        assert_eq!(
            auth_key(&headers(&[("x-ratelimit-key", " key-1 ")]), peer, &trusted).unwrap(),
            "key-1"
        );
        assert_eq!(auth_key(&forwarded, peer, &trusted).unwrap(), "203.0.113.7");
        assert_eq!(
            auth_key(&forwarded, peer, &[]).unwrap(),
            "10.0.0.5",
            "untrusted peer"
        );
        assert_eq!(
            auth_key(&HeaderMap::new(), peer, &trusted).unwrap(),
            "10.0.0.5"
        );
        assert!(auth_key(&headers(&[("x-ratelimit-key", "")]), peer, &trusted).is_err());
    }
}
