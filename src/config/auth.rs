//! The `[auth]` section: forward-auth (`GET /v1/auth`): whose
//! `X-Forwarded-For` is believed, which client networks are never limited,
//! and the status of a refusal. Applied live.

use serde::Deserialize;

use super::net::{IpNet, parse_all};
use super::{ConfigError, Origin};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuthSection {
    trusted_proxies: Option<Vec<String>>,
    deny_status: Option<u16>,
    exempt_addresses: Option<Vec<String>>,
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

/// What the section settles: the forward-auth settings, and the client
/// networks that are never limited (kept with the other exemptions).
pub(super) fn resolve(
    origin: &Origin,
    file: &AuthSection,
) -> Result<(AuthConfig, Vec<IpNet>), ConfigError> {
    let networks = |texts: &Option<Vec<String>>, field: &str| {
        parse_all(texts.as_deref().unwrap_or_default(), field)
            .map_err(|(field, message)| origin.file_error(&field, message))
    };
    let mut auth = AuthConfig {
        trusted_proxies: networks(&file.trusted_proxies, "auth.trusted_proxies")?,
        ..AuthConfig::default()
    };
    if let Some(status) = file.deny_status {
        auth.deny_status =
            check_deny_status(status).map_err(|m| origin.file_error("auth.deny_status", m))?;
    }
    let exempt = networks(&file.exempt_addresses, "auth.exempt_addresses")?;
    Ok((auth, exempt))
}

/// A rejection status for forward-auth, from the file or a query.
pub(crate) fn check_deny_status(status: u16) -> Result<u16, String> {
    if (400..=599).contains(&status) {
        Ok(status)
    } else {
        Err(format!("must be a 4xx or 5xx status, got {status}"))
    }
}
