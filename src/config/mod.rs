//! The service's configuration: a TOML file, then `SLIDEGATE_*` environment
//! variables, then command-line flags, each overriding the one before.
//! Validated once, at start; every message names where the bad value came
//! from (the file or the flag) and the field.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod guard;
pub use guard::{
    ApiTokens, ClockSource, DEFAULT_MAX_CONNECTIONS, DEFAULT_QUIET_TIMEOUT, ServerGuard,
};

use crate::limiter::{DEFAULT_NEAR_CACHE_CAPACITY, DEFAULT_TIMEOUT, FailureMode};
use crate::policy::{
    DEFAULT_MAX_COUNTERS, LimitSpec, MAX_COUNTERS, PLAIN_NAME_RULE, Policy, is_plain_name,
};
use crate::store::DEFAULT_CONNECTIONS;
#[cfg(feature = "memcached")]
use crate::store::MemcachedOptions;

mod cluster;
pub mod reload;
mod rlqs;

pub use rlqs::{BucketRule, RlqsConfig, Unmatched};

pub use cluster::{ClusterConfig, TlsConfig};

pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8080,
));

/// Descriptors one RLS request may carry when `rls.max_descriptors` is not set.
pub const DEFAULT_RLS_MAX_DESCRIPTORS: usize = 64;
/// The highest `rls.max_descriptors`: about what gRPC's 4 MiB message bound
/// lets through anyway.
const MAX_RLS_DESCRIPTORS: u64 = 100_000;

/// How often the configuration file is read for changes by default.
pub const DEFAULT_WATCH: Duration = Duration::from_secs(1);

/// Flags, each with its environment twin (clap reads the variable when the
/// flag is absent, so flags win over the environment).
#[derive(Clone, Debug, Default, clap::Parser)]
#[command(
    name = "slidegate",
    version,
    about = "Sliding-window rate limiter on Memcached"
)]
pub struct Overrides {
    /// TOML configuration file.
    #[arg(long, env = "SLIDEGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to serve on [default: 127.0.0.1:8080].
    #[arg(long, env = "SLIDEGATE_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Memcached servers; none means the embedded in-memory store.
    #[arg(
        long,
        env = "SLIDEGATE_MEMCACHED",
        value_name = "HOST:PORT,...",
        value_delimiter = ','
    )]
    pub memcached: Option<Vec<String>>,
    /// An ElastiCache configuration endpoint: the node list comes from it.
    #[arg(long, env = "SLIDEGATE_MEMCACHED_DISCOVERY", value_name = "HOST:PORT")]
    pub memcached_discovery: Option<String>,
    /// TLS to Memcached (ElastiCache encryption in transit).
    #[arg(long, env = "SLIDEGATE_MEMCACHED_TLS")]
    pub memcached_tls: bool,
    /// Trust this CA (PEM) for Memcached's TLS instead of the system's roots.
    #[arg(long, env = "SLIDEGATE_MEMCACHED_TLS_CA", value_name = "FILE")]
    pub memcached_tls_ca: Option<PathBuf>,
    /// Prefix of every Memcached key [default: sg].
    #[arg(long, env = "SLIDEGATE_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// What to decide when the store fails [default: allow].
    #[arg(long, env = "SLIDEGATE_FAILURE_MODE", value_name = "allow|deny|local")]
    pub failure_mode: Option<String>,
    /// Store timeout in milliseconds [default: 50].
    #[arg(long, env = "SLIDEGATE_TIMEOUT_MS", value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Keys kept by the near-cache of hot rejects; 0 turns it off [default: 100000].
    #[arg(long, env = "SLIDEGATE_NEAR_CACHE_CAPACITY", value_name = "KEYS")]
    pub near_cache_capacity: Option<u64>,
    /// Address to serve Envoy's rate-limit service (RLS v3 gRPC) on; off unless given.
    #[arg(long, env = "SLIDEGATE_RLS_LISTEN", value_name = "ADDR")]
    pub rls_listen: Option<String>,
    /// envoyproxy/ratelimit YAML configuration: a file or a directory of them.
    #[arg(long, env = "SLIDEGATE_RLS_CONFIG", value_name = "PATH")]
    pub rls_config: Option<PathBuf>,
    /// Address to serve Envoy's rate-limit quota service (RLQS v3 gRPC) on; off unless given.
    #[arg(long, env = "SLIDEGATE_RLQS_LISTEN", value_name = "ADDR")]
    pub rlqs_listen: Option<String>,
    /// Counters the embedded in-memory store holds before it evicts [default: 1000000].
    #[arg(long, env = "SLIDEGATE_MEMORY_CAPACITY", value_name = "COUNTERS")]
    pub memory_capacity: Option<u64>,
    /// API tokens, comma-separated, from `SLIDEGATE_API_TOKENS` only: a
    /// flag would show them to anyone who can list processes.
    #[arg(skip = std::env::var("SLIDEGATE_API_TOKENS").ok())]
    pub api_tokens: Option<String>,
}

/// The configuration file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    #[serde(default)]
    memcached: MemcachedSection,
    #[serde(default)]
    near_cache: NearCacheSection,
    #[serde(default)]
    limits: LimitsSection,
    #[serde(default)]
    failure: FailureSection,
    #[serde(default)]
    auth: AuthSection,
    #[serde(default)]
    policies: BTreeMap<String, PolicySection>,
    #[serde(default)]
    rls: RlsSection,
    #[serde(default)]
    rlqs: rlqs::RlqsSection,
    #[serde(default)]
    reload: ReloadSection,
    #[serde(default)]
    memory: guard::MemorySection,
    #[serde(default)]
    server: guard::ServerSection,
    #[serde(default)]
    clock: guard::ClockSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReloadSection {
    watch_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RlsSection {
    listen: Option<String>,
    config: Option<PathBuf>,
    max_descriptors: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemcachedSection {
    servers: Option<Vec<String>>,
    timeout_ms: Option<u64>,
    namespace: Option<String>,
    connections: Option<usize>,
    discovery: Option<String>,
    discovery_interval_ms: Option<u64>,
    tls: Option<bool>,
    tls_ca_file: Option<PathBuf>,
    tls_server_name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NearCacheSection {
    capacity: Option<u64>,
    max_bytes: Option<u64>,
}

/// Bounds on what one check may touch, whoever sends it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSection {
    max_counters: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureSection {
    mode: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthSection {
    trusted_proxies: Option<Vec<String>>,
    deny_status: Option<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicySection {
    limits: Vec<LimitSpec>,
    #[serde(default)]
    shadow: bool,
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
    /// Auto Discovery and TLS (ElastiCache).
    pub cluster: ClusterConfig,
    pub timeout: Duration,
    pub near_cache_capacity: u64,
    /// Bytes the near-cache may hold; 0 turns it off.
    pub near_cache_max_bytes: u64,
    /// The most counters one policy may touch (precision + 1 summed over
    /// its limits), inline or named.
    pub max_counters: usize,
    pub failure_mode: FailureMode,
    pub policies: BTreeMap<String, Policy>,
    pub auth: AuthConfig,
    /// Where to serve Envoy RLS (gRPC); `None`: not served.
    pub rls_listen: Option<SocketAddr>,
    /// envoyproxy/ratelimit YAML rules for RLS: a file or a directory.
    pub rls_config: Option<PathBuf>,
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
}

/// Forward-auth settings (`GET /v1/auth`).
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// The status of a rejection (429 unless set: nginx `auth_request` only
    /// passes 2xx, 401 and 403 on).
    pub deny_status: u16,
}

impl Default for AuthConfig {
    fn default() -> AuthConfig {
        AuthConfig {
            trusted_proxies: Vec::new(),
            deny_status: 429,
        }
    }
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

    /// The same from a file's text, for tests and embedding.
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
        let in_file = |field: &str, message: String| origin.file_error(field, message);

        let listen = origin
            .layered(
                ("listen", overrides.listen.as_deref()),
                ("listen", file.listen.as_deref()),
                parse_listen,
            )?
            .unwrap_or(DEFAULT_LISTEN);

        let servers: Vec<String> = overrides
            .memcached
            .clone()
            .or_else(|| file.memcached.servers.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|server| server.trim().to_owned())
            .filter(|server| !server.is_empty())
            .collect();
        let cluster = cluster::resolve(&origin, &file.memcached, overrides)?;
        if !cfg!(feature = "memcached") && (!servers.is_empty() || cluster.discovery.is_some()) {
            return Err(ConfigError(
                "Memcached servers are configured, but this build has no `memcached` feature"
                    .to_owned(),
            ));
        }

        let namespace = origin
            .layered(
                ("namespace", overrides.namespace.as_deref()),
                ("memcached.namespace", file.memcached.namespace.as_deref()),
                check_namespace,
            )?
            .unwrap_or_else(|| "sg".to_owned());

        let timeout_ms = origin
            .layered(
                ("timeout-ms", overrides.timeout_ms.as_ref()),
                ("memcached.timeout_ms", file.memcached.timeout_ms.as_ref()),
                |ms| check_timeout(*ms),
            )?
            .unwrap_or(DEFAULT_TIMEOUT.as_millis() as u64);

        let connections = match file.memcached.connections {
            Some(count @ 1..=64) => count,
            Some(count) => {
                return Err(in_file(
                    "memcached.connections",
                    format!("must be from 1 to 64, got {count}"),
                ));
            }
            None => DEFAULT_CONNECTIONS,
        };

        let failure_mode = origin
            .layered(
                ("failure-mode", overrides.failure_mode.as_deref()),
                ("failure.mode", file.failure.mode.as_deref()),
                parse_failure_mode,
            )?
            .unwrap_or_default();

        let near_cache_capacity = overrides
            .near_cache_capacity
            .or(file.near_cache.capacity)
            .unwrap_or(DEFAULT_NEAR_CACHE_CAPACITY);
        let near_cache_max_bytes = file
            .near_cache
            .max_bytes
            .unwrap_or(crate::near_cache::DEFAULT_MAX_BYTES);

        let max_counters = match file.limits.max_counters {
            None => DEFAULT_MAX_COUNTERS,
            Some(max) if (2..=MAX_COUNTERS as u64).contains(&max) => max as usize,
            Some(max) => {
                return Err(in_file(
                    "limits.max_counters",
                    format!("must be from 2 to {MAX_COUNTERS}, got {max}"),
                ));
            }
        };

        let mut policies = BTreeMap::new();
        for (name, section) in &file.policies {
            let field = format!("policies.{name}");
            let mut limits = Vec::with_capacity(section.limits.len());
            for (index, spec) in section.limits.iter().enumerate() {
                let limit = spec.to_limit().map_err(|error| {
                    in_file(
                        &format!("{field}.limits[{index}].{}", error.field),
                        error.message,
                    )
                })?;
                limits.push(limit);
            }
            let policy = Policy::new(name.clone(), limits).map_err(|error| match error {
                crate::policy::PolicyError::Name(_) | crate::policy::PolicyError::ReservedName => {
                    in_file(&field, error.to_string())
                }
                _ => in_file(&format!("{field}.limits"), error.to_string()),
            })?;
            policy
                .within(max_counters)
                .map_err(|error| in_file(&format!("{field}.limits"), error.to_string()))?;
            policies.insert(name.clone(), policy.with_shadow(section.shadow));
        }

        let mut auth = AuthConfig::default();
        if let Some(proxies) = &file.auth.trusted_proxies {
            auth.trusted_proxies = proxies
                .iter()
                .enumerate()
                .map(|(index, text)| {
                    IpNet::parse(text)
                        .map_err(|m| in_file(&format!("auth.trusted_proxies[{index}]"), m))
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(status) = file.auth.deny_status {
            auth.deny_status =
                check_deny_status(status).map_err(|m| in_file("auth.deny_status", m))?;
        }

        let rls_listen = origin.layered(
            ("rls-listen", overrides.rls_listen.as_deref()),
            ("rls.listen", file.rls.listen.as_deref()),
            parse_listen,
        )?;
        // A path in the file is relative to the file, as a reader expects.
        let rls_config = overrides.rls_config.clone().or_else(|| {
            file.rls.config.as_ref().map(|path| match &file_dir {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.clone(),
            })
        });
        let rls_max_descriptors = match file.rls.max_descriptors {
            None => DEFAULT_RLS_MAX_DESCRIPTORS,
            Some(max @ 1..=MAX_RLS_DESCRIPTORS) => max as usize,
            Some(max) => {
                return Err(in_file(
                    "rls.max_descriptors",
                    format!("must be from 1 to {MAX_RLS_DESCRIPTORS}, got {max}"),
                ));
            }
        };
        if !cfg!(feature = "grpc") && (rls_listen.is_some() || rls_config.is_some()) {
            return Err(ConfigError(
                "Envoy RLS is configured, but this build has no `grpc` feature".to_owned(),
            ));
        }
        if rls_config.is_some() && rls_listen.is_none() {
            return Err(ConfigError(
                "an RLS configuration is given (--rls-config or rls.config) but no address to serve it on: set --rls-listen (or SLIDEGATE_RLS_LISTEN, or rls.listen)".to_owned(),
            ));
        }

        let rlqs = rlqs::resolve(&origin, overrides, &file.rlqs, max_counters)?;

        let watch = match file.reload.watch_ms {
            None => Some(DEFAULT_WATCH),
            Some(0) => None,
            Some(ms @ 100..=3_600_000) => Some(Duration::from_millis(ms)),
            Some(ms) => {
                return Err(in_file(
                    "reload.watch_ms",
                    format!("must be 0 (off) or from 100 to 3600000 ms, got {ms}"),
                ));
            }
        };
        let guards = guard::resolve(
            &origin,
            overrides,
            &file.memory,
            &file.server,
            &file.clock,
            file_dir.as_deref(),
            !servers.is_empty() || cluster.discovery.is_some(),
        )?;

        Ok(Config {
            listen,
            servers,
            namespace,
            connections,
            cluster,
            timeout: Duration::from_millis(timeout_ms),
            near_cache_capacity,
            near_cache_max_bytes,
            max_counters,
            failure_mode,
            policies,
            auth,
            rls_listen,
            rls_config,
            rls_max_descriptors,
            rlqs,
            watch,
            memory_capacity: guards.memory_capacity,
            server: guards.server,
            clock_source: guards.clock_source,
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

    /// The value of a flag (or of its `SLIDEGATE_*` twin, which clap has
    /// already merged in) if given, else the file's, parsed; `None` when
    /// neither sets it. A bad value is named by where it came from.
    fn layered<V: ?Sized, T>(
        &self,
        (flag, from_flag): (&str, Option<&V>),
        (field, from_file): (&str, Option<&V>),
        parse: impl Fn(&V) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        if let Some(value) = from_flag {
            return parse(value).map(Some).map_err(|message| {
                let twin = format!("SLIDEGATE_{}", flag.to_uppercase().replace('-', "_"));
                ConfigError(format!("--{flag} (or {twin}): {message}"))
            });
        }
        from_file
            .map(|value| parse(value).map_err(|message| self.file_error(field, message)))
            .transpose()
    }
}

fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not an IP address and port, e.g. 127.0.0.1:8080"))
}

fn check_namespace(namespace: &str) -> Result<String, String> {
    if is_plain_name(namespace) {
        Ok(namespace.to_owned())
    } else {
        Err(format!("{namespace:?} must be {PLAIN_NAME_RULE}"))
    }
}

fn check_timeout(ms: u64) -> Result<u64, String> {
    if (1..=60_000).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!("must be from 1 to 60000 ms, got {ms}"))
    }
}

/// A rejection status for forward-auth, from the file or a query.
pub(crate) fn check_deny_status(status: u16) -> Result<u16, String> {
    if (400..=599).contains(&status) {
        Ok(status)
    } else {
        Err(format!("must be a 4xx or 5xx status, got {status}"))
    }
}

pub fn parse_failure_mode(text: &str) -> Result<FailureMode, String> {
    match text {
        "allow" => Ok(FailureMode::Allow),
        "deny" => Ok(FailureMode::Deny),
        "local" => Ok(FailureMode::Local),
        other => Err(format!("{other:?} is not one of allow, deny, local")),
    }
}

/// An IP network: `10.0.0.0/8`, `::1`, `127.0.0.1` (a single address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    address: std::net::IpAddr,
    prefix: u8,
}

impl IpNet {
    pub fn parse(text: &str) -> Result<IpNet, String> {
        let invalid = || format!("{text:?} is not an IP address or network, e.g. 10.0.0.0/8");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: std::net::IpAddr = address.trim().parse().map_err(|_| invalid())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(invalid)?,
            None => bits,
        };
        Ok(IpNet { address, prefix })
    }

    pub fn contains(&self, address: std::net::IpAddr) -> bool {
        let to_bits = |address: std::net::IpAddr| match address {
            std::net::IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, true),
            std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => (u128::from(u32::from(v4)) << 96, true),
                None => (u128::from(v6), false),
            },
        };
        let (network, network_is_v4) = to_bits(self.address);
        let (candidate, candidate_is_v4) = to_bits(address);
        if network_is_v4 != candidate_is_v4 {
            return false;
        }
        // A v4 network sits in the top 32 bits, so its prefix counts from there.
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        network & mask == candidate & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
listen = "127.0.0.1:9090"

[memcached]
servers = ["127.0.0.1:11211"]
timeout_ms = 50
namespace = "sg"

[near_cache]
capacity = 100000

[failure]
mode = "allow"

[policies.api]
limits = [{ limit = 10, window = "1s" },
          { limit = 3000, window = "10m", precision = 10 }]
"#;

    fn resolve(text: &str, overrides: &Overrides) -> Result<Config, String> {
        Config::resolve(Some((Path::new("slidegate.toml"), text)), overrides)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_design_example_loads() {
        let config = resolve(EXAMPLE, &Overrides::default()).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:9090");
        assert_eq!(config.servers, ["127.0.0.1:11211"]);
        assert_eq!(config.timeout, Duration::from_millis(50));
        assert_eq!(config.policies["api"].limits().len(), 2);
        assert_eq!(config.policies["api"].limits()[1].window().precision(), 10);
    }

    #[test]
    fn defaults_need_no_file() {
        let config = Config::resolve(None, &Overrides::default()).unwrap();
        assert_eq!(config.listen, DEFAULT_LISTEN);
        assert_eq!(DEFAULT_LISTEN.to_string(), "127.0.0.1:8080");
        assert!(
            config.servers.is_empty(),
            "no memcached: the in-memory store"
        );
        assert_eq!(config.failure_mode, FailureMode::Allow);
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn flags_and_environment_override_the_file() {
        let overrides = Overrides {
            listen: Some("127.0.0.1:7000".into()),
            memcached: Some(vec!["10.0.0.1:11211".into(), " 10.0.0.2:11211".into()]),
            namespace: Some("prod".into()),
            failure_mode: Some("deny".into()),
            timeout_ms: Some(20),
            near_cache_capacity: Some(0),
            ..Overrides::default()
        };
        let config = resolve(EXAMPLE, &overrides).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:7000");
        assert_eq!(config.servers, ["10.0.0.1:11211", "10.0.0.2:11211"]);
        assert_eq!(config.namespace, "prod");
        assert_eq!(config.failure_mode, FailureMode::Deny);
        assert_eq!(config.timeout, Duration::from_millis(20));
        assert_eq!(config.near_cache_capacity, 0);
        // An empty server list turns Memcached off.
        let overrides = Overrides {
            memcached: Some(vec![String::new()]),
            ..Overrides::default()
        };
        assert!(resolve(EXAMPLE, &overrides).unwrap().servers.is_empty());
    }

    #[test]
    fn bad_values_name_the_file_and_field() {
        let cases = [
            (
                "listen = \"nowhere\"",
                "slidegate.toml: listen: \"nowhere\" is not an IP address",
            ),
            ("[memcached]\nservrs = []", "unknown field `servrs`"),
            (
                "[memcached]\ntimeout_ms = 0",
                "slidegate.toml: memcached.timeout_ms: must be from 1",
            ),
            (
                "[memcached]\nnamespace = \"a b\"",
                "slidegate.toml: memcached.namespace:",
            ),
            (
                "[failure]\nmode = \"maybe\"",
                "slidegate.toml: failure.mode: \"maybe\" is not one of",
            ),
            (
                "[policies.api]\nlimits = [{ limit = 10, window = \"1s\", precision = 7 }]",
                "slidegate.toml: policies.api.limits[0].precision: 7 does not divide",
            ),
            (
                "[policies.api]\nlimits = [{ limit = 0, window = \"1s\" }]",
                "policies.api.limits[0].limit:",
            ),
            (
                "[policies.api]\nlimits = [{ limit = 1, window = \"1y\" }]",
                "policies.api.limits[0].window:",
            ),
            (
                "[policies.api]\nlimits = []",
                "slidegate.toml: policies.api.limits: must not be empty",
            ),
            (
                "[policies.inline]\nlimits = [{ limit = 1, window = \"1s\" }]",
                "policies.inline: the name `inline` is reserved",
            ),
            (
                "[auth]\ntrusted_proxies = [\"10.0.0.0/33\"]",
                "auth.trusted_proxies[0]:",
            ),
            (
                "[auth]\ndeny_status = 200",
                "auth.deny_status: must be a 4xx or 5xx",
            ),
            ("listen = ", "slidegate.toml: TOML parse error"),
        ];
        for (text, expected) in cases {
            let error = resolve(text, &Overrides::default()).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
        let overrides = Overrides {
            failure_mode: Some("open".into()),
            ..Overrides::default()
        };
        let error = resolve("", &overrides).unwrap_err();
        assert!(
            error.starts_with("--failure-mode (or SLIDEGATE_FAILURE_MODE): "),
            "{error}"
        );
    }

    #[test]
    fn every_flag_has_the_environment_twin_its_errors_name() {
        // Origin::layered derives `SLIDEGATE_X_Y` from `--x-y` for messages;
        // the twins clap actually reads must be those names.
        use clap::CommandFactory;
        let command = Overrides::command();
        let flags: Vec<_> = command
            .get_arguments()
            .filter(|arg| arg.get_long().is_some())
            .collect();
        assert_eq!(flags.len(), 14);
        for arg in flags {
            let long = arg.get_long().unwrap_or_default();
            let twin = format!("SLIDEGATE_{}", long.to_uppercase().replace('-', "_"));
            assert_eq!(
                arg.get_env().and_then(|env| env.to_str()),
                Some(twin.as_str()),
                "--{long}"
            );
        }
    }

    #[test]
    fn networks_contain_their_addresses() {
        let net = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.1.2.3".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.0.0.1".parse().unwrap()),
            "v4-mapped v6 peer"
        );
        let single = IpNet::parse("::1").unwrap();
        assert!(single.contains("::1".parse().unwrap()));
        assert!(!single.contains("::2".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(IpNet::parse("nonsense").is_err());
    }
}
