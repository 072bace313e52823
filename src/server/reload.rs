//! Hot reload: on SIGHUP, and when the configuration file's content changes,
//! new policies and forward-auth settings are put in force without
//! dropping a request ([`App::apply`]). A bad file keeps the running
//! configuration; settings that need a restart are logged as such.

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
    let every = reloader.started().watch;
    let mut ticks = every.map(|period| {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
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
    }
}

/// Load the file again and apply what can change live; what happened is
/// logged and counted.
pub fn reload_once(app: &App, reloader: &mut Reloader, why: &str) {
    let file = reloader
        .path()
        .map_or_else(|| "(no file)".to_owned(), |path| path.display().to_string());
    match reloader.reload() {
        Ok(reloaded) => {
            let config = reloaded.config;
            app.apply(config.policies.values().cloned(), config.auth.clone());
            let restart = !reloaded.needs_restart.is_empty();
            if restart {
                tracing::warn!(
                    %file,
                    settings = ?reloaded.needs_restart,
                    "configuration reloaded, but these settings only change on a restart: still running with the old values"
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
