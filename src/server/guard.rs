//! What guards the listener: the connection cap, the API token, and the
//! counters they keep, read into /metrics by [`snapshot`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use hyper::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Request, Response, StatusCode};
use tokio::net::{TcpListener, TcpStream};

use super::App;
use super::api::{self, Body};
use crate::clock::{SystemClock, WatchedClock};
use crate::config::{ApiTokens, ServerGuard};
use crate::store::AnyStore;
#[cfg(feature = "memcached")]
use crate::store::MemcachedClock;

/// The pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

pub(crate) struct Guard {
    /// The cap on connections; a reload changes it live (connections over a
    /// lowered cap are not closed, new ones wait for places).
    max_connections: AtomicUsize,
    /// How long a connection may be quiet before it is closed: see
    /// [`Guard::quiet_timeout`].
    quiet_timeout: Duration,
    open: Arc<AtomicUsize>,
    refused: AtomicU64,
    unauthorized: AtomicU64,
    /// The local clock, watched for backward jumps.
    pub(crate) local_clock: Arc<WatchedClock<SystemClock>>,
    /// The shared clock, when `[clock] source = "memcached"`.
    #[cfg(feature = "memcached")]
    pub(crate) shared_clock: Option<Arc<MemcachedClock>>,
}

/// A served connection's place under the cap, given back when it ends.
pub(crate) struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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
    pub(crate) fn new(settings: ServerGuard, local_clock: Arc<WatchedClock<SystemClock>>) -> Guard {
        Guard {
            max_connections: AtomicUsize::new(settings.max_connections),
            quiet_timeout: settings.quiet_timeout,
            open: Arc::new(AtomicUsize::new(0)),
            refused: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            local_clock,
            #[cfg(feature = "memcached")]
            shared_clock: None,
        }
    }

    /// A place for a new connection, or `None` (counted) past the cap. One
    /// atomic step: the HTTP and the RLS listeners take places from the
    /// same cap.
    pub(crate) fn admit(&self) -> Option<Permit> {
        let max = self.max_connections.load(Ordering::Relaxed);
        let taken = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                (open < max).then_some(open + 1)
            });
        if taken.is_err() {
            self.refused.fetch_add(1, Ordering::Relaxed);
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
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections holding a place under the cap now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
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
        self.unauthorized.fetch_add(1, Ordering::Relaxed);
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

/// The guards' figures at one instant, to be encoded into /metrics with
/// the rest: the connection cap, the token, the clocks, the embedded store.
pub(crate) fn snapshot(app: &App) -> Vec<Figure> {
    let guard = &app.guard;
    let mut figures = vec![
        Figure::gauge(
            "slidegate_connections_open",
            "Connections being served (HTTP and RLS).",
            guard.open.load(Ordering::Relaxed) as u64,
        ),
        Figure::counter(
            "slidegate_connections_refused",
            "Connections (HTTP and RLS) closed at once because max_connections were open.",
            guard.refused_connections(),
        ),
        Figure::counter(
            "slidegate_unauthorized",
            "Requests refused (HTTP 401, gRPC UNAUTHENTICATED) for want of a valid API token.",
            guard.unauthorized.load(Ordering::Relaxed),
        ),
        Figure::counter(
            "slidegate_clock_backward_jumps",
            "Times the local clock was set back by more than 100 ms.",
            guard.local_clock.backward_jumps(),
        ),
    ];
    #[cfg(feature = "memcached")]
    if let Some(shared) = &guard.shared_clock {
        figures.push(Figure::signed_gauge(
            "slidegate_clock_offset_ms",
            "Milliseconds added to the local clock to read the first Memcached node's.",
            shared.offset_ms(),
        ));
        figures.push(Figure::counter(
            "slidegate_clock_estimate_failures",
            "Estimates of the shared clock's offset that failed.",
            shared.estimates().1,
        ));
    }
    // A build without Memcached has one store: the pattern always matches.
    #[allow(irrefutable_let_patterns)]
    if let AnyStore::Memory(store) = app.limiter.store() {
        figures.push(Figure::counter(
            "slidegate_memory_evictions",
            "Live counters the embedded store evicted to make room (they then read as 0).",
            store.evictions(),
        ));
        figures.push(Figure::gauge(
            "slidegate_memory_capacity",
            "Counters the embedded store holds before it evicts.",
            store.capacity() as u64,
        ));
    }
    figures
}

/// One unlabelled series. A counter's name has no `_total`: the encoder
/// adds it, as OpenMetrics wants.
#[derive(Debug)]
pub(crate) struct Figure {
    pub name: &'static str,
    pub help: &'static str,
    pub counter: bool,
    pub value: i64,
}

impl Figure {
    fn counter(name: &'static str, help: &'static str, value: u64) -> Figure {
        Figure {
            name,
            help,
            counter: true,
            value: i64::try_from(value).unwrap_or(i64::MAX),
        }
    }

    fn gauge(name: &'static str, help: &'static str, value: u64) -> Figure {
        Figure {
            counter: false,
            ..Figure::counter(name, help, value)
        }
    }

    #[cfg(feature = "memcached")]
    fn signed_gauge(name: &'static str, help: &'static str, value: i64) -> Figure {
        Figure {
            name,
            help,
            counter: false,
            value,
        }
    }
}

#[cfg(test)]
mod tests;
