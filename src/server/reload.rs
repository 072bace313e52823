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

use tokio::signal::unix::Signal;

use super::App;
use super::metrics::ReloadResult;
use crate::config::reload::Reloader;

/// The SIGHUP stream [`watch`] reads. A stream sees only the signals that
/// come after it is made, so the binary makes it before it listens: a
/// SIGHUP sent as soon as it accepts connections then reloads it, however
/// late the watcher starts.
pub fn hangup_stream() -> Option<Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; the file is still watched");
            None
        }
    }
}

/// Watch for SIGHUP (on `hangup`, from [`hangup_stream`]) and file
/// changes until `shutdown` completes.
pub async fn watch(
    app: Arc<App>,
    mut reloader: Reloader,
    mut hangup: Option<Signal>,
    shutdown: impl Future<Output = ()>,
) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    /// The binary makes its SIGHUP stream before it listens, so that a
    /// SIGHUP sent the moment it accepts connections (as a deploy script's
    /// would) reloads it: the watcher, which starts later, must use that
    /// stream and not make its own, which would not see the signal.
    #[tokio::test]
    async fn a_sighup_that_comes_before_the_watcher_starts_reloads() {
        let dir = std::env::temp_dir().join(format!("slidegate-early-hup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("slidegate.toml");
        let policy = |name: &str| {
            format!("[policies.{name}]\nlimits = [{{ limit = 5, window = \"1s\" }}]\n")
        };
        std::fs::write(
            &file,
            format!("[reload]\nwatch_ms = 0\n{}", policy("first")),
        )
        .unwrap();
        let overrides = Overrides {
            config: Some(file.clone()),
            ..Overrides::default()
        };
        let config = Config::load(&overrides).unwrap();
        let app = Arc::new(App::from_config(&config).await.unwrap());
        let reloader = Reloader::new(overrides, config);

        let hangup = hangup_stream();
        let mut delivered = hangup_stream().unwrap();
        std::fs::write(
            &file,
            format!("[reload]\nwatch_ms = 0\n{}", policy("second")),
        )
        .unwrap();
        // SAFETY: raising a signal this process handles (the streams above).
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        // Delivered to the streams there were: only then does the watcher
        // start, as under load it may.
        delivered.recv().await;
        tokio::spawn(watch(app.clone(), reloader, hangup, std::future::pending()));

        let reloaded = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while !app.policy_names().contains(&"second".to_owned()) {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            reloaded.is_ok(),
            "the SIGHUP was lost: {:?}",
            app.policy_names()
        );
    }
}
