//! The service's configuration: a TOML file, then `SLIDEGATE_*` environment
//! variables, then command-line flags, each overriding the one before.
//! Validated once, at start; every message names where the bad value came
//! from (the file or the flag) and the field.
//!
//! One file per section of the file, each with its serde struct and its
//! checks; this file only assembles them. What is known of each key (its
//! type, default, bounds, flag, variable, whether a reload applies it) is
//! one row of the table in `keys.rs`, which the flags, the bounds checks,
//! the reload's lists and the book's configuration reference all read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use self::keys::{Key, key};

mod auth;
mod check;
mod cluster;
mod exempt;
mod failure;
mod flags;
mod guard;
pub mod keys;
mod limits;
mod log;
mod memcached;
mod near_cache;
mod net;
mod policies;
pub mod reload;
pub(crate) mod rlqs;
pub(crate) mod rls;
mod shutdown;

pub use auth::AuthConfig;
pub(crate) use auth::check_deny_status;
pub use check::{check, check_command};
pub use cluster::{ClusterConfig, TlsConfig};
pub use exempt::{Exemptions, KeyPatterns};
pub use failure::parse_failure_mode;
pub use flags::Overrides;
pub use guard::{
    ApiTokens, ClockSource, DEFAULT_MAX_CONNECTIONS, DEFAULT_QUIET_TIMEOUT, ServerGuard,
};
pub use log::{LogConfig, LogFormat, early_log_format, install_logging, parse_log_format};
use memcached::MemcachedSection;
pub use net::IpNet;
pub use reload::DEFAULT_WATCH;
pub use rlqs::{BucketRule, RlqsBounds, RlqsConfig, Unmatched};
pub use rls::DEFAULT_RLS_MAX_DESCRIPTORS;
pub use shutdown::{DEFAULT_DRAIN_TIMEOUT, ShutdownConfig};

use crate::limiter::FailureMode;
use crate::policy::Policy;
#[cfg(feature = "memcached")]
use crate::store::MemcachedOptions;

pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8080,
));

/// The configuration file, as written: one field per section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    #[serde(default)]
    memcached: MemcachedSection,
    #[serde(default)]
    near_cache: near_cache::NearCacheSection,
    #[serde(default)]
    limits: limits::LimitsSection,
    #[serde(default)]
    failure: failure::FailureSection,
    #[serde(default)]
    auth: auth::AuthSection,
    #[serde(default)]
    policies: BTreeMap<String, policies::PolicySection>,
    #[serde(default)]
    rls: rls::RlsSection,
    #[serde(default)]
    rlqs: rlqs::RlqsSection,
    #[serde(default)]
    reload: reload::ReloadSection,
    #[serde(default)]
    memory: guard::MemorySection,
    #[serde(default)]
    server: guard::ServerSection,
    #[serde(default)]
    clock: guard::ClockSection,
    #[serde(default)]
    log: log::LogSection,
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// Memcached servers; empty means the embedded in-memory store.
    pub servers: Vec<String>,
    pub namespace: String,
    /// Multiplexed connections per Memcached server.
    pub connections: usize,
    /// On how many Memcached nodes each counter lives.
    pub replicas: usize,
    /// Whether concurrent checks of one key share one store exchange.
    pub coalesce: bool,
    /// Auto Discovery and TLS (ElastiCache).
    pub cluster: ClusterConfig,
    pub timeout: Duration,
    pub near_cache_capacity: u64,
    /// Bytes the near-cache may hold; 0 turns it off.
    pub near_cache_max_bytes: u64,
    /// How old a near-cache entry may be before the store is read again.
    pub near_cache_revalidate: Duration,
    /// The most counters one policy may touch (precision + 1 summed over
    /// its limits), inline or named.
    pub max_counters: usize,
    pub failure_mode: FailureMode,
    pub policies: BTreeMap<String, Policy>,
    pub auth: AuthConfig,
    /// Keys of policies and forward-auth clients that are never limited.
    pub exemptions: Exemptions,
    /// Where to serve Envoy RLS (gRPC); `None`: not served.
    pub rls_listen: Option<SocketAddr>,
    /// envoyproxy/ratelimit YAML rules for RLS: a file or a directory.
    pub rls_config: Option<std::path::PathBuf>,
    /// The most descriptors one RLS request may carry.
    pub rls_max_descriptors: usize,
    /// Envoy RLQS: its listener and bucket rules.
    pub rlqs: RlqsConfig,
    /// How often the file is read for changes, to reload it; `None`: only
    /// on SIGHUP.
    pub watch: Option<Duration>,
    /// Counters the embedded store holds before it evicts.
    pub memory_capacity: usize,
    /// Connection cap and API tokens of the HTTP listener.
    pub server: ServerGuard,
    /// Where decisions read the time.
    pub clock_source: ClockSource,
    /// How long the listeners keep answering after SIGTERM, and how long
    /// what is in flight then gets.
    pub shutdown: ShutdownConfig,
    /// How lines are written, and how many refusals a second are logged.
    pub log: LogConfig,
}

/// A configuration that cannot be used; the message says where and why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl Config {
    /// The file named by `overrides.config` (if any), overridden by the
    /// environment and the flags.
    pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
        let file = match &overrides.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| {
                    ConfigError(format!("cannot read {}: {error}", path.display()))
                })?;
                Some((path.as_path(), text))
            }
            None => None,
        };
        Config::resolve(
            file.as_ref().map(|(path, text)| (*path, text.as_str())),
            overrides,
        )
    }

    /// The same from a file's text, for tests and embedding: each section
    /// resolved by its own module, in the order their checks depend on.
    pub fn resolve(
        file: Option<(&Path, &str)>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let file_dir = file.and_then(|(path, _)| path.parent()).map(Path::to_owned);
        let (origin, file) = match file {
            Some((path, text)) => {
                let parsed: FileConfig = toml::from_str(text)
                    .map_err(|error| ConfigError(format!("{}: {error}", path.display())))?;
                (path.display().to_string(), parsed)
            }
            None => ("configuration".to_owned(), FileConfig::default()),
        };
        let origin = Origin(origin);

        let listen = origin
            .layered(
                key!("listen"),
                overrides.listen.as_deref(),
                file.listen.as_deref(),
                parse_listen,
            )?
            .unwrap_or(DEFAULT_LISTEN);
        let store = memcached::resolve(&origin, &file.memcached, overrides, file_dir.as_deref())?;
        let failure_mode = failure::resolve(&origin, &file.failure, overrides)?;
        let near_cache = near_cache::resolve(&origin, &file.near_cache, overrides)?;
        let max_counters = limits::resolve(&origin, &file.limits)?;
        let policies = policies::resolve(&origin, &file.policies, max_counters)?;
        let (auth, exempt_addresses) = auth::resolve(&origin, &file.auth)?;
        let rls = rls::resolve(&origin, &file.rls, overrides, file_dir.as_deref())?;
        let rlqs = rlqs::resolve(&origin, overrides, &file.rlqs, max_counters)?;
        let watch = reload::resolve_watch(&origin, &file.reload)?;
        let log = log::resolve(&origin, &file.log, overrides)?;
        let guards = guard::resolve(
            &origin,
            overrides,
            &file.memory,
            &file.server,
            &file.clock,
            file_dir.as_deref(),
            !store.servers.is_empty() || store.cluster.discovery.is_some(),
        )?;
        let shutdown = shutdown::resolve(
            &origin,
            overrides,
            shutdown::ShutdownKeys {
                delay_ms: file.server.shutdown_delay_ms,
                drain_timeout_ms: file.server.drain_timeout_ms,
            },
        )?;

        Ok(Config {
            listen,
            servers: store.servers,
            namespace: store.namespace,
            connections: store.connections,
            replicas: store.replicas,
            coalesce: store.coalesce,
            cluster: store.cluster,
            timeout: store.timeout,
            near_cache_capacity: near_cache.capacity,
            near_cache_max_bytes: near_cache.max_bytes,
            near_cache_revalidate: near_cache.revalidate,
            max_counters,
            failure_mode,
            policies: policies.policies,
            auth,
            exemptions: Exemptions {
                keys: policies.exempt_keys,
                addresses: exempt_addresses,
            },
            rls_listen: rls.listen,
            rls_config: rls.config,
            rls_max_descriptors: rls.max_descriptors,
            rlqs,
            watch,
            memory_capacity: guards.memory_capacity,
            server: guards.server,
            clock_source: guards.clock_source,
            shutdown,
            log,
        })
    }

    #[cfg(feature = "memcached")]
    pub fn memcached_options(&self) -> Option<MemcachedOptions> {
        let configured = !self.servers.is_empty() || self.cluster.discovery.is_some();
        configured.then(|| MemcachedOptions {
            servers: self.servers.clone(),
            discovery: self.cluster.discovery.clone(),
            discovery_interval: self.cluster.discovery_interval,
            tls: self
                .cluster
                .tls
                .as_ref()
                .map(|tls| crate::store::TlsOptions {
                    ca_file: tls.ca_file.clone(),
                    server_name: tls.server_name.clone(),
                }),
            namespace: self.namespace.clone(),
            timeout: self.timeout,
            connections: self.connections,
            replicas: self.replicas,
            ..MemcachedOptions::default()
        })
    }
}

/// The file a configuration came from, for messages that name it.
struct Origin(String);

impl Origin {
    fn file_error(&self, field: &str, message: String) -> ConfigError {
        ConfigError(format!("{}: {field}: {message}", self.0))
    }

    /// The value of `key`'s flag (or of its environment twin, which clap
    /// has already merged in) if given, else the file's, parsed; `None`
    /// when neither sets it. A bad value is named by where it came from.
    fn layered<V: ?Sized, T>(
        &self,
        key: &Key,
        from_flag: Option<&V>,
        from_file: Option<&V>,
        parse: impl Fn(&V) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        if let Some(value) = from_flag {
            return parse(value)
                .map(Some)
                .map_err(|message| flag_error(key, message));
        }
        from_file
            .map(|value| parse(value).map_err(|message| self.file_error(key.name, message)))
            .transpose()
    }

    /// A number [`layered`](Self::layered), within `key`'s bounds.
    fn bounded(
        &self,
        key: &Key,
        from_flag: Option<u64>,
        from_file: Option<u64>,
    ) -> Result<Option<u64>, ConfigError> {
        self.layered(key, from_flag.as_ref(), from_file.as_ref(), |&value| {
            key.check(value)
        })
    }
}

/// A bad value given by `key`'s flag or its environment twin, named so.
fn flag_error(key: &Key, message: String) -> ConfigError {
    let flag = key.flag.unwrap_or(key.name);
    match key.env {
        Some(twin) => ConfigError(format!("--{flag} (or {twin}): {message}")),
        None => ConfigError(format!("--{flag}: {message}")),
    }
}

fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address and port, e.g. 127.0.0.1:8080"))
}

#[cfg(test)]
mod tests;
