use super::*;
use crate::config::Config;

fn resolve(text: &str, overrides: &Overrides) -> Result<Config, String> {
    Config::resolve(Some((Path::new("slidegate.toml"), text)), overrides).map_err(|e| e.to_string())
}

const TOKEN: &str = "0123456789abcdef-token";

#[test]
fn defaults_bound_everything_and_guard_nothing() {
    let config = resolve("", &Overrides::default()).unwrap();
    assert_eq!(config.memory_capacity, DEFAULT_MEMORY_CAPACITY);
    assert_eq!(config.server.max_connections, DEFAULT_MAX_CONNECTIONS);
    assert!(config.server.api_tokens.is_empty());
    assert_eq!(config.clock_source, ClockSource::Local);
}

/// An empty `SLIDEGATE_API_TOKENS` (an unset Secret, say) must not
/// stand for "no guard" over the file's tokens: it is an error.
#[test]
fn an_empty_token_variable_is_refused_not_taken_for_an_open_api() {
    let text = format!("[server]\napi_tokens = [\"{TOKEN}\"]\n");
    for empty in ["", ",", " , "] {
        let overrides = Overrides {
            api_tokens: Some(empty.into()),
            ..Overrides::default()
        };
        let error = resolve(&text, &overrides).err().unwrap_or_default();
        assert!(error.contains("SLIDEGATE_API_TOKENS"), "{empty:?}: {error}");
    }
}

#[test]
fn sections_load_and_the_environment_wins() {
    let text = format!(
        "[memcached]\nservers = [\"127.0.0.1:11211\"]\n[memory]\ncapacity = 5000\n\
         [server]\nmax_connections = 7\napi_tokens = [\"{TOKEN}\"]\nmetrics_need_token = true\n\
         [clock]\nsource = \"memcached\"\n"
    );
    let config = resolve(&text, &Overrides::default()).unwrap();
    assert_eq!(config.memory_capacity, 5000);
    assert_eq!(config.server.max_connections, 7);
    assert!(config.server.api_tokens.accepts(TOKEN.as_bytes()));
    assert!(!config.server.api_tokens.accepts(b"0123456789abcdef-tokeN"));
    assert!(config.server.metrics_need_token);
    assert_eq!(config.clock_source, ClockSource::Memcached);
    let overrides = Overrides {
        memory_capacity: Some(9),
        api_tokens: Some(" other-token-0123456789, second-token-0123456789 ".into()),
        ..Overrides::default()
    };
    let config = resolve(&text, &overrides).unwrap();
    assert_eq!(config.memory_capacity, 9);
    assert_eq!(config.server.api_tokens.len(), 2);
    assert!(!config.server.api_tokens.accepts(TOKEN.as_bytes()));
    assert!(config.server.api_tokens.accepts(b"second-token-0123456789"));
}

#[test]
fn a_tokens_file_is_relative_to_the_config_file() {
    let dir = std::env::temp_dir().join(format!("slidegate-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tokens"), format!("# ops\n\n{TOKEN}\n")).unwrap();
    let config = Config::resolve(
        Some((
            &dir.join("slidegate.toml"),
            "[server]\napi_tokens_file = \"tokens\"",
        )),
        &Overrides::default(),
    )
    .unwrap();
    assert!(config.server.api_tokens.accepts(TOKEN.as_bytes()));
    assert_eq!(
        format!("{:?}", config.server.api_tokens),
        "ApiTokens(1 configured)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_values_name_the_field_and_never_the_token() {
    let cases = [
        (
            "[memory]\ncapacity = 0",
            "slidegate.toml: memory.capacity: must be from 1",
        ),
        (
            "[server]\nmax_connections = 0",
            "server.max_connections: must be from 1",
        ),
        (
            "[server]\napi_tokens = [\"short\"]",
            "server.api_tokens: token 0: must be 16",
        ),
        (
            "[server]\napi_tokens = [\"has a space in it, too long\"]",
            "server.api_tokens: token 0: must be printable",
        ),
        (
            "[server]\napi_tokens_file = \"/nonexistent/x\"",
            "server.api_tokens_file: cannot read",
        ),
        (
            "[server]\nmetrics_need_tokens = true",
            "unknown field `metrics_need_tokens`",
        ),
        (
            "[clock]\nsource = \"ntp\"",
            "clock.source: \"ntp\" is not one of",
        ),
        (
            "[clock]\nsource = \"memcached\"",
            "clock.source: \"memcached\" needs",
        ),
    ];
    for (text, expected) in cases {
        let error = resolve(text, &Overrides::default()).unwrap_err();
        assert!(error.contains(expected), "{text:?}: {error}");
        assert!(!error.contains("has a space"), "{error}");
    }
    let overrides = Overrides {
        api_tokens: Some("a-secret-but-short".replace("-but-short", "")),
        ..Overrides::default()
    };
    let error = resolve("", &overrides).unwrap_err();
    assert!(
        error.starts_with("SLIDEGATE_API_TOKENS: token 0:"),
        "{error}"
    );
    assert!(!error.contains("a-secret"), "{error}");
    let overrides = Overrides {
        memory_capacity: Some(0),
        ..Overrides::default()
    };
    let error = resolve("", &overrides).unwrap_err();
    assert!(
        error.starts_with("--memory-capacity (or SLIDEGATE_MEMORY_CAPACITY): "),
        "{error}"
    );
}
