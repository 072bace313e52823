//! The `[rls]` section: Envoy's rate-limit service (gRPC), where it
//! listens, its rules, and how much one request may carry. Restart only:
//! the rules are read at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, Origin, Overrides, parse_listen};

/// Descriptors one RLS request may carry when `rls.max_descriptors` is not set.
pub const DEFAULT_RLS_MAX_DESCRIPTORS: usize = 64;
/// The highest `rls.max_descriptors`: about what gRPC's 4 MiB message bound
/// lets through anyway.
const MAX_RLS_DESCRIPTORS: u64 = 100_000;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RlsSection {
    listen: Option<String>,
    config: Option<PathBuf>,
    max_descriptors: Option<u64>,
}

/// What the section settles.
pub(super) struct Rls {
    pub listen: Option<SocketAddr>,
    pub config: Option<PathBuf>,
    pub max_descriptors: usize,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &RlsSection,
    overrides: &Overrides,
    file_dir: Option<&Path>,
) -> Result<Rls, ConfigError> {
    let listen = origin.layered(
        ("rls-listen", overrides.rls_listen.as_deref()),
        ("rls.listen", file.listen.as_deref()),
        parse_listen,
    )?;
    // A path in the file is relative to the file, as a reader expects.
    let config = overrides.rls_config.clone().or_else(|| {
        file.config.as_ref().map(|path| match file_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.clone(),
        })
    });
    let max_descriptors = match file.max_descriptors {
        None => DEFAULT_RLS_MAX_DESCRIPTORS,
        Some(max @ 1..=MAX_RLS_DESCRIPTORS) => max as usize,
        Some(max) => {
            return Err(origin.file_error(
                "rls.max_descriptors",
                format!("must be from 1 to {MAX_RLS_DESCRIPTORS}, got {max}"),
            ));
        }
    };
    if !cfg!(feature = "grpc") && (listen.is_some() || config.is_some()) {
        return Err(ConfigError(
            "Envoy RLS is configured, but this build has no `grpc` feature".to_owned(),
        ));
    }
    if config.is_some() && listen.is_none() {
        return Err(ConfigError(
            "an RLS configuration is given (--rls-config or rls.config) but no address to serve it on: set --rls-listen (or SLIDEGATE_RLS_LISTEN, or rls.listen)".to_owned(),
        ));
    }
    Ok(Rls {
        listen,
        config,
        max_descriptors,
    })
}

/// The rule files `path` stands for: itself, or every `*.yaml` and `*.yml`
/// file of the directory it names (in name order, hidden ones skipped), as
/// envoyproxy/ratelimit reads its runtime directory. Read by the RLS
/// service at start, and by a reload to see whether they changed.
pub(crate) fn rule_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|file| {
            let name = file
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && file.is_file()
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "{}: no .yaml or .yml file in this directory",
            path.display()
        ));
    }
    Ok(files)
}
