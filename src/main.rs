//! The `slidegate` binary: parse the flags, load the configuration, bind,
//! serve until SIGINT or SIGTERM.

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use slidegate::config::{Config, Overrides};
use slidegate::server::{self, App};
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = Config::load(&Overrides::parse())?;
    let app = App::from_config(&config)
        .await
        .context("cannot set up the Memcached store")?;

    if config.servers.is_empty() {
        tracing::warn!(
            "no Memcached server configured: counting in this process's memory, so counts are not \
             shared between instances and are lost on restart (set --memcached or SLIDEGATE_MEMCACHED)"
        );
    } else {
        tracing::info!(servers = ?config.servers, namespace = %config.namespace, "counting in Memcached");
        if let Err(error) = app.limiter().ready().await {
            tracing::warn!(%error, mode = ?config.failure_mode, "Memcached does not answer yet; the failure mode decides until it does");
        }
    }
    tracing::info!(policies = ?config.policies.keys().collect::<Vec<_>>(), "policies loaded");

    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    tracing::info!(
        "slidegate listening on http://{}",
        server::describe(&listener)
    );
    server::serve(listener, Arc::new(app), shutdown_signal()).await?;
    Ok(())
}

/// Resolves on the first SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stop with Ctrl-C");
                let _ = interrupt.await;
                return;
            }
        };
    tokio::select! {
        _ = interrupt => tracing::info!("SIGINT received"),
        _ = terminate.recv() => tracing::info!("SIGTERM received"),
    }
}
