//! The `[memcached]` section: which nodes, under which namespace, how long
//! to wait for them, over how many connections. Restart only: the store is
//! built once. (Discovery and TLS, ElastiCache's keys of the same section,
//! are `cluster.rs`'s.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::keys::key;
use super::{ClusterConfig, ConfigError, Origin, Overrides, cluster};
use crate::limiter::DEFAULT_TIMEOUT;
use crate::policy::{PLAIN_NAME_RULE, is_plain_name};
use crate::store::DEFAULT_CONNECTIONS;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemcachedSection {
    pub(super) servers: Option<Vec<String>>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) namespace: Option<String>,
    pub(super) connections: Option<usize>,
    pub(super) replicas: Option<u64>,
    pub(super) discovery: Option<String>,
    pub(super) discovery_interval_ms: Option<u64>,
    pub(super) tls: Option<bool>,
    pub(super) tls_ca_file: Option<PathBuf>,
    pub(super) tls_server_name: Option<String>,
    pub(super) coalesce: Option<bool>,
}

/// What the section settles.
pub(super) struct Memcached {
    pub servers: Vec<String>,
    pub namespace: String,
    pub connections: usize,
    pub replicas: usize,
    pub cluster: ClusterConfig,
    pub timeout: Duration,
    pub coalesce: bool,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &MemcachedSection,
    overrides: &Overrides,
    file_dir: Option<&Path>,
) -> Result<Memcached, ConfigError> {
    // Where the nodes come from (a list, or an ElastiCache endpoint) is one
    // setting, layered as every other: a flag (or its environment twin)
    // gives either and replaces the file's choice; one layer giving both
    // is an error, since one would be silently dropped.
    if overrides.memcached.is_some() && overrides.memcached_discovery.is_some() {
        return Err(ConfigError(
            "--memcached (or SLIDEGATE_MEMCACHED) and --memcached-discovery (or \
             SLIDEGATE_MEMCACHED_DISCOVERY): give one, the node list or the endpoint it comes from"
                .to_owned(),
        ));
    }
    let flag_gives_nodes = overrides.memcached.is_some() || overrides.memcached_discovery.is_some();
    if !flag_gives_nodes && file.servers.is_some() && file.discovery.is_some() {
        return Err(origin.file_error(
            "memcached.servers and memcached.discovery",
            "give one, the node list or the endpoint it comes from".to_owned(),
        ));
    }
    let from_flag = overrides.memcached.is_some();
    let given = if flag_gives_nodes {
        overrides.memcached.clone()
    } else {
        file.servers.clone()
    };
    let servers: Vec<String> = given
        .iter()
        .flatten()
        .map(|server| server.trim().to_owned())
        .filter(|server| !server.is_empty())
        .collect();
    // Given but empty (an unset variable in a template, say) is not "no
    // Memcached": each instance would count alone and admit the whole
    // limit, with a warning as the only sign. Leaving it out is how to
    // count in memory.
    if given.is_some() && servers.is_empty() {
        let message = "is given but holds no server: give at least one host:port, or leave it out to count in this process's memory".to_owned();
        return Err(if from_flag {
            super::flag_error(key!("memcached.servers"), message)
        } else {
            origin.file_error("memcached.servers", message)
        });
    }
    // Each must be host:port: a node written without its port would never
    // answer, and under `allow` its share of the keys would go unlimited
    // while the other nodes keep /readyz ready.
    for (index, server) in servers.iter().enumerate() {
        cluster::check_endpoint(server).map_err(|message| {
            if from_flag {
                super::flag_error(key!("memcached.servers"), message)
            } else {
                origin.file_error(&format!("memcached.servers[{index}]"), message)
            }
        })?;
    }
    let cluster = cluster::resolve(origin, file, overrides, file_dir)?;
    if !cfg!(feature = "memcached") && (!servers.is_empty() || cluster.discovery.is_some()) {
        return Err(ConfigError(
            "Memcached servers are configured, but this build has no `memcached` feature"
                .to_owned(),
        ));
    }

    let namespace = origin
        .layered(
            key!("memcached.namespace"),
            overrides.namespace.as_deref(),
            file.namespace.as_deref(),
            check_namespace,
        )?
        .unwrap_or_else(|| "sg".to_owned());

    let timeout_ms = origin
        .bounded(
            key!("memcached.timeout_ms"),
            overrides.timeout_ms,
            file.timeout_ms,
        )?
        .unwrap_or(DEFAULT_TIMEOUT.as_millis() as u64);

    let connections = origin
        .bounded(
            key!("memcached.connections"),
            None,
            file.connections.map(|count| count as u64),
        )?
        .map_or(DEFAULT_CONNECTIONS, |count| count as usize);
    let replicas = origin
        .layered(
            key!("memcached.replicas"),
            overrides.memcached_replicas.as_ref(),
            file.replicas.as_ref(),
            |&replicas| check_replicas(replicas, &servers, cluster.discovery.is_some()),
        )?
        .map_or(1, |replicas| replicas as usize);
    Ok(Memcached {
        servers,
        namespace,
        connections,
        replicas,
        cluster,
        timeout: Duration::from_millis(timeout_ms),
        coalesce: coalesce(file, overrides)?,
    })
}

/// Same-key coalescing: on unless `--no-coalesce`, else `SLIDEGATE_COALESCE`,
/// else `memcached.coalesce`, turns it off.
fn coalesce(file: &MemcachedSection, overrides: &Overrides) -> Result<bool, ConfigError> {
    if overrides.no_coalesce {
        return Ok(false);
    }
    match overrides.coalesce_env.as_deref().map(str::trim) {
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(other) => Err(ConfigError(format!(
            "SLIDEGATE_COALESCE: must be true or false, got {other:?}"
        ))),
        None => Ok(file.coalesce.unwrap_or(true)),
    }
}

/// 1 to 3 copies of each counter, and no more than the nodes listed (a
/// discovered list is not known until the store starts: a key then has as
/// many as there are nodes, up to this).
fn check_replicas(replicas: u64, servers: &[String], discovery: bool) -> Result<u64, String> {
    let replicas = key!("memcached.replicas").check(replicas)?;
    // A server listed twice would hold two of a key's copies: one.
    let distinct = servers
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if !discovery && !servers.is_empty() && replicas as usize > distinct {
        return Err(format!(
            "must not be more than the Memcached servers given ({distinct}), got {replicas}"
        ));
    }
    Ok(replicas)
}

fn check_namespace(namespace: &str) -> Result<String, String> {
    if is_plain_name(namespace) {
        Ok(namespace.to_owned())
    } else {
        Err(format!("{namespace:?} must be {PLAIN_NAME_RULE}"))
    }
}
