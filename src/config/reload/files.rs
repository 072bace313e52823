//! What a reload reads: the configuration file, the tokens file and the
//! RLS rule files it names, each with its bytes at one reading.

use std::path::{Path, PathBuf};

use super::super::{Config, Overrides};

/// Files at one reading, each with its bytes; `None` when it could not be
/// read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Files(pub(super) Vec<(PathBuf, Option<Vec<u8>>)>);

impl Files {
    pub(super) fn bytes_of(&self, path: &Path) -> Option<&[u8]> {
        self.0
            .iter()
            .find(|(at, _)| at == path)
            .and_then(|(_, bytes)| bytes.as_deref())
    }

    pub(super) fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        self.0.iter().map(|(path, _)| path)
    }

    /// `first`'s files, then `then`'s.
    pub(super) fn joined(first: Files, then: Files) -> Files {
        Files(first.0.into_iter().chain(then.0).collect())
    }

    /// Each file with its bytes, or why they could not be read.
    pub fn iter(&self) -> impl Iterator<Item = (&Path, Result<&[u8], &'static str>)> {
        self.0.iter().map(|(path, bytes)| {
            let bytes = bytes.as_deref().ok_or("missing or unreadable");
            (path.as_path(), bytes)
        })
    }
}

/// The files whose content `config` was loaded from: the configuration
/// file and the tokens file it names.
pub(super) fn watched(overrides: &Overrides, config: &Config) -> Vec<PathBuf> {
    overrides
        .config
        .iter()
        .chain(&config.server.api_tokens_file)
        .cloned()
        .collect()
}

/// The RLS rule files under `rules_at` now, as the RLS service reads
/// them; none when there is no such path, or it is a directory that
/// cannot be listed or holds no rule file (a reload then fails, naming
/// it, and the running rules stay).
pub(super) fn rule_files(rules_at: Option<&Path>) -> Vec<PathBuf> {
    rules_at
        .and_then(|path| super::super::rls::rule_files(path).ok())
        .unwrap_or_default()
}

pub(super) fn read_all(paths: Vec<PathBuf>) -> Files {
    Files(
        paths
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path).ok();
                (path, bytes)
            })
            .collect(),
    )
}
