//! Reloading the configuration while serving: the file read again (on
//! SIGHUP, or when its content or the API tokens file's changes), validated
//! like at start, compared with the running configuration, and refused if
//! it would take the token guard or every policy away (`kept.rs`).
//!
//! Change detection reads the file's bytes rather than watching inodes or
//! modification times: a Kubernetes ConfigMap update swaps a `..data`
//! symlink, which leaves the watched path's inode and often its mtime as
//! they were. Reading a small file once a second costs nothing.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use self::files::{read_all, rule_files, watched};
use self::kept::InForce;
use super::{
    ClusterConfig, Config, ConfigError, LogConfig, Origin, Overrides, RlqsConfig, ServerGuard,
    TlsConfig,
};

mod files;
mod kept;

pub use self::files::Files;

/// How often the configuration file is read for changes by default.
pub const DEFAULT_WATCH: Duration = Duration::from_secs(1);

/// The `[reload]` section: how often the files are read for changes.
/// Applied live.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReloadSection {
    watch_ms: Option<u64>,
}

/// `reload.watch_ms`, checked; `None`: only SIGHUP reloads.
pub(super) fn resolve_watch(
    origin: &Origin,
    file: &ReloadSection,
) -> Result<Option<Duration>, ConfigError> {
    match file.watch_ms {
        None => Ok(Some(DEFAULT_WATCH)),
        Some(0) => Ok(None),
        Some(ms @ 100..=3_600_000) => Ok(Some(Duration::from_millis(ms))),
        Some(ms) => Err(origin.file_error(
            "reload.watch_ms",
            format!("must be 0 (off) or from 100 to 3600000 ms, got {ms}"),
        )),
    }
}

/// Every key of the file that a reload puts in force at once. `policies`
/// stands for all of `[policies.*]`.
pub const APPLIED_LIVE: &[&str] = &[
    "policies",
    "auth.trusted_proxies",
    "auth.deny_status",
    "auth.exempt_addresses",
    "server.max_connections",
    "server.api_tokens",
    "server.api_tokens_file",
    "server.metrics_need_token",
    "reload.watch_ms",
    "limits.max_counters",
    "rlqs.assignment_ttl",
    "rlqs.abandon_after",
    "rlqs.unmatched",
    "rlqs.max_report_bytes",
    "rlqs.max_domain_bytes",
    "rlqs.max_label_name_bytes",
    "rlqs.max_label_value_bytes",
    "rlqs.max_tracked_bytes",
    "rlqs.buckets",
    "log.refusals_per_s",
];

/// Every key that only a restart applies: the listeners, the store and
/// what the limiter was built with. A reload that changes one names it
/// and keeps running with the old value.
///
/// The two lists together are every key of the file: a unit test reads the
/// keys from the file's serde structs themselves, so a key added later
/// fails it until it is put in one list; and [`restart_only_changes`]
/// destructures [`Config`] without `..`, so a new field does not compile
/// until it is compared or declared live.
pub const RESTART_ONLY: &[&str] = &[
    "listen",
    "memcached.servers",
    "memcached.timeout_ms",
    "memcached.namespace",
    "memcached.connections",
    "memcached.coalesce",
    "memcached.discovery",
    "memcached.discovery_interval_ms",
    "memcached.tls",
    "memcached.tls_ca_file",
    "memcached.tls_server_name",
    "near_cache.capacity",
    "near_cache.max_bytes",
    "near_cache.revalidate_ms",
    "failure.mode",
    "rls.listen",
    "rls.config",
    "rls.max_descriptors",
    "rlqs.listen",
    "memory.capacity",
    "clock.source",
    "server.shutdown_delay_ms",
    "server.drain_timeout_ms",
    "log.format",
];

/// The configuration the process started with, and how to load the next.
pub struct Reloader {
    overrides: Overrides,
    /// What a restart-only setting is compared with: the value in force.
    started: Config,
    /// The files a reload reads (the configuration, the tokens file and
    /// the RLS rules it names), each with its bytes when last loaded.
    seen: Files,
    /// The RLS rule files the process started with, and their bytes: the
    /// rules are read only at start, so a change is restart-only.
    started_rules: Files,
    /// How often to read the files, as the last loaded configuration says
    /// (it applies live).
    watch: Option<std::time::Duration>,
    /// What the configuration in force has that a reload may not take
    /// away: the token guard, and its policies.
    in_force: InForce,
}

/// A configuration that loaded, with what it cannot apply live.
pub struct Reloaded {
    pub config: Config,
    /// Keys of [`RESTART_ONLY`] whose value differs from the one in force.
    pub needs_restart: Vec<&'static str>,
}

impl Reloader {
    /// Start from the configuration loaded at start, from these flags.
    pub fn new(overrides: Overrides, started: Config) -> Reloader {
        let seen = read_all(watched(&overrides, &started));
        let started_rules = read_all(rule_files(&started));
        Reloader {
            overrides,
            watch: started.watch,
            in_force: InForce::of(&started),
            started,
            seen,
            started_rules,
        }
    }

    pub fn path(&self) -> Option<&PathBuf> {
        self.overrides.config.as_ref()
    }

    /// The configuration the process started with.
    pub fn started(&self) -> &Config {
        &self.started
    }

    /// How often the files are read for changes now (`reload.watch_ms` of
    /// the last configuration that loaded); `None`: only on SIGHUP.
    pub fn watch(&self) -> Option<std::time::Duration> {
        self.watch
    }

    /// Whether the configuration file's content, or the tokens file's,
    /// differs from what was last loaded (or tried). A file that cannot be
    /// read is no change: a ConfigMap swap or an editor may leave the path
    /// missing for an instant, so wait for it to be back rather than fail.
    /// What was loaded is kept meanwhile, so a file back with the same
    /// bytes is no change either (no reload made or counted for it).
    pub fn changed(&self) -> bool {
        self.differs(&self.read())
    }

    /// The watched files as they are now.
    pub fn read(&self) -> Files {
        read_all(self.seen.paths().cloned().collect())
    }

    /// Whether `files` (a [`read`](Self::read)) differ from what was last
    /// loaded, a file that could not be read counting as unchanged (see
    /// [`changed`](Self::changed)).
    pub fn differs(&self, files: &Files) -> bool {
        files
            .0
            .iter()
            .zip(&self.seen.0)
            .any(|((_, now), (_, seen))| now.as_ref().is_some_and(|now| Some(now) != seen.as_ref()))
    }

    /// A reloaded configuration was put in force: its `reload.watch_ms`
    /// applies from now on, and what it has is what the next reload may
    /// not take away. Not before: a file the server refuses after it
    /// loaded leaves the running configuration whole, its watch included.
    pub fn applied(&mut self, config: &Config) {
        self.watch = config.watch;
        self.in_force = InForce::of(config);
    }

    /// Load the files as they are now; see [`reload_from`](Self::reload_from).
    pub fn reload(&mut self) -> Result<Reloaded, ConfigError> {
        self.reload_from(self.read())
    }

    /// Load the configuration from `files` (a [`read`](Self::read): the
    /// bytes the caller saw hold still, not whatever the file holds by
    /// now). On failure the running configuration stays, and the error
    /// names the file and the field. A file that would take the token
    /// guard or every policy away fails too (see `kept.rs`).
    pub fn reload_from(&mut self, files: Files) -> Result<Reloaded, ConfigError> {
        // Kept before loading, so a file that fails is not retried every
        // tick, and one that changes while loading is loaded again.
        self.seen = files;
        let config = self.load()?;
        let paths = watched(&self.overrides, &config);
        if self.seen.paths().ne(paths.iter()) {
            self.seen = read_all(paths);
        }
        self.in_force.kept_by(&config, &self.origin())?;
        let mut needs_restart = restart_only_changes(&self.started, &config);
        if !needs_restart.contains(&"rls.config")
            && read_all(rule_files(&config)) != self.started_rules
        {
            needs_restart.push("rls.config");
        }
        Ok(Reloaded {
            config,
            needs_restart,
        })
    }

    /// The configuration from the file's bytes in `seen`, with the
    /// environment and the flags; the file's own error when it could not be
    /// read.
    fn load(&self) -> Result<Config, ConfigError> {
        let Some(path) = &self.overrides.config else {
            return Config::load(&self.overrides);
        };
        let Some(bytes) = self.seen.bytes_of(path) else {
            return Config::load(&self.overrides);
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|error| ConfigError(format!("cannot read {}: {error}", path.display())))?;
        Config::resolve(Some((path, text)), &self.overrides)
    }

    /// The file a refusal names.
    fn origin(&self) -> Origin {
        Origin(self.overrides.config.as_ref().map_or_else(
            || "configuration".to_owned(),
            |path| path.display().to_string(),
        ))
    }
}

/// The keys of [`RESTART_ONLY`] whose value in `new` differs from the one
/// `running` was started with. Values are compared as resolved (flags and
/// environment applied, the tokens file read), so only what would really
/// change is named.
pub fn restart_only_changes(running: &Config, new: &Config) -> Vec<&'static str> {
    // No `..` in these patterns: a field added to one of these structs does
    // not compile until it is compared here or named as applied live.
    let Config {
        listen,
        servers,
        namespace,
        connections,
        coalesce,
        cluster,
        timeout,
        near_cache_capacity,
        near_cache_max_bytes,
        near_cache_revalidate,
        // Applied live: the policies of the same file were checked against it.
        max_counters: _,
        failure_mode,
        policies: _,
        auth: _,
        exemptions: _,
        rls_listen,
        rls_config,
        rls_max_descriptors,
        rlqs,
        watch: _,
        memory_capacity,
        server,
        clock_source,
        shutdown,
        log,
    } = running;
    let LogConfig {
        format: log_format,
        // Applied live: the rate is read at each refusal.
        refusals_per_s: _,
    } = log;
    let ClusterConfig {
        discovery,
        discovery_interval,
        tls,
    } = cluster;
    let ServerGuard {
        max_connections: _,
        api_tokens: _,
        api_tokens_file: _,
        metrics_need_token: _,
        // Not a key of the file: a constant of the server.
        quiet_timeout: _,
    } = server;
    let RlqsConfig {
        listen: rlqs_listen,
        // Applied live by the RLQS service.
        assignment_ttl: _,
        abandon_after: _,
        unmatched: _,
        bounds: _,
        buckets: _,
    } = rlqs;
    let tls_part = |tls: &Option<TlsConfig>| {
        let TlsConfig {
            ca_file,
            server_name,
        } = tls.clone().unwrap_or_default();
        (ca_file, server_name)
    };
    let (ca_file, server_name) = tls_part(tls);
    let (new_ca_file, new_server_name) = tls_part(&new.cluster.tls);

    let differences = [
        ("listen", *listen != new.listen),
        ("memcached.servers", *servers != new.servers),
        ("memcached.timeout_ms", *timeout != new.timeout),
        ("memcached.namespace", *namespace != new.namespace),
        ("memcached.connections", *connections != new.connections),
        ("memcached.coalesce", *coalesce != new.coalesce),
        ("memcached.discovery", *discovery != new.cluster.discovery),
        (
            "memcached.discovery_interval_ms",
            *discovery_interval != new.cluster.discovery_interval,
        ),
        ("memcached.tls", tls.is_some() != new.cluster.tls.is_some()),
        ("memcached.tls_ca_file", ca_file != new_ca_file),
        ("memcached.tls_server_name", server_name != new_server_name),
        (
            "near_cache.capacity",
            *near_cache_capacity != new.near_cache_capacity,
        ),
        (
            "near_cache.max_bytes",
            *near_cache_max_bytes != new.near_cache_max_bytes,
        ),
        (
            "near_cache.revalidate_ms",
            *near_cache_revalidate != new.near_cache_revalidate,
        ),
        ("failure.mode", *failure_mode != new.failure_mode),
        ("rls.listen", *rls_listen != new.rls_listen),
        ("rls.config", *rls_config != new.rls_config),
        (
            "rls.max_descriptors",
            *rls_max_descriptors != new.rls_max_descriptors,
        ),
        ("rlqs.listen", *rlqs_listen != new.rlqs.listen),
        ("memory.capacity", *memory_capacity != new.memory_capacity),
        ("clock.source", *clock_source != new.clock_source),
        (
            "server.shutdown_delay_ms",
            shutdown.delay != new.shutdown.delay,
        ),
        (
            "server.drain_timeout_ms",
            shutdown.drain_timeout != new.shutdown.drain_timeout,
        ),
        ("log.format", *log_format != new.log.format),
    ];
    differences
        .into_iter()
        .filter_map(|(key, differs)| differs.then_some(key))
        .collect()
}

#[cfg(test)]
mod keys;

#[cfg(test)]
mod tests;
