//! The `slidegate` binary: parse the flags, load the configuration, bind,
//! serve until SIGINT or SIGTERM, then leave as `server::shutdown` says.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use slidegate::config::reload::Reloader;
use slidegate::config::{
    Config, LogFormat, Overrides, check_command, early_log_format, install_logging,
};
use slidegate::server;
use slidegate::server::build::{Faces, build};
use slidegate::server::shutdown::{self, Signals};

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

/// Load the configuration, build the service and its faces
/// (`server::build`), serve until a signal.
async fn run(overrides: Overrides) -> anyhow::Result<()> {
    let config = Config::load(&overrides)?;
    let app = build(&config).await?;

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
    let faces = Faces::bind(&config).await?;
    let app = Arc::new(app);

    // The signal stops every face, after the shutdown delay.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
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
    tokio::spawn(server::reload::watch(
        app.clone(),
        Reloader::new(overrides, config.clone()),
        hangup,
        until_stopped(),
    ));
    let faces = faces.serve(app, until_stopped);
    let drained_by = leaving.await.context("the shutdown task failed")?;
    shutdown::drain(faces, drained_by).await
}
