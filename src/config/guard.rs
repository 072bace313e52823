//! The configuration of what bounds and guards the service: the embedded
//! store's capacity (`[memory]`), the connection cap and API tokens
//! (`[server]`), and the clock decisions read (`[clock]`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::keys::key;
use super::{ConfigError, Origin, Overrides};
use crate::store::DEFAULT_MEMORY_CAPACITY;

/// Connections served at once when none is configured.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long a gRPC connection may send nothing, and an HTTP/1 one start no
/// request.
pub const DEFAULT_QUIET_TIMEOUT: Duration = Duration::from_secs(10);
/// Shorter tokens can be guessed; longer ones are not tokens.
const TOKEN_BYTES: std::ops::RangeInclusive<usize> = 16..=4096;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemorySection {
    capacity: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerSection {
    max_connections: Option<u64>,
    api_tokens: Option<Vec<String>>,
    api_tokens_file: Option<PathBuf>,
    metrics_need_token: Option<bool>,
    /// Resolved by `shutdown.rs`, which owns them.
    pub(super) shutdown_delay_ms: Option<u64>,
    pub(super) drain_timeout_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClockSection {
    source: Option<String>,
}

/// How the HTTP listener guards itself.
#[derive(Clone, Debug)]
pub struct ServerGuard {
    /// Connections served at once; past it, new ones are closed at once.
    pub max_connections: usize,
    /// When not empty, the API needs `Authorization: Bearer <token>`.
    pub api_tokens: ApiTokens,
    /// The file some of them were read from (`server.api_tokens_file`,
    /// resolved), watched for changes like the configuration file.
    pub api_tokens_file: Option<PathBuf>,
    /// Whether `/metrics` needs a token too (when tokens are set).
    pub metrics_need_token: bool,
    /// A gRPC (RLS) connection that sends nothing for this long is closed,
    /// so idle connections do not hold places under the cap forever; the
    /// server pings every connection three times as often, which a live
    /// HTTP/2 peer answers, so Envoy's idle connections stay open. An
    /// HTTP/1 connection on which no request starts for this long (idle,
    /// or trickling a head) is closed too.
    pub quiet_timeout: Duration,
}

impl Default for ServerGuard {
    fn default() -> ServerGuard {
        ServerGuard {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            api_tokens: ApiTokens::default(),
            api_tokens_file: None,
            metrics_need_token: false,
            quiet_timeout: DEFAULT_QUIET_TIMEOUT,
        }
    }
}

/// Where decisions read the time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockSource {
    /// This host's clock.
    #[default]
    Local,
    /// The first Memcached node's clock, through an estimated offset.
    Memcached,
}

/// The accepted API tokens. Only their BLAKE3 hashes are kept, so a
/// comparison takes the same time whatever the presented token's length
/// and content, and a debug print or a core dump shows no token.
#[derive(Clone, Default)]
pub struct ApiTokens {
    hashes: Vec<[u8; 32]>,
    /// Tokens were configured, even if none is left (every one revoked, or
    /// a tokens file read empty mid-write): the guard stays on and refuses
    /// every call, rather than turning off.
    configured: bool,
}

impl ApiTokens {
    /// Tokens as given; the error says which one is wrong, never what it is.
    pub fn new<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Result<ApiTokens, String> {
        let mut hashes = Vec::new();
        for (index, token) in tokens.into_iter().enumerate() {
            if !TOKEN_BYTES.contains(&token.len()) {
                return Err(format!(
                    "token {index}: must be {} to {} bytes, got {}",
                    TOKEN_BYTES.start(),
                    TOKEN_BYTES.end(),
                    token.len()
                ));
            }
            if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
                return Err(format!(
                    "token {index}: must be printable ASCII without spaces"
                ));
            }
            hashes.push(*blake3::hash(token.as_bytes()).as_bytes());
        }
        let configured = !hashes.is_empty();
        Ok(ApiTokens { hashes, configured })
    }

    /// The same tokens, configured even when there are none: the guard is
    /// on (`server.api_tokens` written, or `server.api_tokens_file` named).
    pub fn configured(mut self) -> ApiTokens {
        self.configured = true;
        self
    }

    /// Whether calls need a token: tokens were configured, even if none
    /// is left to accept.
    pub fn guard_on(&self) -> bool {
        self.configured
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether `presented` is one of the tokens, in time that does not
    /// depend on which bytes match: every hash is compared in full.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let presented = blake3::hash(presented);
        let presented = presented.as_bytes();
        let mut found = 0u8;
        for hash in &self.hashes {
            let difference = hash
                .iter()
                .zip(presented)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            found |= u8::from(std::hint::black_box(difference) == 0);
        }
        found == 1
    }
}

impl fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiTokens({} configured)", self.hashes.len())
    }
}

/// What [`resolve`] settles.
pub(super) struct Guards {
    pub memory_capacity: usize,
    pub server: ServerGuard,
    pub clock_source: ClockSource,
}

pub(super) fn resolve(
    origin: &Origin,
    overrides: &Overrides,
    memory: &MemorySection,
    server: &ServerSection,
    clock: &ClockSection,
    file_dir: Option<&Path>,
    has_servers: bool,
) -> Result<Guards, ConfigError> {
    let memory_capacity = origin
        .bounded(
            key!("memory.capacity"),
            overrides.memory_capacity,
            memory.capacity,
        )?
        .map_or(DEFAULT_MEMORY_CAPACITY, |count| count as usize);

    let max_connections = origin
        .bounded(key!("server.max_connections"), None, server.max_connections)?
        .map_or(DEFAULT_MAX_CONNECTIONS, |count| count as usize);

    // The environment wins over the file, as everywhere; within the file,
    // the list and the file add up.
    let mut api_tokens_file = None;
    let api_tokens = match &overrides.api_tokens {
        Some(list) => {
            let listed: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|token| !token.is_empty())
                .collect();
            // Set but empty (an unset Secret, say): not taken for "no
            // guard", which would override the file's tokens and open the
            // API without a word.
            if listed.is_empty() {
                return Err(ConfigError(
                    "SLIDEGATE_API_TOKENS: is set but holds no token: give at least one, or unset it"
                        .to_owned(),
                ));
            }
            ApiTokens::new(listed)
                .map_err(|message| ConfigError(format!("SLIDEGATE_API_TOKENS: {message}")))?
                .configured()
        }
        None => {
            let mut tokens: Vec<String> = Vec::new();
            if let Some(listed) = &server.api_tokens {
                ApiTokens::new(listed.iter().map(String::as_str))
                    .map_err(|message| origin.file_error("server.api_tokens", message))?;
                tokens.extend(listed.iter().cloned());
            }
            if let Some(path) = &server.api_tokens_file {
                let path = match file_dir {
                    Some(dir) if path.is_relative() => dir.join(path),
                    _ => path.clone(),
                };
                let field = "server.api_tokens_file";
                let text = std::fs::read_to_string(&path).map_err(|error| {
                    origin.file_error(field, format!("cannot read {}: {error}", path.display()))
                })?;
                let from_file: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty() && !line.starts_with('#'))
                    .collect();
                ApiTokens::new(from_file.iter().copied()).map_err(|message| {
                    origin.file_error(field, format!("{}: {message}", path.display()))
                })?;
                tokens.extend(from_file.into_iter().map(str::to_owned));
                api_tokens_file = Some(path);
            }
            let written = server.api_tokens.is_some() || server.api_tokens_file.is_some();
            let tokens = ApiTokens::new(tokens.iter().map(String::as_str))
                .map_err(|message| origin.file_error("server.api_tokens", message))?;
            if written { tokens.configured() } else { tokens }
        }
    };

    let clock_source = match clock.source.as_deref() {
        None | Some("local") => ClockSource::Local,
        Some("memcached") if has_servers => ClockSource::Memcached,
        Some("memcached") => {
            return Err(origin.file_error(
                "clock.source",
                "\"memcached\" needs Memcached servers (memcached.servers or --memcached)"
                    .to_owned(),
            ));
        }
        Some(other) => {
            return Err(origin.file_error(
                "clock.source",
                format!("{other:?} is not one of local, memcached"),
            ));
        }
    };

    Ok(Guards {
        memory_capacity,
        server: ServerGuard {
            max_connections,
            api_tokens,
            api_tokens_file,
            metrics_need_token: server.metrics_need_token.unwrap_or(false),
            quiet_timeout: DEFAULT_QUIET_TIMEOUT,
        },
        clock_source,
    })
}

#[cfg(test)]
mod tests;
