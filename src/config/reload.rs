//! Reloading the configuration while serving: the file read again (on
//! SIGHUP, or when its content changes), validated like at start, and
//! compared with the running configuration.
//!
//! Change detection reads the file's bytes rather than watching inodes or
//! modification times: a Kubernetes ConfigMap update swaps a `..data`
//! symlink, which leaves the watched path's inode and often its mtime as
//! they were. Reading a small file once a second costs nothing.

use std::path::PathBuf;

use super::{Config, ConfigError, Overrides};

/// The configuration the process started with, and how to load the next.
pub struct Reloader {
    overrides: Overrides,
    /// What a restart-only setting is compared with: the value in force.
    started: Config,
    /// The file's bytes when last loaded; `None` when it could not be read.
    seen: Option<Vec<u8>>,
}

/// A configuration that loaded, with what it cannot apply live.
pub struct Reloaded {
    pub config: Config,
    /// Settings that changed but need a restart (`listen`, `memcached.servers`, ...).
    pub needs_restart: Vec<&'static str>,
}

impl Reloader {
    /// Start from the configuration loaded at start, from these flags.
    pub fn new(overrides: Overrides, started: Config) -> Reloader {
        let seen = overrides
            .config
            .as_ref()
            .and_then(|path| std::fs::read(path).ok());
        Reloader {
            overrides,
            started,
            seen,
        }
    }

    pub fn path(&self) -> Option<&PathBuf> {
        self.overrides.config.as_ref()
    }

    /// The configuration the process started with.
    pub fn started(&self) -> &Config {
        &self.started
    }

    /// Whether the file's content differs from what was last loaded (or
    /// tried). An unreadable file is a change only once, so a file being
    /// replaced does not log an error every second.
    pub fn changed(&mut self) -> bool {
        let Some(path) = &self.overrides.config else {
            return false;
        };
        let now = std::fs::read(path).ok();
        if now == self.seen {
            return false;
        }
        // A ConfigMap swap or an editor may leave the path missing for an
        // instant: wait for the file to be back rather than fail.
        if now.is_none() {
            self.seen = None;
            return false;
        }
        true
    }

    /// Load the file again. On failure the running configuration stays, and
    /// the error names the file and the field.
    pub fn reload(&mut self) -> Result<Reloaded, ConfigError> {
        self.seen = self
            .overrides
            .config
            .as_ref()
            .and_then(|path| std::fs::read(path).ok());
        let config = Config::load(&self.overrides)?;
        let needs_restart = self.started.needs_restart(&config);
        Ok(Reloaded {
            config,
            needs_restart,
        })
    }
}
