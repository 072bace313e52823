//! Hot reload: on SIGHUP, and when the configuration file's content changes,
//! every key of [`APPLIED_LIVE`] is put in force without dropping a request
//! (policies and `[auth]` by [`App::apply`], the connection cap and the API
//! tokens by the guard, `[rlqs]` but its listener by the RLQS service,
//! `reload.watch_ms` by the watch loop), and so are the RLS rules under
//! `rls.config` when a rule file was edited, added or removed (compiled and
//! swapped by `server::rls::reload`). A changed file, rule files included,
//! is loaded only once they all hold still: the same bytes read twice,
//! `HOLD_STILL` apart. A bad file or rules file, or one that would take the
//! token guard or every policy away, keeps the running configuration and
//! rules; changed keys of [`RESTART_ONLY`] are
//! named in the log and raise `slidegate_config_restart_pending`.
//!
//! [`APPLIED_LIVE`]: crate::config::reload::APPLIED_LIVE
//! [`RESTART_ONLY`]: crate::config::reload::RESTART_ONLY

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::Signal;

mod metrics;

pub(crate) use metrics::{FAMILIES, ReloadMetrics};

use super::App;
use crate::config::reload::{Files, Reloaded, Reloader};
use metrics::ReloadResult;

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
            _ = hangup_received => Why::Hangup,
            _ = tick => {
                if !reloader.changed() {
                    continue;
                }
                Why::FileChanged
            }
            () = &mut shutdown => return,
        };
        let files = tokio::select! {
            files = held_still(&reloader, why.looks()) => files,
            () = &mut shutdown => return,
        };
        match (files, why) {
            (Some(files), why) => reload_from(&app, &mut reloader, files, why.as_str()),
            (None, Why::FileChanged) => {
                tracing::debug!("the file is being written: read again at the next tick");
            }
            (None, Why::Hangup) => {
                let file = file_of(&reloader);
                tracing::error!(%file, reason = why.as_str(), "configuration NOT reloaded: the file kept changing; keeping the running one (send SIGHUP again once it is written)");
                app.reloads.reloaded(ReloadResult::failed, false);
            }
        }
        if reloader.watch() != every {
            every = reloader.watch();
            ticks = every.map(ticker);
        }
    }
}

/// How long a changed file must read the same before it is loaded.
/// Editors and shell redirection truncate a file, then write it, maybe in
/// several writes: a file read between them is a valid file with less in
/// it. One that reads the same twice this far apart is taken as whole. A
/// writer slower than that can still have a part applied until the next
/// tick; what a reload may never take away (`config::reload::kept`: the
/// token guard, every policy) is refused whatever the timing.
const HOLD_STILL: Duration = Duration::from_millis(50);

/// What set a reload off.
#[derive(Clone, Copy)]
enum Why {
    Hangup,
    FileChanged,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::Hangup => "SIGHUP",
            Why::FileChanged => "file changed",
        }
    }

    /// How many times to wait [`HOLD_STILL`] for the file to hold still. A
    /// tick looks once: the next tick looks again. A SIGHUP is sent once,
    /// and the watch may be off, so it waits for the writer to finish.
    fn looks(self) -> u32 {
        match self {
            Why::Hangup => 20,
            Why::FileChanged => 1,
        }
    }
}

/// The watched files, once they read the same twice [`HOLD_STILL`] apart,
/// at most `looks` times; `None` while they keep changing.
async fn held_still(reloader: &Reloader, looks: u32) -> Option<Files> {
    let mut before = reloader.read();
    for _ in 0..looks {
        tokio::time::sleep(HOLD_STILL).await;
        let now = reloader.read();
        if now == before {
            return Some(now);
        }
        before = now;
    }
    None
}

fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// Load the file again and apply what can change live; what happened is
/// logged and counted.
pub fn reload_once(app: &App, reloader: &mut Reloader, why: &str) {
    let files = reloader.read();
    reload_from(app, reloader, files, why);
}

fn file_of(reloader: &Reloader) -> String {
    reloader
        .path()
        .map_or_else(|| "(no file)".to_owned(), |path| path.display().to_string())
}

/// A reloaded configuration the server can put in force, with what it
/// brings the Envoy faces (their RLS rules, compiled).
struct Admitted {
    reloaded: Reloaded,
    envoy: super::build::EnvoyReload,
}

/// Whether the server can put `reloaded` in force: its RLS rules, new or
/// running, compile and fit its `limits.max_counters`.
fn admit(app: &App, reloaded: Reloaded) -> Result<Admitted, String> {
    let envoy = app.envoy.admit(&reloaded)?;
    Ok(Admitted { reloaded, envoy })
}

/// [`reload_once`] from `files`, read before.
fn reload_from(app: &App, reloader: &mut Reloader, files: Files, why: &str) {
    let file = file_of(reloader);
    let admitted = reloader
        .reload_from(files)
        .map_err(|error| error.to_string())
        .and_then(|reloaded| admit(app, reloaded));
    match admitted {
        Ok(Admitted { reloaded, envoy }) => {
            app.apply_live(&reloaded.config);
            app.envoy.put_in_force(envoy);
            reloader.applied(&reloaded);
            let restart = !reloaded.needs_restart.is_empty();
            if restart {
                tracing::warn!(
                    %file,
                    settings = ?reloaded.needs_restart,
                    "configuration reloaded, but these settings only change on a restart (restart needed): still running with the old values"
                );
            }
            tracing::info!(%file, reason = why, policies = ?app.policy_names(), "configuration reloaded");
            app.reloads.reloaded(ReloadResult::ok, restart);
        }
        Err(error) => {
            tracing::error!(%file, reason = why, %error, "configuration NOT reloaded: keeping the running one");
            app.reloads.reloaded(ReloadResult::failed, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Overrides};

    /// An app serving the configuration in `file`, and its reloader.
    async fn serving(file: &std::path::Path) -> (Arc<App>, Reloader) {
        let overrides = Overrides {
            config: Some(file.to_owned()),
            ..Overrides::default()
        };
        let config = Config::load(&overrides).unwrap();
        let app = Arc::new(App::from_config(&config).await.unwrap());
        (app, Reloader::new(overrides, config))
    }

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
        let (app, reloader) = serving(&file).await;

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

    /// A writer that truncates the file, writes part of it, and the rest a
    /// moment later (an editor, a shell loop, a slow `cat >`): the watch
    /// that ticks between the two writes must not put the part in force.
    /// It is a valid file, with fewer policies. Time is tokio's, paused,
    /// so the tick falls between the writes on every run.
    #[tokio::test(start_paused = true)]
    async fn a_file_caught_between_two_writes_is_applied_only_once_whole() {
        let dir =
            std::env::temp_dir().join(format!("slidegate-between-writes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("slidegate.toml");
        let text = |names: &[&str]| {
            let policies: String = names
                .iter()
                .map(|name| {
                    format!("[policies.{name}]\nlimits = [{{ limit = 5, window = \"1s\" }}]\n")
                })
                .collect();
            format!("[reload]\nwatch_ms = 100\n{policies}")
        };
        std::fs::write(&file, text(&["a"])).unwrap();
        let (app, reloader) = serving(&file).await;
        // Its first tick is now; the next ones every 100 ms from now.
        tokio::spawn(watch(app.clone(), reloader, None, std::future::pending()));

        let whole = text(&["a", "b", "c"]);
        let (part, _) = whole.split_at(whole.find("[policies.c]").unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::fs::write(&file, part).unwrap();
        // The tick at 100 ms has read the part; the rest comes at 120 ms.
        tokio::time::sleep(Duration::from_millis(70)).await;
        let between = app.policy_names();
        std::fs::write(&file, &whole).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = app.policy_names();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(between, ["a"], "the part was put in force");
        assert_eq!(after, ["a", "b", "c"], "the whole file was not");
    }

    /// The same writer on an RLS rules file: the tick between its two
    /// writes reads a valid file with fewer rules, which must not be put
    /// in force; the whole file is.
    #[cfg(feature = "grpc")]
    #[tokio::test(start_paused = true)]
    async fn a_rules_file_caught_between_two_writes_is_applied_only_once_whole() {
        let dir = std::env::temp_dir().join(format!(
            "slidegate-rules-between-writes-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = dir.join("rules.yaml");
        let text = |keys: &[&str]| {
            let descriptors: String = keys
                .iter()
                .map(|key| {
                    format!(
                        "  - key: {key}\n    rate_limit: {{unit: hour, requests_per_unit: 5}}\n"
                    )
                })
                .collect();
            format!("domain: test\ndescriptors:\n{descriptors}")
        };
        std::fs::write(&rules, text(&["a"])).unwrap();
        let file = dir.join("slidegate.toml");
        std::fs::write(
            &file,
            "[reload]\nwatch_ms = 100\n[rls]\nlisten = \"127.0.0.1:0\"\nconfig = \"rules.yaml\"\n",
        )
        .unwrap();
        let overrides = Overrides {
            config: Some(file.clone()),
            ..Overrides::default()
        };
        let config = Config::load(&overrides).unwrap();
        let rls = crate::server::rls::Rls::load(&rules).unwrap();
        let app = Arc::new(App::from_config(&config).await.unwrap().with_rls(rls));
        let reloader = Reloader::new(overrides, config);
        tokio::spawn(watch(app.clone(), reloader, None, std::future::pending()));
        let rule_count = || app.envoy.rls().unwrap().rules().rules().len();

        let whole = text(&["a", "b", "c"]);
        let (part, _) = whole.split_at(whole.find("  - key: c").unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
        std::fs::write(&rules, part).unwrap();
        tokio::time::sleep(Duration::from_millis(70)).await;
        let between = rule_count();
        std::fs::write(&rules, &whole).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rule_count();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(between, 1, "the part was put in force");
        assert_eq!(after, 3, "the whole file was not");
    }
}
