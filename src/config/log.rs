//! The `[log]` section: how lines are written (text for a person, JSON for
//! a log pipeline) and how many refused decisions a second are logged.
//! `format` is restart-only: the log's writer is installed once, before
//! anything is logged. `refusals_per_s` applies live, so that an engineer
//! on call can turn refusal logging on (or down) without a restart.

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin, Overrides};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogSection {
    format: Option<String>,
    refusals_per_s: Option<u32>,
}

/// How each log line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line an event.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target and fields (the
    /// message among them).
    Json,
}

/// The settled `[log]` section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    pub format: LogFormat,
    /// Refused decisions logged a second; 0: none.
    pub refusals_per_s: u32,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &LogSection,
    overrides: &Overrides,
) -> Result<LogConfig, ConfigError> {
    let format = origin
        .layered(
            key!("log.format"),
            overrides.log_format.as_deref(),
            file.format.as_deref(),
            parse_log_format,
        )?
        .unwrap_or_default();
    // The most: past it the log is the flood it exists to avoid.
    let refusals_per_s = origin
        .bounded(
            key!("log.refusals_per_s"),
            overrides.log_refusals_per_s.map(u64::from),
            file.refusals_per_s.map(u64::from),
        )?
        .map_or(0, |per_second| per_second as u32);
    Ok(LogConfig {
        format,
        refusals_per_s,
    })
}

pub fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("expected \"text\" or \"json\", got {other:?}")),
    }
}

/// The format to log in before the configuration is loaded, so that the
/// load's own messages (and its errors) are already in it: the flag or its
/// environment twin, else the file's `log.format`. Anything unreadable
/// here gives text; the load that follows reports it.
pub fn early_log_format(overrides: &Overrides) -> LogFormat {
    if let Some(text) = &overrides.log_format {
        return parse_log_format(text).unwrap_or_default();
    }
    let Some(path) = &overrides.config else {
        return LogFormat::default();
    };
    let from_file = std::fs::read_to_string(path).ok().and_then(|text| {
        let table: toml::Table = toml::from_str(&text).ok()?;
        let format = table.get("log")?.get("format")?.as_str()?;
        parse_log_format(format).ok()
    });
    from_file.unwrap_or_default()
}

/// The process's log, installed once at start (by the binary; a library
/// user installs their own): text for a person (coloured only at a terminal), or one JSON object a
/// line. In JSON, a panic is logged as an event too, so that every line
/// the process writes parses.
pub fn install_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    match format {
        LogFormat::Text => tracing_subscriber::fmt()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_env_filter(filter)
            .init(),
        LogFormat::Json => {
            tracing_subscriber::fmt()
                .json()
                .with_writer(std::io::stderr)
                .with_env_filter(filter)
                .init();
            std::panic::set_hook(Box::new(|panic| {
                tracing::error!(panic = %panic, "panicked");
            }));
        }
    }
}
