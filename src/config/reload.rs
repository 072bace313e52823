//! Reloading the configuration while serving: the file read again (on
//! SIGHUP, or when its content, the API tokens file's or the RLS rules'
//! changes: a rule file edited, added or removed), validated
//! like at start, compared with the running configuration, and refused if
//! it would take the token guard or every policy away (`kept.rs`).
//!
//! Change detection reads the file's bytes rather than watching inodes or
//! modification times: a Kubernetes ConfigMap update swaps a `..data`
//! symlink, which leaves the watched path's inode and often its mtime as
//! they were. Reading a small file once a second costs nothing.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use self::files::{read_all, rule_files, watched};
use self::kept::InForce;
use super::keys::{Reload, count, key, names};
use super::{Config, ConfigError, Origin, Overrides};

mod files;
mod kept;
mod restart_only;

pub use self::files::Files;
pub use self::restart_only::restart_only_changes;

/// How often the configuration file is read for changes by default.
pub const DEFAULT_WATCH: Duration = Duration::from_secs(1);

/// The `[reload]` section: how often the files are read for changes.
/// Applied live.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReloadSection {
    watch_ms: Option<u64>,
}

/// `reload.watch_ms`, checked; `None`: only SIGHUP reloads.
pub(super) fn resolve_watch(
    origin: &Origin,
    file: &ReloadSection,
) -> Result<Option<Duration>, ConfigError> {
    Ok(
        match origin.bounded(key!("reload.watch_ms"), None, file.watch_ms)? {
            None => Some(DEFAULT_WATCH),
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
        },
    )
}

/// Every key of the file that a reload puts in force at once: the rows of
/// [`KEYS`](super::keys::KEYS) marked live, `policies` and `rlqs.buckets`
/// with the fields of their entries.
pub const APPLIED_LIVE: &[&str] = &names::<{ count(Reload::Live) }>(Reload::Live);

/// Every key that only a restart applies: the listeners, the store and
/// what the limiter was built with; the rows of [`KEYS`](super::keys::KEYS) marked
/// restart. A reload that changes one names it and keeps running with the
/// old value.
///
/// The two lists together are every key of the file: a unit test reads the
/// keys from the file's serde structs themselves, so a key added later
/// fails it until it has a row; another checks that
/// [`restart_only_changes`] names exactly these; and it destructures
/// [`Config`] without `..`, so a new field does not compile until it is
/// compared or declared live.
pub const RESTART_ONLY: &[&str] = &names::<{ count(Reload::Restart) }>(Reload::Restart);

/// The configuration the process started with, and how to load the next.
pub struct Reloader {
    overrides: Overrides,
    /// What a restart-only setting is compared with: the value in force.
    started: Config,
    /// The files a reload reads (the configuration and tokens files, then
    /// the RLS rule files), each with its bytes when last loaded.
    seen: Files,
    /// The configuration and tokens files: the first entries of `seen`.
    config_files: Vec<PathBuf>,
    /// The RLS rules' file or directory: the one the process started with
    /// (`rls.config` is restart-only), listed again at each reading so
    /// that a rule file added or removed is a change.
    rules_at: Option<PathBuf>,
    /// The RLS rule files in force, with their bytes: a reload whose rule
    /// files differ carries them, to be compiled and swapped in.
    rules_in_force: Files,
    /// How often to read the files, as the last loaded configuration says
    /// (it applies live).
    watch: Option<std::time::Duration>,
    /// What the configuration in force has that a reload may not take
    /// away: the token guard, and its policies.
    in_force: InForce,
}

/// A configuration that loaded, with what it cannot apply live.
pub struct Reloaded {
    pub config: Config,
    /// Keys of [`RESTART_ONLY`] whose value differs from the one in force.
    pub needs_restart: Vec<&'static str>,
    /// The RLS rule files with the bytes that held still, when they differ
    /// from the rules in force (one edited, added or removed); `None`
    /// when they do not, or the process serves no RLS rules.
    pub rules: Option<Files>,
}

impl Reloader {
    /// Start from the configuration loaded at start, from these flags.
    pub fn new(overrides: Overrides, started: Config) -> Reloader {
        let rules_at = started.rls_config.clone();
        let rules_in_force = read_all(rule_files(rules_at.as_deref()));
        let config_files = watched(&overrides, &started);
        let seen = Files::joined(read_all(config_files.clone()), rules_in_force.clone());
        Reloader {
            config_files,
            overrides,
            watch: started.watch,
            in_force: InForce::of(&started),
            started,
            seen,
            rules_at,
            rules_in_force,
        }
    }

    pub fn path(&self) -> Option<&PathBuf> {
        self.overrides.config.as_ref()
    }

    /// The configuration the process started with.
    pub fn started(&self) -> &Config {
        &self.started
    }

    /// How often the files are read for changes now (`reload.watch_ms` of
    /// the last configuration that loaded); `None`: only on SIGHUP.
    pub fn watch(&self) -> Option<std::time::Duration> {
        self.watch
    }

    /// Whether the configuration file's content, the tokens file's or the
    /// RLS rules' differs from what was last loaded (or tried). A file
    /// that cannot be read is no change: a ConfigMap swap or an editor may
    /// leave the path missing for an instant, so wait for it to be back
    /// rather than fail. What was loaded is kept meanwhile, so a file back
    /// with the same bytes is no change either (no reload made or counted
    /// for it). A rule file added to or removed from the rules directory
    /// is a change.
    pub fn changed(&self) -> bool {
        self.differs(&self.read())
    }

    /// The watched files as they are now, the rules directory listed anew.
    pub fn read(&self) -> Files {
        let rules = rule_files(self.rules_at.as_deref());
        read_all(self.config_files.iter().cloned().chain(rules).collect())
    }

    /// Whether `files` (a [`read`](Self::read)) differ from what was last
    /// loaded, a file that could not be read counting as unchanged (see
    /// [`changed`](Self::changed)), a file added or removed as changed.
    pub fn differs(&self, files: &Files) -> bool {
        if files.paths().ne(self.seen.paths()) {
            return true;
        }
        files
            .0
            .iter()
            .zip(&self.seen.0)
            .any(|((_, now), (_, seen))| now.as_ref().is_some_and(|now| Some(now) != seen.as_ref()))
    }

    /// A reloaded configuration was put in force: its `reload.watch_ms`
    /// applies from now on, its rules are the ones in force, and what it
    /// has is what the next reload may not take away. Not before: a file
    /// the server refuses after it loaded leaves the running configuration
    /// whole, its watch and its rules included.
    pub fn applied(&mut self, reloaded: &Reloaded) {
        self.watch = reloaded.config.watch;
        self.in_force = InForce::of(&reloaded.config);
        if let Some(rules) = &reloaded.rules {
            self.rules_in_force = rules.clone();
        }
    }

    /// Load the files as they are now; see [`reload_from`](Self::reload_from).
    pub fn reload(&mut self) -> Result<Reloaded, ConfigError> {
        self.reload_from(self.read())
    }

    /// Load the configuration from `files` (a [`read`](Self::read): the
    /// bytes the caller saw hold still, not whatever the file holds by
    /// now). On failure the running configuration stays, and the error
    /// names the file and the field. A file that would take the token
    /// guard or every policy away fails too (see `kept.rs`). The RLS rules
    /// come with it, from the same reading, when they changed; the caller
    /// compiles them.
    pub fn reload_from(&mut self, files: Files) -> Result<Reloaded, ConfigError> {
        // Kept before loading, so a file that fails is not retried every
        // tick, and one that changes while loading is loaded again.
        self.seen = files;
        let config = self.load()?;
        let config_files = watched(&self.overrides, &config);
        if config_files != self.config_files {
            // Another tokens file: watched from now on, the rules as read.
            let rules = self.rules_seen();
            self.config_files = config_files;
            self.seen = Files::joined(read_all(self.config_files.clone()), rules);
        }
        self.in_force.kept_by(&config, &self.origin())?;
        let needs_restart = restart_only_changes(&self.started, &config);
        if let Some(path) = &self.rules_at
            && self.rules_seen().0.is_empty()
        {
            // A directory that cannot be listed, or holds no rule file any
            // more: refused, as at start, rather than every domain dropped.
            let why = super::rls::rule_files(path)
                .err()
                .unwrap_or_else(|| format!("{}: no rule file", path.display()));
            return Err(ConfigError(format!("rls.config: {why}")));
        }
        let rules = Some(self.rules_seen())
            .filter(|rules| self.rules_at.is_some() && *rules != self.rules_in_force);
        Ok(Reloaded {
            config,
            needs_restart,
            rules,
        })
    }

    /// The RLS rule files of the last reading, with their bytes: what
    /// follows the configuration and tokens files in `seen`.
    fn rules_seen(&self) -> Files {
        let rules = self.seen.0.get(self.config_files.len()..);
        Files(rules.unwrap_or_default().to_vec())
    }

    /// The configuration from the file's bytes in `seen`, with the
    /// environment and the flags; the file's own error when it could not be
    /// read.
    fn load(&self) -> Result<Config, ConfigError> {
        let Some(path) = &self.overrides.config else {
            return Config::load(&self.overrides);
        };
        let Some(bytes) = self.seen.bytes_of(path) else {
            return Config::load(&self.overrides);
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|error| ConfigError(format!("cannot read {}: {error}", path.display())))?;
        Config::resolve(Some((path, text)), &self.overrides)
    }

    /// The file a refusal names.
    fn origin(&self) -> Origin {
        Origin(self.overrides.config.as_ref().map_or_else(
            || "configuration".to_owned(),
            |path| path.display().to_string(),
        ))
    }
}

#[cfg(test)]
pub(super) mod keys;

#[cfg(test)]
mod tests;
