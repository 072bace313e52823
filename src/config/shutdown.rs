//! How the process leaves on SIGTERM (`server.shutdown_delay_ms`,
//! `server.drain_timeout_ms`): how long every listener keeps answering
//! after the signal, and how long what is in flight then gets to finish.
//! Restart-only: the phases are set up at start and run once, at the end.

use std::time::Duration;

use super::keys::key;
use super::{ConfigError, Origin, Overrides};

/// How long what is in flight gets once the listeners stop accepting.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The phases of a shutdown, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownConfig {
    /// After the first SIGTERM, every listener keeps accepting and
    /// answering this long (while `/readyz` answers 503), so that load
    /// balancers and Kubernetes endpoints stop sending here first.
    pub delay: Duration,
    /// Then what is in flight gets this long before the process exits.
    pub drain_timeout: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> ShutdownConfig {
        ShutdownConfig {
            delay: Duration::ZERO,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// The two keys of `[server]`, as the file writes them.
pub(super) struct ShutdownKeys {
    pub delay_ms: Option<u64>,
    pub drain_timeout_ms: Option<u64>,
}

pub(super) fn resolve(
    origin: &Origin,
    overrides: &Overrides,
    file: ShutdownKeys,
) -> Result<ShutdownConfig, ConfigError> {
    let defaults = ShutdownConfig::default();
    // Longer than 10 minutes is more than any rolling update needs: a typo
    // in the unit, more likely. A drain of zero would cut every request in
    // flight: never what is meant.
    let delay = origin
        .bounded(
            key!("server.shutdown_delay_ms"),
            overrides.shutdown_delay_ms,
            file.delay_ms,
        )?
        .map_or(defaults.delay, Duration::from_millis);
    let drain_timeout = origin
        .bounded(
            key!("server.drain_timeout_ms"),
            overrides.drain_timeout_ms,
            file.drain_timeout_ms,
        )?
        .map_or(defaults.drain_timeout, Duration::from_millis);
    Ok(ShutdownConfig {
        delay,
        drain_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn resolve_file(server: &str) -> Result<Config, ConfigError> {
        let text = format!("[server]\n{server}\n");
        Config::resolve(
            Some((std::path::Path::new("s.toml"), &text)),
            &Overrides::default(),
        )
    }

    #[test]
    fn defaults_serve_no_delay_and_drain_ten_seconds() {
        let config = Config::resolve(None, &Overrides::default()).unwrap();
        assert_eq!(config.shutdown, ShutdownConfig::default());
        assert_eq!(config.shutdown.delay, Duration::ZERO);
        assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(10));
    }

    #[test]
    fn the_file_sets_both_and_the_flags_win() {
        let config = resolve_file("shutdown_delay_ms = 5000\ndrain_timeout_ms = 2000").unwrap();
        assert_eq!(config.shutdown.delay, Duration::from_secs(5));
        assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(2));

        let overrides = Overrides {
            shutdown_delay_ms: Some(7),
            drain_timeout_ms: Some(8),
            ..Overrides::default()
        };
        let text = "[server]\nshutdown_delay_ms = 5000\ndrain_timeout_ms = 2000\n";
        let config =
            Config::resolve(Some((std::path::Path::new("s.toml"), text)), &overrides).unwrap();
        assert_eq!(config.shutdown.delay, Duration::from_millis(7));
        assert_eq!(config.shutdown.drain_timeout, Duration::from_millis(8));
    }

    #[test]
    fn out_of_bounds_values_name_the_field() {
        for (server, expected) in [
            (
                "shutdown_delay_ms = 600001",
                "s.toml: server.shutdown_delay_ms: must be from 0 to 600000 ms, got 600001",
            ),
            (
                "drain_timeout_ms = 0",
                "s.toml: server.drain_timeout_ms: must be from 1 to 600000 ms, got 0",
            ),
        ] {
            let error = resolve_file(server).unwrap_err().to_string();
            assert_eq!(error, expected);
        }
        let overrides = Overrides {
            drain_timeout_ms: Some(600_001),
            ..Overrides::default()
        };
        let error = Config::resolve(None, &overrides).unwrap_err().to_string();
        assert!(
            error.starts_with("--drain-timeout-ms (or SLIDEGATE_DRAIN_TIMEOUT_MS): must be from 1"),
            "{error}"
        );
    }
}
