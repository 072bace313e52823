//! What a reload may not take away: the token guard, and every policy.
//!
//! Editors and shell redirection truncate a file, then write it; a reload
//! that reads it between the two (or reads a file cut short) loads a valid
//! file with less in it. Cut before its `[server]` section, it has no
//! token, and the API would open; emptied, it has no policy, and every
//! named check would be a 400. Neither is what anyone writes on purpose
//! into a running service, so a reload refuses both like a bad file: the
//! running configuration stays. A restart applies such a file: that is how
//! the guard is turned off, or every policy removed, on purpose.
//!
//! Tokens revoked one by one, down to none (an empty `api_tokens`, or an
//! emptied tokens file), are not this case: the guard stays on and refuses
//! every call (see `ApiTokens::configured`).

use super::super::{Config, ConfigError, Origin};

/// What the configuration in force has that a reload may not take away.
#[derive(Clone, Copy, Debug)]
pub(in crate::config) struct InForce {
    /// Calls need a token.
    guarded: bool,
    /// Named policies in force.
    policies: usize,
}

impl InForce {
    pub(in crate::config) fn of(config: &Config) -> InForce {
        InForce {
            guarded: config.server.api_tokens.guard_on(),
            policies: config.policies.len(),
        }
    }

    /// Whether `new` keeps what the configuration in force has; the error
    /// names the file, what `new` would take away, and why it is refused.
    pub(in crate::config) fn kept_by(
        &self,
        new: &Config,
        origin: &Origin,
    ) -> Result<(), ConfigError> {
        let mut taken = Vec::new();
        if self.guarded && !new.server.api_tokens.guard_on() {
            taken.push(
                "server.api_tokens: the file sets no API token (neither server.api_tokens nor \
                 server.api_tokens_file), which would turn the token guard off",
            );
        }
        if self.policies > 0 && new.policies.is_empty() {
            taken.push("policies: the file names no policy, which would remove every one");
        }
        if taken.is_empty() {
            return Ok(());
        }
        Err(ConfigError(format!(
            "{}: {}; a reload does not do that (a file read while it is being written \
             looks like this): restart to apply it on purpose",
            origin.0,
            taken.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    const TOKEN: &str = "kept-token-0123456789";

    fn load(text: &str) -> Config {
        Config::resolve(
            Some((std::path::Path::new("slidegate.toml"), text)),
            &Overrides::default(),
        )
        .unwrap_or_else(|error| panic!("{error}"))
    }

    fn refusal(running: &str, new: &str) -> Option<String> {
        let origin = Origin("slidegate.toml".to_owned());
        InForce::of(&load(running))
            .kept_by(&load(new), &origin)
            .err()
            .map(|error| error.to_string())
    }

    const POLICY: &str = "[policies.api]\nlimits = [{ limit = 5, window = \"1s\" }]\n";

    #[test]
    fn a_file_without_the_tokens_in_force_is_refused_naming_them() {
        let guarded = format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\n");
        let refused = refusal(&guarded, POLICY).expect("refused");
        assert!(
            refused.starts_with("slidegate.toml: server.api_tokens:")
                && refused.contains("restart"),
            "{refused}"
        );
        assert_eq!(refusal(&guarded, &guarded), None);
    }

    #[test]
    fn a_file_without_any_policy_is_refused_naming_them() {
        let refused = refusal(POLICY, "").expect("refused");
        assert!(
            refused.contains("policies: the file names no policy"),
            "{refused}"
        );
        // One policy left is a change, not a loss of all.
        let other = POLICY.replace("api", "other");
        assert_eq!(refusal(&format!("{POLICY}{other}"), &other), None);
        // None to lose: nothing refused.
        assert_eq!(refusal("", ""), None);
    }

    #[test]
    fn an_empty_file_names_both() {
        let guarded = format!("{POLICY}[server]\napi_tokens = [\"{TOKEN}\"]\n");
        let refused = refusal(&guarded, "").expect("refused");
        assert!(
            refused.contains("server.api_tokens") && refused.contains("policies:"),
            "{refused}"
        );
    }

    /// Every token revoked keeps the guard on (it refuses every call): a
    /// reload may do that, and may turn a guard on.
    #[test]
    fn an_empty_token_list_and_a_new_guard_are_reloads_like_any() {
        let guarded = format!("[server]\napi_tokens = [\"{TOKEN}\"]\n");
        assert_eq!(refusal(&guarded, "[server]\napi_tokens = []\n"), None);
        assert_eq!(refusal("", &guarded), None);
    }
}
