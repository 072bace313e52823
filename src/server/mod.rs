//! The HTTP service: a thin layer of hyper over the same [`Limiter`] the
//! library offers. [`build`] makes the [`App`] and its faces from the
//! configuration; [`serve`] takes a bound listener and a shutdown future,
//! so tests run the real server on port 0.

pub(crate) mod answer;
pub(crate) mod api;
mod body;
pub mod build;
#[cfg(feature = "grpc")]
mod envoy;
mod flat_call;
mod forward_auth;
#[cfg(feature = "grpc")]
mod grpc;
mod guard;
mod live;
mod metrics;
pub mod ops;
pub mod reload;
#[cfg(feature = "grpc")]
pub mod rlqs;
#[cfg(feature = "grpc")]
pub mod rls;
mod routes;
mod served;
pub mod shutdown;

pub(crate) use live::Live;
pub use routes::{Access, Methods, ROUTES, Route, RoutePath};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::config::{AuthConfig, Config};
use crate::limiter::Limiter;
use crate::policy::Policy;
use crate::store::AnyStore;

/// The largest request body accepted; larger gets 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a client may take to send a request's body. (Its head is
/// bounded by the quiet timeout: `served`.)
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the service serves: the limiter, the named policies, forward-auth
/// settings, and what every face shares. Built by [`build::build`] from a
/// configuration, or by [`App::new`] around a limiter.
pub struct App {
    limiter: Limiter<AnyStore>,
    /// What a reload replaces. A request takes the `Arc` once, so it is
    /// decided under one consistent set of policies even while a reload
    /// swaps them; nothing waits but the swap itself.
    live: ArcSwap<Live>,
    /// The registry of /metrics and the HTTP answers by status.
    metrics: metrics::ServerMetrics,
    /// How reloads ended.
    reloads: reload::ReloadMetrics,
    /// What operators ask of this instance: recent decisions, most
    /// limited keys.
    ops: ops::Ops,
    /// Connection cap, API tokens, and the counters they keep.
    guard: guard::Guard,
    /// The Envoy faces' state (RLS rules, RLQS settings and streams);
    /// nothing in a build without `grpc`.
    envoy: build::Envoy,
    /// Whether a shutdown has begun, and how long its drain may take.
    leaving: shutdown::Leaving,
}

impl App {
    /// An app deciding with `limiter` under these policies, every other
    /// setting at its default; the `with_*` methods change them before it
    /// serves.
    pub fn new(
        limiter: Limiter<AnyStore>,
        policies: impl IntoIterator<Item = Policy>,
        auth: AuthConfig,
    ) -> App {
        build::assemble(
            limiter,
            build::Parts {
                policies: policies.into_iter().collect(),
                auth,
                ..build::Parts::default()
            },
        )
    }

    /// Build the store, the limiter and the app a configuration describes
    /// ([`build::build`]).
    pub async fn from_config(config: &Config) -> Result<App, build::BuildError> {
        build::build(config).await
    }

    /// Connections closed at once because the cap was reached.
    pub fn refused_connections(&self) -> u64 {
        self.guard.refused_connections()
    }

    /// Connections holding a place under the cap now, HTTP and gRPC.
    pub fn open_connections(&self) -> usize {
        self.guard.open_connections()
    }

    /// Serve these Envoy RLS rules (see [`rls::serve`]).
    #[cfg(feature = "grpc")]
    pub fn with_rls(self, rls: rls::Rls) -> App {
        self.envoy.set_rls(rls);
        self
    }

    /// Serve Envoy RLQS with these `[rlqs]` settings (see [`rlqs::serve`]).
    #[cfg(feature = "grpc")]
    pub fn with_rlqs(self, config: &crate::config::RlqsConfig) -> App {
        self.envoy.rlqs.apply(config);
        self
    }

    pub fn limiter(&self) -> &Limiter<AnyStore> {
        &self.limiter
    }
}

/// Serve `app` on `listener` until `shutdown` completes, then stop
/// accepting and let requests in flight finish (up to
/// `server.drain_timeout_ms`, 10 s unless configured).
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let drain = Arc::new(served::Drain::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer, permit) = tokio::select! {
            accepted = app.guard.accept(&listener) => accepted,
            () = &mut shutdown => break,
        };
        let activity = Arc::new(served::Activity::default());
        let service = service_fn({
            let app = app.clone();
            let activity = activity.clone();
            move |request| {
                let app = app.clone();
                let serving = activity.serving();
                async move {
                    let mut response = routes::handle(&app, request, peer).await;
                    if app.leaving.begun() {
                        // The client's next request goes on a new
                        // connection, where the load balancer sends it
                        // now: not on this one, which the drain closes.
                        response
                            .headers_mut()
                            .insert(hyper::header::CONNECTION, CLOSE.clone());
                    }
                    app.metrics.answered(response.status());
                    drop(serving);
                    Ok::<_, std::convert::Infallible>(response)
                }
            }
        });
        // Half-close kept open: a client that sends its request and then
        // shuts its side (`nc -N`, some probes) is still answered, and its
        // forward-auth call decided; hyper's default drops the connection
        // at that EOF, answer unwritten. The quiet timeout still ends a
        // connection nobody uses.
        let connection = http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(stream), service);
        let member = drain.member();
        let quiet_timeout = app.guard.quiet_timeout();
        tokio::spawn(async move {
            match served::until_quiet(connection, &activity, member, quiet_timeout).await {
                Some(Ok(())) => {}
                Some(Err(error)) => {
                    tracing::debug!(%error, %peer, "connection ended with an error");
                }
                None => {
                    tracing::debug!(%peer, "connection closed: no request for {quiet_timeout:?}")
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for requests in flight");
    drain.begin();
    tokio::select! {
        () = drain.finished() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(app.leaving.drain_timeout()) => tracing::warn!("gave up waiting for connections"),
    }
    Ok(())
}

/// `Connection: close`, answered while the process is leaving.
static CLOSE: hyper::header::HeaderValue = hyper::header::HeaderValue::from_static("close");

/// The address a listener is bound to, for logs.
pub fn describe(listener: &TcpListener) -> String {
    listener.local_addr().map_or_else(
        |_| "an unknown address".to_owned(),
        |addr: SocketAddr| addr.to_string(),
    )
}
