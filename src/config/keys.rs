//! The table of the configuration's keys: for each, its type, default,
//! bounds, command-line flag, environment variable, whether a reload
//! applies it, and what it is for. One row a key (in `keys/table.rs`), and
//! everything that says something about a key reads that row: the flags
//! and their environment twins (`flags.rs`), the loader's bounds checks
//! and its messages (`Origin::layered`, [`Key::check`]), the reload's
//! lists (`reload::APPLIED_LIVE`, `reload::RESTART_ONLY`) and the
//! configuration reference in the book ([`reference::reference`]).
//!
//! Tests hold the rest to it: every key the file's serde structs accept has
//! a row of the same type; every flag clap parses is a row's, with the
//! row's variable; each default, loaded explicitly, changes nothing; each
//! bound is where the loader refuses.

pub mod reference;
mod table;
#[cfg(test)]
mod tests;

pub use table::KEYS;

/// One key of the configuration file.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// Dotted, as the file nests it: `memcached.connections`. `NAME`
    /// stands for a name the user chooses, `[]` for each entry of a list.
    pub name: &'static str,
    pub kind: Type,
    pub default: Value,
    pub bounds: Bounds,
    /// The command-line flag, without its dashes.
    pub flag: Option<&'static str>,
    /// The environment variable; flags win over it, it wins over the file.
    pub env: Option<&'static str>,
    pub reload: Reload,
    /// What it does and when to change it.
    pub about: &'static str,
}

/// What a key holds, as the file writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A whole number, in the unit given (`""`: a count).
    Integer(&'static str),
    Boolean,
    /// A string, of the form given (`"host:port"`, `"path"`).
    String(&'static str),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A duration string: `250ms`, `10s`, `1m`, `1h`, `1d`.
    Duration,
    /// A list of what is given (`"strings"`, `"tables"`).
    List(&'static str),
    /// A table of the user's names.
    Table,
}

/// The value a key has when nothing sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Integer(u64),
    Boolean(bool),
    /// A string, as the file would write it.
    String(&'static str),
    /// Unset, and what that means.
    Unset(&'static str),
}

/// What the loader accepts of a number (of milliseconds, for a duration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bounds {
    /// Any value of the type.
    Any,
    /// From the first to the second, both included.
    Between(u64, u64),
    /// 0 (off), or from the first to the second.
    ZeroOr(u64, u64),
    /// What is checked, in words, where no number bounds it.
    Rule(&'static str),
}

/// What a reload does with a changed value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Put in force at once.
    Live,
    /// Named in the log and the metrics; the running value stays until a
    /// restart.
    Restart,
}

impl Key {
    /// The value if the key's bounds hold it, else the message the loader
    /// gives (after the key's name or flag).
    pub fn check(&self, value: u64) -> Result<u64, String> {
        let unit = self.unit();
        match self.bounds {
            Bounds::Between(least, most) if (least..=most).contains(&value) => Ok(value),
            Bounds::ZeroOr(least, most) if value == 0 || (least..=most).contains(&value) => {
                Ok(value)
            }
            Bounds::Between(least, most) => Err(format!(
                "must be from {} to {}{unit}, got {}",
                self.number(least),
                self.number(most),
                self.number(value)
            )),
            Bounds::ZeroOr(least, most) => Err(format!(
                "must be 0 (off) or from {} to {}{unit}, got {}",
                self.number(least),
                self.number(most),
                self.number(value)
            )),
            Bounds::Any | Bounds::Rule(_) => Ok(value),
        }
    }

    /// ` ms`, ` bytes`, ...: what follows a number of this key.
    fn unit(&self) -> String {
        match self.kind {
            Type::Integer(unit) if !unit.is_empty() => format!(" {unit}"),
            _ => String::new(),
        }
    }

    /// A number of this key as the file writes it: a duration's as one.
    fn number(&self, value: u64) -> String {
        match self.kind {
            Type::Duration => duration(value),
            _ => value.to_string(),
        }
    }

    /// The row of `name`; at compile time in a `const`, so that a name
    /// missing from the table does not build.
    pub const fn named(name: &str) -> &'static Key {
        let mut index = 0;
        while index < KEYS.len() {
            if same(KEYS[index].name, name) {
                return &KEYS[index];
            }
            index += 1;
        }
        panic!("not a key of config::keys::KEYS")
    }

    /// The flag of `name`'s row, for clap.
    pub const fn flag_of(name: &str) -> &'static str {
        match Key::named(name).flag {
            Some(flag) => flag,
            None => panic!("this key has no flag in config::keys::KEYS"),
        }
    }

    /// The environment variable of `name`'s row.
    pub const fn env_of(name: &str) -> &'static str {
        match Key::named(name).env {
            Some(env) => env,
            None => panic!("this key has no environment variable in config::keys::KEYS"),
        }
    }
}

/// Milliseconds as the largest whole unit a duration string takes.
pub(crate) fn duration(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    UNITS
        .iter()
        .find(|(size, _)| ms > 0 && ms.is_multiple_of(*size))
        .map_or_else(
            || format!("{ms}ms"),
            |(size, unit)| format!("{}{unit}", ms / size),
        )
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut index = 0;
    while index < a.len() {
        if a[index] != b[index] {
            return false;
        }
        index += 1;
    }
    true
}

/// How many rows a reload treats as `reload` does.
pub(crate) const fn count(reload: Reload) -> usize {
    let mut found = 0;
    let mut index = 0;
    while index < KEYS.len() {
        if matches!(
            (KEYS[index].reload, reload),
            (Reload::Live, Reload::Live) | (Reload::Restart, Reload::Restart)
        ) {
            found += 1;
        }
        index += 1;
    }
    found
}

/// The names of the rows a reload treats as `reload` does, in table order.
pub(crate) const fn names<const N: usize>(reload: Reload) -> [&'static str; N] {
    let mut out = [""; N];
    let mut found = 0;
    let mut index = 0;
    while index < KEYS.len() {
        if matches!(
            (KEYS[index].reload, reload),
            (Reload::Live, Reload::Live) | (Reload::Restart, Reload::Restart)
        ) {
            out[found] = KEYS[index].name;
            found += 1;
        }
        index += 1;
    }
    out
}

/// The row of a key, found when the crate compiles: a name missing from
/// [`KEYS`] does not build.
macro_rules! key {
    ($name:literal) => {
        const { $crate::config::keys::Key::named($name) }
    };
}
pub(crate) use key;
