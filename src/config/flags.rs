//! The command line: every flag, each with its `SLIDEGATE_*` environment
//! twin. Flags win over the environment, which wins over the file. A
//! flag that sets a key of the file takes its name and its twin's from the
//! key's row in `config::keys`.

use std::path::PathBuf;

use super::keys::Key;

/// Flags, each with its environment twin (clap reads the variable when the
/// flag is absent, so flags win over the environment).
#[derive(Clone, Debug, Default, clap::Parser)]
#[command(
    name = "slidegate",
    // The crate version, and the commit when built from a checkout
    // (build.rs).
    version = env!("SLIDEGATE_VERSION"),
    about = "Sliding-window rate limiter on Memcached"
)]
pub struct Overrides {
    /// Load and check everything a start would (the file, the environment,
    /// the flags, the RLS rules, the tokens and CA files), contact
    /// nothing, print what would run and exit: 0 if it would start, 1 with
    /// the error if not.
    #[arg(long)]
    pub check: bool,
    /// TOML configuration file.
    #[arg(long, env = "SLIDEGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to serve on [default: 127.0.0.1:8080].
    #[arg(long = const { Key::flag_of("listen") },
        env = const { Key::env_of("listen") }, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Memcached servers; none means the embedded in-memory store.
    #[arg(
        long = const { Key::flag_of("memcached.servers") },
        env = const { Key::env_of("memcached.servers") },
        value_name = "HOST:PORT,...",
        value_delimiter = ','
    )]
    pub memcached: Option<Vec<String>>,
    /// On how many Memcached nodes each counter lives, 1 to 3 [default: 1].
    #[arg(long = const { Key::flag_of("memcached.replicas") },
        env = const { Key::env_of("memcached.replicas") }, value_name = "N")]
    pub memcached_replicas: Option<u64>,
    /// An ElastiCache configuration endpoint: the node list comes from it.
    #[arg(long = const { Key::flag_of("memcached.discovery") },
        env = const { Key::env_of("memcached.discovery") }, value_name = "HOST:PORT")]
    pub memcached_discovery: Option<String>,
    /// TLS to Memcached (ElastiCache encryption in transit); `false` turns
    /// off the file's `tls = true`.
    #[arg(
        long = const { Key::flag_of("memcached.tls") },
        env = const { Key::env_of("memcached.tls") },
        value_name = "true|false",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub memcached_tls: Option<bool>,
    /// Trust this CA (PEM) for Memcached's TLS instead of the system's roots.
    #[arg(long = const { Key::flag_of("memcached.tls_ca_file") },
        env = const { Key::env_of("memcached.tls_ca_file") }, value_name = "FILE")]
    pub memcached_tls_ca: Option<PathBuf>,
    /// Prefix of every Memcached key [default: sg].
    #[arg(long = const { Key::flag_of("memcached.namespace") },
        env = const { Key::env_of("memcached.namespace") }, value_name = "NS")]
    pub namespace: Option<String>,
    /// What to decide when the store fails [default: allow].
    #[arg(long = const { Key::flag_of("failure.mode") },
        env = const { Key::env_of("failure.mode") }, value_name = "allow|deny|local")]
    pub failure_mode: Option<String>,
    /// Store timeout in milliseconds [default: 50].
    #[arg(long = const { Key::flag_of("memcached.timeout_ms") },
        env = const { Key::env_of("memcached.timeout_ms") }, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Keys kept by the near-cache of hot rejects; 0 turns it off [default: 100000].
    #[arg(long = const { Key::flag_of("near_cache.capacity") },
        env = const { Key::env_of("near_cache.capacity") }, value_name = "KEYS")]
    pub near_cache_capacity: Option<u64>,
    /// How old a near-cache entry may be before it is read again from the store [default: 1000].
    #[arg(long = const { Key::flag_of("near_cache.revalidate_ms") },
        env = const { Key::env_of("near_cache.revalidate_ms") }, value_name = "MS")]
    pub near_cache_revalidate_ms: Option<u64>,
    /// Address to serve Envoy's rate-limit service (RLS v3 gRPC) on; off unless given.
    #[arg(long = const { Key::flag_of("rls.listen") },
        env = const { Key::env_of("rls.listen") }, value_name = "ADDR")]
    pub rls_listen: Option<String>,
    /// envoyproxy/ratelimit YAML configuration: a file or a directory of them.
    #[arg(long = const { Key::flag_of("rls.config") },
        env = const { Key::env_of("rls.config") }, value_name = "PATH")]
    pub rls_config: Option<PathBuf>,
    /// Address to serve Envoy's rate-limit quota service (RLQS v3 gRPC) on; off unless given.
    #[arg(long = const { Key::flag_of("rlqs.listen") },
        env = const { Key::env_of("rlqs.listen") }, value_name = "ADDR")]
    pub rlqs_listen: Option<String>,
    /// Counters the embedded in-memory store holds before it evicts [default: 1000000].
    #[arg(long = const { Key::flag_of("memory.capacity") },
        env = const { Key::env_of("memory.capacity") }, value_name = "COUNTERS")]
    pub memory_capacity: Option<u64>,
    /// After SIGTERM, keep every listener answering this long (`/readyz`
    /// answers 503 meanwhile) before draining [default: 0].
    #[arg(long = const { Key::flag_of("server.shutdown_delay_ms") },
        env = const { Key::env_of("server.shutdown_delay_ms") }, value_name = "MS")]
    pub shutdown_delay_ms: Option<u64>,
    /// How long requests and calls in flight get to finish once the
    /// listeners stop accepting [default: 10000].
    #[arg(long = const { Key::flag_of("server.drain_timeout_ms") },
        env = const { Key::env_of("server.drain_timeout_ms") }, value_name = "MS")]
    pub drain_timeout_ms: Option<u64>,
    /// Log lines as `text` or `json` (one object a line) [default: text].
    #[arg(long = const { Key::flag_of("log.format") },
        env = const { Key::env_of("log.format") }, value_name = "text|json")]
    pub log_format: Option<String>,
    /// Refused decisions logged a second, the rest only counted; 0 turns
    /// it off [default: 0].
    #[arg(long = const { Key::flag_of("log.refusals_per_s") },
        env = const { Key::env_of("log.refusals_per_s") }, value_name = "N")]
    pub log_refusals_per_s: Option<u32>,
    /// Turn off same-key coalescing (concurrent checks of one key sharing
    /// one store exchange); `SLIDEGATE_COALESCE=false` does the same.
    #[arg(long = const { Key::flag_of("memcached.coalesce") })]
    pub no_coalesce: bool,
    /// `SLIDEGATE_COALESCE` (`true` or `false`), the twin of
    /// `--no-coalesce`: read here, not by clap, since it says the opposite.
    #[arg(skip = std::env::var(const { Key::env_of("memcached.coalesce") }).ok())]
    pub coalesce_env: Option<String>,
    /// API tokens, comma-separated, from `SLIDEGATE_API_TOKENS` only: a
    /// flag would show them to anyone who can list processes.
    #[arg(skip = std::env::var(const { Key::env_of("server.api_tokens") }).ok())]
    pub api_tokens: Option<String>,
}
