//! Which restart-only keys a reloaded configuration changes: compared
//! field by field, so that a field added to the configuration does not
//! compile until it is compared here or declared live.

use super::super::{ClusterConfig, Config, LogConfig, RlqsConfig, ServerGuard, TlsConfig};
#[cfg(doc)]
use super::RESTART_ONLY;

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
        replicas,
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
        ("memcached.replicas", *replicas != new.replicas),
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
