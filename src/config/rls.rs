//! The `[rls]` section: Envoy's rate-limit service (gRPC), where it
//! listens, its rules, and how much one request may carry. The keys are
//! restart-only; the rules under `rls.config` reload live
//! (`config::reload`, `server::rls::reload`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin, Overrides, parse_listen};

/// Descriptors one RLS request may carry when `rls.max_descriptors` is not set.
pub const DEFAULT_RLS_MAX_DESCRIPTORS: usize = 64;

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
        key!("rls.listen"),
        overrides.rls_listen.as_deref(),
        file.listen.as_deref(),
        parse_listen,
    )?;
    // A path in the file is relative to the file, as a reader expects.
    let config = overrides.rls_config.clone().or_else(|| {
        file.config.as_ref().map(|path| match file_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.clone(),
        })
    });
    // The highest is about what gRPC's 4 MiB message bound lets through
    // anyway.
    let max_descriptors = origin
        .bounded(key!("rls.max_descriptors"), None, file.max_descriptors)?
        .map_or(DEFAULT_RLS_MAX_DESCRIPTORS, |max| max as usize);
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
/// file under the directory it names, its subdirectories included (in
/// path order), as envoyproxy/ratelimit's runtime loader walks its
/// directory. Hidden files and directories are skipped: a Kubernetes
/// ConfigMap mount keeps a second copy of every file under `..data` and a
/// `..<timestamp>` directory. A symlinked directory is not followed (nor
/// is it by that loader); a symlinked file is read. Read by the RLS
/// service at start, and listed again at each reading of a reload, so
/// that a file added or removed is a change.
pub(crate) fn rule_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    let mut directories = vec![path.to_owned()];
    while let Some(directory) = directories.pop() {
        let entries = std::fs::read_dir(&directory)
            .map_err(|error| format!("cannot read {}: {error}", directory.display()))?;
        for entry in entries.filter_map(Result::ok) {
            let file = entry.path();
            let name = entry.file_name();
            let name = name.to_str().unwrap_or("");
            if name.starts_with('.') {
                continue;
            }
            let is_real_directory = entry.file_type().is_ok_and(|kind| kind.is_dir());
            if is_real_directory {
                directories.push(file);
            } else if (name.ends_with(".yaml") || name.ends_with(".yml")) && file.is_file() {
                files.push(file);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "{}: no .yaml or .yml file in this directory",
            path.display()
        ));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As envoyproxy/ratelimit's runtime loader walks its directory, rule
    /// files in subdirectories are read too; hidden files and directories
    /// are not (a Kubernetes ConfigMap mount keeps a second copy of every
    /// file under `..2026_...` and `..data`), nor other extensions.
    #[test]
    fn a_rules_directory_is_read_with_its_subdirectories_but_not_hidden_ones() {
        let dir = std::env::temp_dir().join(format!("slidegate-rules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["team/nested", "..2026_11_27", ".git"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        for file in [
            "a.yaml",
            "team/b.yml",
            "team/nested/c.yaml",
            ".hidden.yaml",
            "..2026_11_27/a.yaml",
            ".git/d.yaml",
            "notes.txt",
        ] {
            std::fs::write(dir.join(file), "domain: d\n").unwrap();
        }
        let found = rule_files(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let relative: Vec<PathBuf> = found
            .unwrap()
            .into_iter()
            .map(|path| path.strip_prefix(&dir).unwrap().to_owned())
            .collect();
        assert_eq!(
            relative,
            ["a.yaml", "team/b.yml", "team/nested/c.yaml"].map(PathBuf::from)
        );
    }
}
