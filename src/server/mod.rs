//! The HTTP service: a thin layer of hyper over the same [`Limiter`] the
//! library offers. [`serve`] takes a bound listener and a shutdown future,
//! so tests run the real server on port 0.

pub(crate) mod answer;
pub(crate) mod api;
mod body;
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

use crate::clock::{Clock, SystemClock, WatchedClock};
#[cfg(feature = "memcached")]
use crate::config::ClockSource;
use crate::config::{AuthConfig, Config, Exemptions, ServerGuard};
use crate::limiter::Limiter;
use crate::policy::Policy;
use crate::store::{AnyStore, MemoryStore, StoreError};
#[cfg(feature = "memcached")]
use crate::store::{MemcachedClock, MemcachedStore};

/// The largest request body accepted; larger gets 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a client may take to send a request's body. (Its head is
/// bounded by the quiet timeout: `served`.)
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the service serves: the limiter, the named policies, forward-auth
/// settings.
pub struct App {
    limiter: Limiter<AnyStore>,
    /// What a reload replaces. A request takes the `Arc` once, so it is
    /// decided under one consistent set of policies even while a reload
    /// swaps them; nothing waits but the swap itself.
    live: ArcSwap<Live>,
    metrics: metrics::ServerMetrics,
    /// What operators ask of this instance: recent decisions, most
    /// limited keys.
    ops: ops::Ops,
    /// Connection cap, API tokens, and the counters they keep.
    guard: guard::Guard,
    /// Envoy RLS rules, when configured: served by [`rls::serve`], counted
    /// in /metrics.
    #[cfg(feature = "grpc")]
    rls: Option<Arc<rls::Rls>>,
    /// The most descriptors one `ShouldRateLimit` request may carry.
    #[cfg(feature = "grpc")]
    rls_max_descriptors: usize,
    /// Envoy RLQS settings and streams' demand: served by [`rlqs::serve`],
    /// counted in /metrics, reloaded live. Unmatched buckets only, until
    /// [`App::with_rlqs`].
    #[cfg(feature = "grpc")]
    rlqs: Arc<rlqs::Rlqs>,
    /// Whether a shutdown has begun, and how long its drain may take.
    leaving: shutdown::Leaving,
}

impl App {
    pub fn new(
        limiter: Limiter<AnyStore>,
        policies: impl IntoIterator<Item = Policy>,
        auth: AuthConfig,
    ) -> App {
        #[allow(unused_mut)]
        let mut metrics = metrics::ServerMetrics::new(limiter.metrics_handles());
        #[cfg(feature = "memcached")]
        if let AnyStore::Memcached(store) = limiter.store() {
            metrics
                .registry_mut()
                .register_collector(Box::new(metrics::TopologyCollector(
                    store.topology_source(),
                )));
        }
        #[cfg(feature = "grpc")]
        let rlqs = {
            let rlqs = Arc::new(rlqs::Rlqs::new(&crate::config::RlqsConfig::default()));
            metrics
                .registry_mut()
                .register_collector(Box::new(rlqs::RlqsCollector(rlqs.clone())));
            rlqs
        };
        let max_counters = limiter.max_counters();
        let live = Self::live_of(
            &limiter,
            policies,
            max_counters,
            auth,
            Exemptions::default(),
            guard::TokenSettings::default(),
        );
        App {
            limiter,
            live: ArcSwap::from_pointee(live),
            metrics,
            ops: ops::Ops::default(),
            guard: guard::Guard::new(
                ServerGuard::default(),
                Arc::new(WatchedClock::new(SystemClock)),
            ),
            #[cfg(feature = "grpc")]
            rls: None,
            #[cfg(feature = "grpc")]
            rls_max_descriptors: crate::config::DEFAULT_RLS_MAX_DESCRIPTORS,
            #[cfg(feature = "grpc")]
            rlqs,
            leaving: shutdown::Leaving::default(),
        }
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
    pub fn with_rls(mut self, rls: rls::Rls) -> App {
        let rls = Arc::new(rls);
        self.metrics
            .registry_mut()
            .register_collector(Box::new(rls::RlsCollector(rls.clone())));
        self.rls = Some(rls);
        self
    }

    /// Serve Envoy RLQS with these `[rlqs]` settings (see [`rlqs::serve`]).
    #[cfg(feature = "grpc")]
    pub fn with_rlqs(self, config: &crate::config::RlqsConfig) -> App {
        self.apply_rlqs(config);
        self
    }

    /// Put reloaded `[rlqs]` settings in force (all but the listener).
    #[cfg(feature = "grpc")]
    pub(crate) fn apply_rlqs(&self, config: &crate::config::RlqsConfig) {
        self.rlqs.apply(config);
    }

    /// Build the store and the limiter a configuration describes. With no
    /// Memcached server configured, counters live in this process.
    pub async fn from_config(config: &Config) -> Result<App, StoreError> {
        #[cfg(feature = "memcached")]
        let store = match config.memcached_options() {
            Some(options) => AnyStore::Memcached(MemcachedStore::connect(&options).await?),
            None => AnyStore::Memory(MemoryStore::with_capacity(config.memory_capacity)),
        };
        // Config::resolve refuses servers in a build without the feature.
        #[cfg(not(feature = "memcached"))]
        let store = AnyStore::Memory(MemoryStore::with_capacity(config.memory_capacity));
        let local_clock = Arc::new(WatchedClock::new(SystemClock));
        // Without the `memcached` feature there is no shared clock (Config
        // refuses one without servers), so the local clock stays.
        #[cfg_attr(not(feature = "memcached"), allow(unused_mut))]
        let mut clock: Arc<dyn Clock> = local_clock.clone();
        #[cfg(feature = "memcached")]
        let mut shared_clock = None;
        #[cfg(feature = "memcached")]
        if let (ClockSource::Memcached, Some(options)) =
            (config.clock_source, config.memcached_options())
        {
            let shared = MemcachedClock::start(&options, local_clock.clone()).await?;
            // Deciding on local time until the first estimate would put this
            // instance's first checks in other buckets than its peers'.
            if shared.synced(Duration::from_secs(4)).await {
                tracing::info!(
                    offset_ms = shared.offset_ms(),
                    "deciding on the first Memcached node's clock"
                );
            } else {
                tracing::warn!(
                    "cannot read the first Memcached node's clock yet: deciding on local time until it answers"
                );
            }
            clock = shared.clone();
            shared_clock = Some(shared);
        }
        let limiter = Limiter::builder(store)
            .clock(clock)
            .timeout(config.timeout)
            .near_cache_capacity(config.near_cache_capacity)
            .near_cache_max_bytes(config.near_cache_max_bytes)
            .near_cache_revalidate(config.near_cache_revalidate)
            .max_counters(config.max_counters)
            .local_capacity(config.memory_capacity)
            .failure_mode(config.failure_mode)
            .coalesce(config.coalesce)
            .build();
        let mut app = App::new(
            limiter,
            config.policies.values().cloned(),
            config.auth.clone(),
        )
        .with_exemptions(config.exemptions.clone());
        app.guard.local_clock = local_clock;
        app.leaving = shutdown::Leaving::with_drain_timeout(config.shutdown.drain_timeout);
        app = app.with_guard(config.server.clone());
        #[cfg(feature = "grpc")]
        {
            app.rls_max_descriptors = config.rls_max_descriptors;
            app = app.with_rlqs(&config.rlqs);
        }
        #[cfg(feature = "memcached")]
        {
            app.guard.shared_clock = shared_clock;
        }
        Ok(app)
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
