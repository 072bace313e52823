//! What guards the listener: the connection cap, the API token, and the
//! counters they keep, registered into /metrics by [`Guard::register`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hyper::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Request, Response, StatusCode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};

use super::api::{self, Body};
use crate::config::{ApiTokens, ServerGuard};
use crate::metrics::catalogue::{Described, Kind};

/// The pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

pub(crate) struct Guard {
    /// The cap on connections; a reload changes it live (connections over a
    /// lowered cap are not closed, new ones wait for places).
    max_connections: AtomicUsize,
    /// How long a connection may be quiet before it is closed: see
    /// [`Guard::quiet_timeout`].
    quiet_timeout: Duration,
    /// Connections holding a place: a gauge of /metrics, and the count
    /// the cap is taken against, one atomic for both.
    open: Gauge,
    refused: Counter,
    unauthorized: Counter,
}

/// The guard's families, in the order [`Guard::register`] adds them.
pub(crate) const FAMILIES: &[Described; 3] = &[
    Described {
        name: "slidegate_connections_open",
        kind: Kind::Gauge,
        labels: &[],
        help: "Connections being served (HTTP and RLS).",
    },
    Described {
        name: "slidegate_connections_refused",
        kind: Kind::Counter,
        labels: &[],
        help: "Connections (HTTP and RLS) closed at once because max_connections were open.",
    },
    Described {
        name: "slidegate_unauthorized",
        kind: Kind::Counter,
        labels: &[],
        help: "Requests refused (HTTP 401, gRPC UNAUTHENTICATED) for want of a valid API token.",
    },
];

/// A served connection's place under the cap, given back when it ends.
pub(crate) struct Permit(Gauge);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The token settings a reload replaces. They are part of the live
/// configuration ([`super::live::Live`]), swapped with the policies they
/// guard: a call is checked and decided under one configuration, so a
/// revoked token is refused from the next call on, and never decided
/// under the policies of the reload that revoked it.
#[derive(Clone, Default)]
pub(crate) struct TokenSettings {
    api_tokens: ApiTokens,
    metrics_need_token: bool,
}

impl TokenSettings {
    pub(crate) fn of(settings: &ServerGuard) -> TokenSettings {
        TokenSettings {
            api_tokens: settings.api_tokens.clone(),
            metrics_need_token: settings.metrics_need_token,
        }
    }
}

impl Guard {
    pub(crate) fn new(settings: &ServerGuard) -> Guard {
        Guard {
            max_connections: AtomicUsize::new(settings.max_connections),
            quiet_timeout: settings.quiet_timeout,
            open: Gauge::default(),
            refused: Counter::default(),
            unauthorized: Counter::default(),
        }
    }

    /// Take `settings` instead, counts kept: for an app being built.
    pub(crate) fn configure(&mut self, settings: &ServerGuard) {
        self.apply(settings);
        self.quiet_timeout = settings.quiet_timeout;
    }

    /// Add the guard's families to `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        let [open, refused, unauthorized] = FAMILIES;
        open.register(registry, self.open.clone());
        refused.register(registry, self.refused.clone());
        unauthorized.register(registry, self.unauthorized.clone());
    }

    /// A place for a new connection, or `None` (counted) past the cap. One
    /// atomic step: the HTTP and the RLS listeners take places from the
    /// same cap.
    pub(crate) fn admit(&self) -> Option<Permit> {
        let max = self.max_connections.load(Ordering::Relaxed);
        let max = i64::try_from(max).unwrap_or(i64::MAX);
        let taken = self
            .open
            .inner()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                (open < max).then_some(open + 1)
            });
        if taken.is_err() {
            self.refused.inc();
            return None;
        }
        Some(Permit(self.open.clone()))
    }

    /// The next connection `listener` accepts under the cap, with its
    /// place. Past the cap a connection is closed at once (counted): it
    /// costs nothing more, and the ones being served keep their memory and
    /// their speed. A failed accept (out of file descriptors, say) backs
    /// off instead of spinning.
    pub(crate) async fn accept(&self, listener: &TcpListener) -> (TcpStream, SocketAddr, Permit) {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    if let Some(permit) = self.admit() {
                        let _ = stream.set_nodelay(true);
                        return (stream, peer, permit);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
    }

    /// Connections closed at once because the cap was reached.
    pub fn refused_connections(&self) -> u64 {
        self.refused.get()
    }

    /// Connections holding a place under the cap now.
    pub fn open_connections(&self) -> usize {
        usize::try_from(self.open.get()).unwrap_or(0)
    }

    /// How long a connection may be quiet before it is closed: an HTTP/1
    /// one that starts no request (`served`), a gRPC one that sends nothing
    /// (`grpc::capped`).
    pub(crate) fn quiet_timeout(&self) -> Duration {
        self.quiet_timeout
    }

    /// Put a reloaded configuration's cap in force (its tokens are put in
    /// force with its policies, by `App::apply_config`). The quiet timeout
    /// is not a setting of the file.
    pub(crate) fn apply(&self, settings: &ServerGuard) {
        self.max_connections
            .store(settings.max_connections, Ordering::Relaxed);
    }

    /// The 401 for a request that needs a token and has no valid one under
    /// `tokens` (those of the configuration the request is decided under);
    /// `None` lets it through. No allocation when it passes.
    /// Who may call is the route's to say (`access`, from the route
    /// table), so no path can be left out here.
    pub(crate) fn refuse<B>(
        &self,
        tokens: &TokenSettings,
        request: &Request<B>,
        access: super::routes::Access,
    ) -> Option<Response<Body>> {
        use super::routes::Access;
        let needs_token = match access {
            Access::Token => true,
            Access::TokenIfMetricsNeedIt => tokens.metrics_need_token,
            Access::Open => false,
        };
        if !needs_token {
            return None;
        }
        // The header is looked up only when tokens are set.
        let authorization = || {
            request
                .headers()
                .get(AUTHORIZATION)
                .map(HeaderValue::as_bytes)
        };
        let message = self.token_refusal_of(tokens, authorization)?;
        let mut response = api::error(StatusCode::UNAUTHORIZED, message);
        response.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"slidegate\""),
        );
        Some(response)
    }

    /// Why a call that needs a token is refused under `tokens`, given its
    /// `authorization` value (an HTTP header or gRPC metadata): `None` when
    /// no tokens are set or it carries a valid one. A refusal is counted.
    /// (The HTTP face reads its header only when needed, through
    /// `token_refusal_of`.)
    #[cfg(any(test, feature = "grpc"))]
    pub(crate) fn token_refusal(
        &self,
        tokens: &TokenSettings,
        authorization: Option<&[u8]>,
    ) -> Option<&'static str> {
        self.token_refusal_of(tokens, || authorization)
    }

    /// [`token_refusal`](Self::token_refusal), reading `authorization`
    /// only when tokens are set.
    fn token_refusal_of<'a>(
        &self,
        tokens: &TokenSettings,
        authorization: impl FnOnce() -> Option<&'a [u8]>,
    ) -> Option<&'static str> {
        let tokens = &tokens.api_tokens;
        if !tokens.guard_on() {
            return None;
        }
        let presented = authorization().and_then(bearer_token);
        if presented.is_some_and(|token| tokens.accepts(token)) {
            return None;
        }
        self.unauthorized.inc();
        Some(if presented.is_some() {
            "authorization: the bearer token is not valid"
        } else {
            "authorization: required: send Authorization: Bearer <token>"
        })
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive, RFC 9110).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests;
