//! Forward-auth for proxies (`GET /v1/auth?policy=...` and the path form
//! `GET /v1/auth/NAME/...`): whose request it is, and the answer a proxy
//! passes on.

use std::net::{IpAddr, SocketAddr};

use hyper::body::{Bytes, Incoming};
use hyper::{HeaderMap, Request, Response, StatusCode};

use super::answer;
use super::api::{self, Body};
use super::ops::Face;
use super::routes::check_error;
use super::{App, Live};
use crate::config::check_deny_status;

/// Forward-auth for proxies: `GET /v1/auth?policy=NAME[&cost=N][&deny_status=S]`.
/// Admitted: 200 with the rate-limit headers and an empty body.
pub(super) async fn forward_auth(
    app: &App,
    live: &Live,
    request: &Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let mut policy_name = None;
    let mut cost = 1;
    let mut deny_status = live.auth.deny_status;
    let mut seen = [false; 3];
    for (name, value) in form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes()) {
        // Given twice, which one counts would depend on the order: refused.
        if let Some(known) = ["policy", "cost", "deny_status"]
            .into_iter()
            .position(|known| known == name)
            && std::mem::replace(&mut seen[known], true)
        {
            let message = format!("{name}: given twice");
            return api::error(StatusCode::BAD_REQUEST, message);
        }
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
    authorize(app, live, &policy_name, cost, deny_status, request, peer).await
}

/// Forward-auth for proxies that append the client's path and query to the
/// one they are given (Envoy ext_authz's `path_prefix`):
/// `GET /v1/auth/NAME[/anything][?anything]`. The policy is the segment
/// after `/v1/auth/`; the rest and the query are the client's, ignored;
/// cost 1, the configured `deny_status`.
pub(super) async fn forward_auth_path(
    app: &App,
    live: &Live,
    request: &Request<Incoming>,
    peer: SocketAddr,
    rest: &str,
) -> Response<Body> {
    let policy_name = rest.split('/').next().unwrap_or_default();
    let deny_status = live.auth.deny_status;
    authorize(app, live, policy_name, 1, deny_status, request, peer).await
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
    let trusted = &live.auth.trusted_proxies;
    let key = match auth_key(request.headers(), peer, trusted) {
        Ok(key) => key,
        Err(message) => return api::error(StatusCode::BAD_REQUEST, message),
    };
    let policy = &served.policy;
    let exempt = live.exemptions.exempts_key(policy.scope(), &key)
        || client_address(request.headers(), peer, trusted)
            .is_some_and(|address| live.exemptions.exempts_address(address));
    if exempt {
        let decision = match app.limiter.exempt(&key, policy, cost) {
            Ok(decision) => decision,
            Err(error) => return check_error(error),
        };
        app.decided(Face::ForwardAuth, policy.scope(), &key, &decision);
        return api::respond(StatusCode::OK, Bytes::new(), |_| {});
    }
    let decision = match app.limiter.check(&key, policy, cost).await {
        Ok(decision) => decision,
        Err(error) => return check_error(error),
    };
    app.decided(Face::ForwardAuth, policy.scope(), &key, &decision);
    let (status, body) = if decision.allowed {
        (StatusCode::OK, Bytes::new())
    } else {
        // deny_status was checked to be 4xx or 5xx.
        let status = StatusCode::from_u16(deny_status).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        (status, answer::decision_json(&decision))
    };
    api::respond(status, body, |headers| {
        crate::headers::rate_limit_headers(&decision, &served.headers, headers)
    })
}

/// Whose request it is: the `X-RateLimit-Key` the proxy set, else, when the
/// peer is a trusted proxy, the rightmost `X-Forwarded-For` hop that is not
/// one (each proxy appends the address it got the request from, so the
/// hops on the left of the first untrusted one are the client's to write),
/// else the peer.
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
    let is_trusted = |ip: IpAddr| trusted.iter().any(|network| network.contains(ip));
    if !is_trusted(peer.ip()) {
        return Ok(peer.ip().to_string());
    }
    let Some(client) = forwarded_client(headers, is_trusted) else {
        return Ok(peer.ip().to_string());
    };
    if client.len() > crate::limiter::MAX_KEY_BYTES {
        return Err("X-Forwarded-For: the client's hop is longer than 1024 bytes".to_owned());
    }
    // An address is the key without its port (a proxy may append the
    // client's source port, which the client picks per connection), as
    // `client_address` reads it for exemptions; any other hop as written.
    Ok(match hop_address(client) {
        Some(address) => address.to_string(),
        None => String::from_utf8_lossy(client).into_owned(),
    })
}

/// The client's address, as [`auth_key`] finds it without `X-RateLimit-Key`
/// (`None` when the client's hop is not an address): what
/// `auth.exempt_addresses` is matched against, so that a client behind a
/// trusted proxy is known by its own address, and cannot write it.
fn client_address(
    headers: &HeaderMap,
    peer: SocketAddr,
    trusted: &[crate::config::IpNet],
) -> Option<IpAddr> {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|network| network.contains(ip));
    if !is_trusted(peer.ip()) {
        return Some(peer.ip());
    }
    match forwarded_client(headers, is_trusted) {
        Some(hop) => hop_address(hop),
        None => Some(peer.ip()),
    }
}

/// The rightmost hop of every `X-Forwarded-For` line (in order, as one
/// list) that `is_trusted` does not take for a proxy; when all are
/// proxies, the leftmost. `None` without any hop.
fn forwarded_client(headers: &HeaderMap, is_trusted: impl Fn(IpAddr) -> bool) -> Option<&[u8]> {
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&byte| byte == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|hop| !hop.is_empty());
    let mut farthest_proxy = None;
    for hop in hops {
        match hop_address(hop) {
            Some(ip) if is_trusted(ip) => farthest_proxy = Some(hop),
            _ => return Some(hop),
        }
    }
    farthest_proxy
}

/// A hop's address: `192.0.2.1`, `2001:db8::1`, or with a port
/// (`192.0.2.1:443`, `[2001:db8::1]:443`).
fn hop_address(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?;
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|addr| addr.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IpNet;
    use hyper::header::HeaderValue;

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

    #[test]
    fn the_client_is_the_rightmost_hop_that_is_not_a_trusted_proxy() {
        let peer: SocketAddr = "10.0.0.5:4000".parse().unwrap();
        let trusted = [IpNet::parse("10.0.0.0/8").unwrap()];
        let key = |forwarded: &'static str| {
            auth_key(&headers(&[("x-forwarded-for", forwarded)]), peer, &trusted).unwrap()
        };
        assert_eq!(key("192.0.2.66, 203.0.113.7"), "203.0.113.7");
        assert_eq!(
            key("192.0.2.66, 203.0.113.7, 10.0.0.9 ,10.1.1.1"),
            "203.0.113.7"
        );
        // A proxy that appends the client's port: the key is the address
        // alone, or the client would choose a fresh key with each source
        // port it dials from.
        assert_eq!(key("203.0.113.7:5123, 10.0.0.9:80"), "203.0.113.7");
        assert_eq!(key("203.0.113.7:5124, 10.0.0.9:80"), "203.0.113.7");
        assert_eq!(key("[2001:db8::7]:5123, 10.0.0.9"), "2001:db8::7");
        assert_eq!(key("2001:db8::7, 10.0.0.9"), "2001:db8::7");
        assert_eq!(key("not-an-address, 10.0.0.9"), "not-an-address");
        assert_eq!(
            key("10.0.0.8, 10.0.0.9"),
            "10.0.0.8",
            "all proxies: the farthest"
        );
        assert_eq!(key(" , "), "10.0.0.5", "no hop: the peer");
        // Two header lines are one list, the later line on the right.
        let mut two = headers(&[("x-forwarded-for", "192.0.2.66")]);
        two.append(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.7, 10.0.0.9"),
        );
        assert_eq!(auth_key(&two, peer, &trusted).unwrap(), "203.0.113.7");
        let long = format!("{}, 10.0.0.9", "a".repeat(1025));
        let mut too_long = HeaderMap::new();
        too_long.insert("x-forwarded-for", HeaderValue::from_str(&long).unwrap());
        assert!(auth_key(&too_long, peer, &trusted).is_err());
    }
}
