//! The `[memcached]` keys of ElastiCache: Auto Discovery and TLS in
//! transit, resolved from the file, the environment and the flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::keys::key;
use super::{ConfigError, MemcachedSection, Origin, Overrides};

/// How the node list is found and how nodes are reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterConfig {
    /// An ElastiCache configuration endpoint, instead of `servers`.
    pub discovery: Option<String>,
    /// How often to poll it.
    pub discovery_interval: Duration,
    /// TLS to every node (and the endpoint); `None`: plain TCP.
    pub tls: Option<TlsConfig>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Trust this CA instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The name certificates must carry, instead of each node's host.
    pub server_name: Option<String>,
}

pub(super) fn resolve(
    origin: &Origin,
    file: &MemcachedSection,
    overrides: &Overrides,
    file_dir: Option<&Path>,
) -> Result<ClusterConfig, ConfigError> {
    // Where the nodes come from is one setting: a list or an endpoint given
    // by a flag replaces the file's, whichever the file gave (see
    // `memcached::resolve`).
    let from_file = if overrides.memcached.is_some() {
        None
    } else {
        file.discovery.as_deref()
    };
    let discovery = origin.layered(
        key!("memcached.discovery"),
        overrides.memcached_discovery.as_deref(),
        from_file,
        check_endpoint,
    )?;
    let interval_ms = origin
        .bounded(
            key!("memcached.discovery_interval_ms"),
            None,
            file.discovery_interval_ms,
        )?
        .unwrap_or(crate::store::DEFAULT_DISCOVERY_INTERVAL.as_millis() as u64);
    // A relative path in the file is the file's neighbour, as for
    // `server.api_tokens_file` and `rls.config`.
    let ca_file = overrides.memcached_tls_ca.clone().or_else(|| {
        file.tls_ca_file.as_ref().map(|path| match file_dir {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path.clone(),
        })
    });
    // A CA file means TLS: nobody gives one to talk plaintext.
    let tls = overrides.memcached_tls.or(file.tls).unwrap_or(false) || ca_file.is_some();
    if let Some(path) = &ca_file
        && !path.is_file()
    {
        let message = format!("{} is not a readable file", path.display());
        return Err(match &overrides.memcached_tls_ca {
            Some(_) => super::flag_error(key!("memcached.tls_ca_file"), message),
            None => origin.file_error("memcached.tls_ca_file", message),
        });
    }
    if tls && !cfg!(feature = "tls") {
        return Err(ConfigError(
            "memcached TLS is configured, but this build has no `tls` feature".to_owned(),
        ));
    }
    if !tls && file.tls_server_name.is_some() {
        return Err(origin.file_error(
            "memcached.tls_server_name",
            "is only used with tls = true".to_owned(),
        ));
    }
    Ok(ClusterConfig {
        discovery,
        discovery_interval: Duration::from_millis(interval_ms),
        tls: tls.then(|| TlsConfig {
            ca_file,
            server_name: file.tls_server_name.clone(),
        }),
    })
}

pub(super) fn check_endpoint(text: &str) -> Result<String, String> {
    let text = text.trim();
    let well_formed = text.rsplit_once(':').is_some_and(|(host, port)| {
        // An IPv6 host is written in brackets: `::1` alone would read as
        // host `:`, port 1.
        let host_ok = match host.strip_prefix('[') {
            Some(inner) => inner
                .strip_suffix(']')
                .is_some_and(|address| address.parse::<std::net::Ipv6Addr>().is_ok()),
            None => !host.is_empty() && !host.contains(':'),
        };
        host_ok && port.parse::<u16>().is_ok_and(|p| p > 0)
    });
    if well_formed {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not host:port (an IPv6 address in brackets, [::1]:11211), e.g. mycluster.cfg.use1.cache.amazonaws.com:11211"
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Config, Overrides};
    use super::*;

    fn resolve(text: &str, overrides: &Overrides) -> Result<Config, String> {
        Config::resolve(Some((Path::new("slidegate.toml"), text)), overrides)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn discovery_and_tls_from_the_file_and_the_flags() {
        let config = resolve(
            "[memcached]\ndiscovery = \"cfg.example:11211\"\ndiscovery_interval_ms = 5000\ntls = true\ntls_server_name = \"node.example\"",
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            config.cluster.discovery.as_deref(),
            Some("cfg.example:11211")
        );
        assert_eq!(config.cluster.discovery_interval, Duration::from_secs(5));
        assert_eq!(
            config.cluster.tls,
            Some(TlsConfig {
                ca_file: None,
                server_name: Some("node.example".into())
            })
        );
        #[cfg(feature = "memcached")]
        assert!(
            config.memcached_options().is_some(),
            "discovery alone uses Memcached"
        );

        let overrides = Overrides {
            memcached_discovery: Some("other:11211".into()),
            memcached_tls: Some(true),
            ..Overrides::default()
        };
        let config = resolve("", &overrides).unwrap();
        assert_eq!(config.cluster.discovery.as_deref(), Some("other:11211"));
        assert!(config.cluster.tls.is_some());
        assert_eq!(
            resolve("", &Overrides::default()).unwrap().cluster.tls,
            None
        );
    }

    #[test]
    fn bad_cluster_settings_name_their_field() {
        for (text, expected) in [
            (
                "[memcached]\ndiscovery = \"nohost\"",
                "slidegate.toml: memcached.discovery: \"nohost\" is not host:port",
            ),
            (
                "[memcached]\ndiscovery_interval_ms = 10",
                "slidegate.toml: memcached.discovery_interval_ms: must be from 1000",
            ),
            (
                "[memcached]\ntls_ca_file = \"/nonexistent/ca.pem\"",
                "slidegate.toml: memcached.tls_ca_file: /nonexistent/ca.pem is not a readable file",
            ),
            (
                "[memcached]\ntls_server_name = \"x\"",
                "slidegate.toml: memcached.tls_server_name: is only used with tls = true",
            ),
        ] {
            let error = resolve(text, &Overrides::default()).unwrap_err();
            assert!(error.starts_with(expected), "{text:?}: {error}");
        }
        let overrides = Overrides {
            memcached_discovery: Some(":0".into()),
            ..Overrides::default()
        };
        let error = resolve("", &overrides).unwrap_err();
        assert!(
            error.starts_with("--memcached-discovery (or SLIDEGATE_MEMCACHED_DISCOVERY): "),
            "{error}"
        );
    }
}
