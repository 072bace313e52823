//! The `slidegate` binary: parse the flags, load the configuration, bind,
//! serve until SIGINT or SIGTERM, then leave as `server::shutdown` says.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use slidegate::config::reload::Reloader;
use slidegate::config::{
    Config, LogFormat, Overrides, check_command, early_log_format, install_logging,
};
use slidegate::server::shutdown::{self, Face, Signals};
use slidegate::server::{self, App};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let overrides = Overrides::parse();
    let format = early_log_format(&overrides);
    install_logging(format);
    if overrides.check {
        std::process::exit(check_command(&overrides, format));
    }
    match run(overrides).await {
        // A log pipeline reads JSON only: the error that stops the start
        // is a log line like any other, not Rust's `Error: ...` print.
        Err(error) if format == LogFormat::Json => {
            tracing::error!(error = format!("{error:#}"), "cannot start");
            std::process::exit(1)
        }
        ended => ended,
    }
}

/// Load the configuration, build the service, bind, serve until a signal.
async fn run(overrides: Overrides) -> anyhow::Result<()> {
    let config = Config::load(&overrides)?;
    let app = App::from_config(&config)
        .await
        .context("cannot set up the Memcached store")?;
    let app = with_rls(app, &config)?;
    app.log_refusals(config.log.refusals_per_s);

    // The configuration gives the nodes one way: a list, or an endpoint.
    if let Some(endpoint) = &config.cluster.discovery {
        tracing::info!(namespace = %config.namespace, "counting in Memcached via discovery at {endpoint}");
    } else if config.servers.is_empty() {
        tracing::warn!(
            "no Memcached server configured: counting in this process's memory, so counts are not \
             shared between instances and are lost on restart (set --memcached or SLIDEGATE_MEMCACHED)"
        );
    } else {
        tracing::info!(servers = ?config.servers, namespace = %config.namespace, "counting in Memcached");
    }
    let in_memcached = !config.servers.is_empty() || config.cluster.discovery.is_some();
    if in_memcached && let Err(error) = app.limiter().ready().await {
        tracing::warn!(%error, mode = ?config.failure_mode, "Memcached does not answer yet; the failure mode decides until it does");
    }
    tracing::info!(policies = ?config.policies.keys().collect::<Vec<_>>(), "policies loaded (SIGHUP or a change of the file reloads them)");

    // Before it listens: a SIGTERM or SIGHUP that comes as soon as it does
    // must meet these handlers, not the default action (which kills it),
    // and a SIGHUP then must reload it: the watcher reads this stream.
    let signals = Signals::register();
    let hangup = server::reload::hangup_stream();
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    tracing::info!(
        "slidegate listening on http://{}",
        server::describe(&listener)
    );
    let app = Arc::new(app);

    // The signal stops every face, after the shutdown delay.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let leaving = tokio::spawn({
        let app = app.clone();
        let settings = config.shutdown;
        async move {
            shutdown::leave(&app, signals, settings.delay).await;
            let _ = stop.send(true);
            tokio::time::Instant::now() + settings.drain_timeout
        }
    });
    let rls = serve_rls(&config, app.clone(), until_stopped(stopped.clone())).await?;
    let rlqs = serve_rlqs(&config, app.clone(), until_stopped(stopped.clone())).await?;
    tokio::spawn(server::reload::watch(
        app.clone(),
        Reloader::new(overrides, config.clone()),
        hangup,
        until_stopped(stopped.clone()),
    ));
    let http: Face = tokio::spawn(async move {
        server::serve(listener, app, until_stopped(stopped))
            .await
            .context("HTTP server")
    });
    let drained_by = leaving.await.context("the shutdown task failed")?;
    let faces = [("HTTP", Some(http)), ("RLS", rls), ("RLQS", rlqs)];
    let faces = faces
        .into_iter()
        .filter_map(|(name, face)| Some((name, face?)))
        .collect();
    shutdown::drain(faces, drained_by).await
}

#[cfg(feature = "grpc")]
fn with_rls(app: App, config: &Config) -> anyhow::Result<App> {
    let Some(path) = &config.rls_config else {
        return Ok(app);
    };
    let rules =
        server::rls::RuleSet::load_within(path, config.max_counters).map_err(anyhow::Error::msg)?;
    tracing::info!(path = %path.display(), domains = ?rules.domains().collect::<Vec<_>>(), rules = rules.rules().len(), "Envoy RLS rules loaded");
    Ok(app.with_rls(server::rls::Rls::new(rules)))
}

#[cfg(not(feature = "grpc"))]
fn with_rls(app: App, _config: &Config) -> anyhow::Result<App> {
    Ok(app)
}

/// Bind the RLS listener (when configured) and serve it in a task.
#[cfg(feature = "grpc")]
async fn serve_rls(
    config: &Config,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Face>> {
    let Some(address) = config.rls_listen else {
        return Ok(None);
    };
    let listener = bind_face("Envoy RLS", address).await?;
    Ok(Some(tokio::spawn(async move {
        server::rls::serve(listener, app, shutdown)
            .await
            .context("RLS server")
    })))
}

/// Bind the RLQS listener (when configured) and serve it in a task.
#[cfg(feature = "grpc")]
async fn serve_rlqs(
    config: &Config,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Face>> {
    let Some(address) = config.rlqs.listen else {
        return Ok(None);
    };
    let listener = bind_face("Envoy RLQS", address).await?;
    tracing::info!(
        buckets = config.rlqs.buckets.len(),
        "RLQS bucket rules loaded"
    );
    Ok(Some(tokio::spawn(async move {
        server::rlqs::serve(listener, app, shutdown)
            .await
            .context("RLQS server")
    })))
}

/// Bind a gRPC face's listener and say where it serves.
#[cfg(feature = "grpc")]
async fn bind_face(name: &str, address: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen for {name} on {address}"))?;
    tracing::info!(
        "slidegate serving {name} (gRPC) on {}",
        server::describe(&listener)
    );
    Ok(listener)
}

#[cfg(not(feature = "grpc"))]
async fn serve_rls(
    _config: &Config,
    _app: Arc<App>,
    _shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Face>> {
    Ok(None)
}

#[cfg(not(feature = "grpc"))]
async fn serve_rlqs(
    _config: &Config,
    _app: Arc<App>,
    _shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<Face>> {
    Ok(None)
}
