//! Hot reload: on SIGHUP, and when the configuration file's content changes,
//! every key of [`APPLIED_LIVE`] is put in force without dropping a request
//! (policies and `[auth]` by [`App::apply`], the connection cap and the API
//! tokens by the guard, `[rlqs]` but its listener by the RLQS service,
//! `reload.watch_ms` by the watch loop). A bad file
//! keeps the running configuration; changed keys of [`RESTART_ONLY`] are
//! named in the log and raise `slidegate_config_restart_pending`.
//!
//! [`APPLIED_LIVE`]: crate::config::reload::APPLIED_LIVE
//! [`RESTART_ONLY`]: crate::config::reload::RESTART_ONLY

use std::sync::Arc;

use super::App;
use super::metrics::ReloadResult;
use crate::config::reload::Reloader;

/// Watch for SIGHUP and file changes until `shutdown` completes.
pub async fn watch(app: Arc<App>, mut reloader: Reloader, shutdown: impl Future<Output = ()>) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; the file is still watched");
            None
        }
    };
    let mut every = reloader.watch();
    let mut ticks = every.map(ticker);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let hangup_received = async {
            match hangup.as_mut() {
                Some(signal) => signal.recv().await,
                None => std::future::pending().await,
            }
        };
        let tick = async {
            match ticks.as_mut() {
                Some(ticks) => ticks.tick().await,
                None => std::future::pending().await,
            }
        };
        let why = tokio::select! {
            _ = hangup_received => "SIGHUP",
            _ = tick => {
                if !reloader.changed() {
                    continue;
                }
                "file changed"
            }
            () = &mut shutdown => return,
        };
        reload_once(&app, &mut reloader, why);
        if reloader.watch() != every {
            every = reloader.watch();
            ticks = every.map(ticker);
        }
    }
}

fn ticker(period: std::time::Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// Load the file again and apply what can change live; what happened is
/// logged and counted.
pub fn reload_once(app: &App, reloader: &mut Reloader, why: &str) {
    let file = reloader
        .path()
        .map_or_else(|| "(no file)".to_owned(), |path| path.display().to_string());
    let admitted = reloader
        .reload()
        .map_err(|error| error.to_string())
        .and_then(|reloaded| {
            app.admits(&reloaded.config)
                .map(|()| reloaded)
                .map_err(|error| format!("rls.config: {error}"))
        });
    match admitted {
        Ok(reloaded) => {
            let config = reloaded.config;
            app.apply_live(&config);
            reloader.applied(&config);
            let restart = !reloaded.needs_restart.is_empty();
            if restart {
                tracing::warn!(
                    %file,
                    settings = ?reloaded.needs_restart,
                    "configuration reloaded, but these settings only change on a restart (restart needed): still running with the old values"
                );
            }
            tracing::info!(%file, reason = why, policies = ?app.policy_names(), "configuration reloaded");
            app.metrics.reloaded(ReloadResult::ok, restart);
        }
        Err(error) => {
            tracing::error!(%file, reason = why, %error, "configuration NOT reloaded: keeping the running one");
            app.metrics.reloaded(ReloadResult::failed, false);
        }
    }
}
