//! The configuration reference of the book
//! (`docs/src/reference/configuration.md`), written from [`KEYS`] and the
//! command line clap parses, so that it says what the loader does. A test
//! holds the committed page to it.

use std::fmt::Write;

use clap::CommandFactory;

use super::{Bounds, KEYS, Key, Reload, Type, Value, duration};
use crate::config::Overrides;

/// Where the page lives in the repository, and how to write it again.
pub const PAGE: &str = "docs/src/reference/configuration.md";
pub const REGENERATE: &str = "SLIDEGATE_BLESS=1 cargo test --test configuration_reference";

/// The page, in Markdown.
pub fn reference() -> String {
    let mut page = String::new();
    page.push_str("# Configuration reference\n\n");
    let _ = writeln!(
        page,
        "<!-- Written from the code (src/config/keys/table.rs): do not edit. \
         Regenerate with `{REGENERATE}`. -->\n"
    );
    page.push_str(INTRODUCTION);
    page.push_str("\n| key | default | flag | on reload |\n|---|---|---|---|\n");
    for key in KEYS {
        let _ = writeln!(
            page,
            "| [`{}`](#{}) | {} | {} | {} |",
            key.name,
            anchor(key.name),
            default(key),
            key.flag
                .map_or("none".to_owned(), |flag| format!("`--{flag}`")),
            reload(key.reload),
        );
    }
    for key in KEYS {
        section(&mut page, key);
    }
    command_line_only(&mut page);
    page
}

const INTRODUCTION: &str = "\
slidegate reads a TOML file (`--config FILE`, or `SLIDEGATE_CONFIG`), then \
its `SLIDEGATE_*` environment variables, then its command-line flags, each \
overriding the one before. A value out of its range, or of the wrong type, \
stops the start with a message naming the file or the flag, the key and \
what is wrong; `slidegate --check` loads everything a start would and \
contacts nothing.

A reload (SIGHUP, or a change of the file) puts a key marked *applied live* \
in force at once. A changed key marked *needs a restart* is named in the \
log and in the metric `slidegate_config_restart_pending`, and the running \
value stays until the next start.
";

fn section(page: &mut String, key: &Key) {
    let _ = writeln!(page, "\n## {}\n\n{}\n", key.name, key.about);
    let _ = writeln!(page, "- Type: {}", kind(key.kind));
    let _ = writeln!(page, "- Default: {}", default(key));
    let _ = writeln!(page, "- Range: {}", range(key));
    let flag = key
        .flag
        .map_or("none".to_owned(), |flag| format!("`--{flag}`"));
    let _ = writeln!(page, "- Flag: {flag}");
    let env = key.env.map_or("none".to_owned(), |env| format!("`{env}`"));
    let _ = writeln!(page, "- Environment: {env}");
    let _ = writeln!(page, "- On reload: {}", reload(key.reload));
}

/// The flags that set no key of the file, from clap itself.
fn command_line_only(page: &mut String) {
    page.push_str("\n## Command-line only\n\nThese flags set no key of the file.\n\n");
    let command = Overrides::command();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if KEYS.iter().any(|key| key.flag == Some(long)) {
            continue;
        }
        let mut help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        if !help.ends_with('.') {
            help.push('.');
        }
        let env = arg
            .get_env()
            .map(|env| format!(" (or `{}`)", env.to_string_lossy()))
            .unwrap_or_default();
        let _ = writeln!(page, "- `--{long}`{env}: {help}");
    }
    page.push_str(
        "- `--help`: print the flags and exit.\n- `--version`: print the version and exit.\n",
    );
}

fn kind(kind: Type) -> String {
    match kind {
        Type::Integer("") => "integer".to_owned(),
        Type::Integer(unit) => format!("integer ({unit})"),
        Type::Boolean => "boolean".to_owned(),
        Type::String(form) => format!("string ({form})"),
        Type::OneOf(choices) => {
            let quoted: Vec<String> = choices.iter().map(|c| format!("`\"{c}\"`")).collect();
            format!("string, one of {}", quoted.join(", "))
        }
        Type::Duration => "duration string (`250ms`, `10s`, `1m`, `1h`, `1d`)".to_owned(),
        Type::List(what) => format!("array of {what}"),
        Type::Table => "table".to_owned(),
    }
}

const MIB: u64 = 1 << 20;

fn default(key: &Key) -> String {
    match key.default {
        Value::Integer(value)
            if key.kind == Type::Integer("bytes") && value.is_multiple_of(MIB) =>
        {
            format!("`{value}` ({} MiB)", value / MIB)
        }
        Value::Integer(value) => format!("`{value}`"),
        Value::Boolean(value) => format!("`{value}`"),
        Value::String(text) => format!("`\"{text}\"`"),
        Value::Unset(meaning) => meaning.to_owned(),
    }
}

fn range(key: &Key) -> String {
    let number = |value: u64| match key.kind {
        Type::Duration => duration(value),
        _ => value.to_string(),
    };
    match key.bounds {
        Bounds::Any if matches!(key.kind, Type::OneOf(_)) => "one of the above".to_owned(),
        Bounds::Any => "any".to_owned(),
        Bounds::Between(least, most) => format!("{} to {}", number(least), number(most)),
        Bounds::ZeroOr(least, most) => {
            format!("0 (off), or {} to {}", number(least), number(most))
        }
        Bounds::Rule(rule) => rule.to_owned(),
    }
}

fn reload(reload: Reload) -> &'static str {
    match reload {
        Reload::Live => "applied live",
        Reload::Restart => "needs a restart",
    }
}

/// The id mdBook gives a heading: lower case, letters, digits, `_` and `-`
/// kept, spaces made `-`, the rest dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}
