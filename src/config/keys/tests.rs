//! The table of keys against what the code does: the file's serde structs,
//! the flags clap parses, the defaults and the bounds the loader settles.
//! (Whether a reload applies each key as its row says is held by
//! `reload/tests.rs`: `restart_only_changes` names exactly the restart
//! rows.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::{CommandFactory, Parser};

use super::{Bounds, KEYS, Key, Type, Value, duration};
use crate::config::reload::keys::file_key_types;
use crate::config::{Config, Overrides};

/// Flags that set no key of the file.
const COMMAND_LINE_ONLY: &[&str] = &["check", "config"];

/// Keys whose variable clap does not read, since it says the opposite of
/// the flag (`--no-coalesce`, `SLIDEGATE_COALESCE=true`): read by hand,
/// by the row's name.
const VARIABLE_READ_BY_HAND: &[&str] = &["memcached.coalesce"];

fn toml_type(kind: Type) -> &'static str {
    match kind {
        Type::Integer(_) => "integer",
        Type::Boolean => "boolean",
        Type::String(_) | Type::OneOf(_) | Type::Duration => "string",
        Type::List(_) => "array",
        Type::Table => "table",
    }
}

#[test]
fn every_key_the_file_accepts_has_one_row_of_its_type() {
    let accepted = file_key_types();
    assert!(accepted.contains_key("policies.NAME.limits[].window"));
    let mut rows = BTreeMap::new();
    for key in KEYS {
        let twice = rows.insert(key.name.to_owned(), toml_type(key.kind));
        assert!(twice.is_none(), "{} has two rows", key.name);
    }
    let missing: Vec<_> = accepted.keys().filter(|k| !rows.contains_key(*k)).collect();
    assert!(
        missing.is_empty(),
        "keys the file accepts without a row in config/keys/table.rs (add one: its type, \
         default, bounds, flag, variable, reload, what it is for): {missing:?}"
    );
    let stale: Vec<_> = rows.keys().filter(|k| !accepted.contains_key(*k)).collect();
    assert!(
        stale.is_empty(),
        "rows of config/keys/table.rs the file does not accept: {stale:?}"
    );
    let wrong: Vec<_> = accepted
        .iter()
        .filter(|(name, kind)| rows[*name] != **kind)
        .map(|(name, kind)| format!("{name}: the file takes {kind}, the row says {}", rows[name]))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    for key in KEYS {
        assert!(!key.about.is_empty(), "{}: say what it is for", key.name);
    }
}

#[test]
fn every_flag_is_a_rows_with_the_rows_variable() {
    let command = Overrides::command();
    let mut seen = BTreeSet::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        let clap_env = arg.get_env().map(|env| env.to_string_lossy().into_owned());
        let Some(key) = KEYS.iter().find(|key| key.flag == Some(long)) else {
            assert!(
                COMMAND_LINE_ONLY.contains(&long),
                "--{long} sets no row's key: give the key's row the flag"
            );
            continue;
        };
        seen.insert(key.name);
        if VARIABLE_READ_BY_HAND.contains(&key.name) {
            assert_eq!(clap_env, None, "--{long}");
        } else {
            assert_eq!(clap_env.as_deref(), key.env, "--{long}: its variable");
        }
    }
    let flagged: BTreeSet<&str> = KEYS
        .iter()
        .filter(|key| key.flag.is_some())
        .map(|key| key.name)
        .collect();
    assert_eq!(seen, flagged, "rows whose flag clap does not parse");
}

/// A flag's twin is its name in capitals after `SLIDEGATE_`, so that
/// either can be guessed from the other; `--check`, a mode of the command
/// rather than a setting, has none (a variable left set would turn every
/// start into a check).
#[test]
fn each_variable_is_its_flag_in_capitals() {
    for key in KEYS {
        let (Some(flag), Some(env)) = (key.flag, key.env) else {
            continue;
        };
        let twin = format!("SLIDEGATE_{}", flag.to_uppercase().replace('-', "_"));
        if VARIABLE_READ_BY_HAND.contains(&key.name) {
            // `--no-coalesce` and `SLIDEGATE_COALESCE` say opposite things.
            assert_eq!(format!("SLIDEGATE_NO_{}", &env["SLIDEGATE_".len()..]), twin);
        } else {
            assert_eq!(env, twin, "{}", key.name);
        }
    }
    let command = Overrides::command();
    let check = command
        .get_arguments()
        .find(|arg| arg.get_long() == Some("check"));
    assert_eq!(check.and_then(|arg| arg.get_env()), None);
}

/// Keys whose value sits in a user's table or a list's element: their
/// defaults and bounds are the policy's and the bucket's, checked there.
fn top_level(key: &Key) -> bool {
    !key.name.contains("NAME") && !key.name.contains("[]")
}

/// A file setting `name` to `value`, plus `others`.
fn file_with(name: &str, value: toml::Value, others: &[(&str, toml::Value)]) -> String {
    let mut root = toml::Table::new();
    for (name, value) in others.iter().cloned().chain([(name, value)]) {
        let mut table = &mut root;
        let mut parts: Vec<&str> = name.split('.').collect();
        let leaf = parts.pop().unwrap_or_default();
        for part in parts {
            table = table
                .entry(part)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .expect("a section");
        }
        table.insert(leaf.to_owned(), value);
    }
    toml::to_string(&root).expect("writes")
}

fn load(text: &str, overrides: &Overrides) -> Result<Config, String> {
    Config::resolve(Some((Path::new("keys.toml"), text)), overrides).map_err(|e| e.to_string())
}

/// What a number of `key` is written as in the file.
fn written(key: &Key, number: u64) -> toml::Value {
    match key.kind {
        Type::Duration => toml::Value::String(duration(number)),
        _ => toml::Value::Integer(number as i64),
    }
}

#[test]
fn each_default_written_out_changes_nothing() {
    let unset = format!("{:?}", load("", &Overrides::default()).unwrap());
    let mut checked = 0;
    for key in KEYS.iter().filter(|key| top_level(key)) {
        let value = match key.default {
            Value::Integer(number) => toml::Value::Integer(number as i64),
            Value::Boolean(value) => toml::Value::Boolean(value),
            Value::String(text) => toml::Value::String(text.to_owned()),
            Value::Unset(_) => continue,
        };
        let text = file_with(key.name, value, &[]);
        let loaded = load(&text, &Overrides::default())
            .unwrap_or_else(|error| panic!("{}: its default does not load: {error}", key.name));
        assert_eq!(
            format!("{loaded:?}"),
            unset,
            "{}: the row's default is not the loader's",
            key.name
        );
        checked += 1;
    }
    assert!(checked > 30, "{checked}");
}

#[test]
fn the_loader_takes_each_bound_and_refuses_one_past_it() {
    // Memcached nodes, so that every key loads (`clock.source` needs them;
    // `memcached.replicas` up to 3 needs three).
    let nodes = [(
        "memcached.servers",
        toml::Value::Array(vec![
            "127.0.0.1:11211".into(),
            "127.0.0.1:11212".into(),
            "127.0.0.1:11213".into(),
        ]),
    )];
    let mut checked = 0;
    for key in KEYS.iter().filter(|key| top_level(key)) {
        let (least, most) = match key.bounds {
            Bounds::Between(least, most) | Bounds::ZeroOr(least, most) => (least, most),
            Bounds::Any | Bounds::Rule(_) => continue,
        };
        let mut taken = vec![least, most];
        let mut refused = vec![most + 1];
        match key.bounds {
            Bounds::ZeroOr(..) => {
                taken.push(0);
                refused.push(least - 1);
            }
            _ if least > 0 => refused.push(least - 1),
            _ => {}
        }
        for number in taken {
            let text = file_with(key.name, written(key, number), &nodes);
            if let Err(error) = load(&text, &Overrides::default()) {
                panic!("{}: {number} is within its row's bounds: {error}", key.name);
            }
        }
        for number in refused {
            let text = file_with(key.name, written(key, number), &nodes);
            let error = load(&text, &Overrides::default()).err().unwrap_or_else(|| {
                panic!("{}: {number} is past its row's bounds, and loads", key.name)
            });
            assert!(
                error.starts_with(&format!("keys.toml: {}: ", key.name)),
                "{}: {error}",
                key.name
            );
            if let Some(flag) = key.flag {
                let value = match written(key, number) {
                    toml::Value::String(text) => text,
                    other => other.to_string(),
                };
                let overrides =
                    Overrides::try_parse_from(["slidegate", &format!("--{flag}"), &value]);
                let overrides = overrides.unwrap_or_else(|error| panic!("--{flag}: {error}"));
                let error = load("", &overrides).expect_err("refused from the flag");
                assert!(error.starts_with(&format!("--{flag} (or ")), "{error}");
            }
        }
        checked += 1;
    }
    assert!(checked > 15, "{checked}");
}

#[test]
fn each_choice_loads_and_nothing_else_does() {
    let nodes = [(
        "memcached.servers",
        toml::Value::Array(vec!["127.0.0.1:11211".into()]),
    )];
    for key in KEYS {
        let Type::OneOf(choices) = key.kind else {
            continue;
        };
        for choice in choices {
            let text = file_with(key.name, (*choice).into(), &nodes);
            load(&text, &Overrides::default())
                .unwrap_or_else(|error| panic!("{}: {choice:?}: {error}", key.name));
        }
        let text = file_with(key.name, "none-of-these".into(), &nodes);
        let error = load(&text, &Overrides::default()).expect_err("not a choice");
        assert!(error.contains(key.name), "{error}");
    }
}
