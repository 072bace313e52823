//! Who is never limited: keys of a policy (`[policies.NAME] exempt_keys`,
//! exact or a trailing `*` for a prefix) and client networks of
//! forward-auth (`[auth] exempt_addresses`). Applied live, with the
//! policies and `[auth]` they belong to.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use super::net::IpNet;
use crate::limiter::MAX_KEY_BYTES;

/// The keys one policy never limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPatterns {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl KeyPatterns {
    /// `health-checker` is that key; `internal-*` every key that starts
    /// with `internal-`. A `*` anywhere else is refused rather than taken
    /// literally: a reader of the file would take it for a wildcard.
    /// The error is the index of the bad pattern, and what is wrong.
    pub fn parse<'a>(
        patterns: impl IntoIterator<Item = &'a str>,
    ) -> Result<KeyPatterns, (usize, String)> {
        let mut parsed = KeyPatterns::default();
        for (index, pattern) in patterns.into_iter().enumerate() {
            let (body, is_prefix) = match pattern.strip_suffix('*') {
                Some(prefix) => (prefix, true),
                None => (pattern, false),
            };
            if body.contains('*') {
                return Err((
                    index,
                    format!("{pattern:?}: only a trailing `*` is a wildcard"),
                ));
            }
            if (!is_prefix && body.is_empty()) || body.len() > MAX_KEY_BYTES {
                return Err((
                    index,
                    format!("{pattern:?}: must be 1 to {MAX_KEY_BYTES} bytes"),
                ));
            }
            if is_prefix {
                parsed.prefixes.push(body.to_owned());
            } else {
                parsed.exact.insert(body.to_owned());
            }
        }
        Ok(parsed)
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    pub fn matches(&self, key: &str) -> bool {
        self.exact.contains(key) || self.prefixes.iter().any(|prefix| key.starts_with(prefix))
    }
}

/// Everything exempt, as the configuration in force says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exemptions {
    /// By policy name; only policies that exempt some key.
    pub keys: BTreeMap<String, KeyPatterns>,
    /// Clients of forward-auth never limited (after `trusted_proxies`).
    pub addresses: Vec<IpNet>,
}

impl Exemptions {
    pub fn exempts_key(&self, policy: &str, key: &str) -> bool {
        // The common case, nothing exempt, costs no lookup.
        !self.keys.is_empty()
            && self
                .keys
                .get(policy)
                .is_some_and(|patterns| patterns.matches(key))
    }

    pub fn exempts_address(&self, address: IpAddr) -> bool {
        self.addresses
            .iter()
            .any(|network| network.contains(address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_keys_and_trailing_wildcards_match() {
        let patterns = KeyPatterns::parse(["health-checker", "internal-*"]).unwrap();
        assert!(patterns.matches("health-checker"));
        assert!(!patterns.matches("health-checker-2"));
        assert!(patterns.matches("internal-"));
        assert!(patterns.matches("internal-batch"));
        assert!(!patterns.matches("internal"));
        assert!(!patterns.matches("external-batch"));
        assert!(KeyPatterns::parse(["*"]).unwrap().matches("anything"));
        for bad in ["in*ternal", "*-suffix", ""] {
            let (index, error) = KeyPatterns::parse([bad]).unwrap_err();
            assert_eq!(index, 0, "{bad:?}: {error}");
        }
    }

    #[test]
    fn exemptions_are_per_policy_and_per_network() {
        let exemptions = Exemptions {
            keys: BTreeMap::from([("api".to_owned(), KeyPatterns::parse(["ops-*"]).unwrap())]),
            addresses: vec![IpNet::parse("10.0.0.0/8").unwrap()],
        };
        assert!(exemptions.exempts_key("api", "ops-1"));
        assert!(!exemptions.exempts_key("search", "ops-1"));
        assert!(exemptions.exempts_address("10.1.2.3".parse().unwrap()));
        assert!(!exemptions.exempts_address("192.0.2.1".parse().unwrap()));
    }
}
