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
}

/// The files whose content `config` was loaded from, or (the RLS rules)
/// that the process read at start.
pub(super) fn watched(overrides: &Overrides, config: &Config) -> Vec<PathBuf> {
    overrides
        .config
        .iter()
        .chain(&config.server.api_tokens_file)
        .cloned()
        .chain(rule_files(config))
        .collect()
}

/// The RLS rule files `config` names, as the RLS service reads them; none
/// when it names none, or a directory that cannot be listed (its listing
/// failing at start stops the process, so it is a change).
pub(super) fn rule_files(config: &Config) -> Vec<PathBuf> {
    config
        .rls_config
        .as_deref()
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
