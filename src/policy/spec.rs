//! Limits as a client or a configuration file writes them: a limit object
//! with its window in words (`"10m"`), checked into a [`Limit`] with errors
//! that name the field, and a window length written back the same way.

use std::fmt;

use super::{DAY_MS, HOUR_MS, Limit, LimitError, MINUTE_MS, SECOND_MS};

/// A limit as a client or a config file writes it:
/// `{"limit": 10, "window": "1s"}`, or `window_ms` instead of `window`,
/// with an optional `precision`.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a limit object such as {\"limit\": 10, \"window\": \"1s\"}"
)]
pub struct LimitSpec {
    pub limit: Option<u64>,
    pub window: Option<String>,
    pub window_ms: Option<u64>,
    pub precision: Option<u32>,
}

/// What is wrong with a [`LimitSpec`]: the field (`limit`, `window`, ...) and
/// the reason, for messages like `limits[0].window: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    pub field: &'static str,
    pub message: String,
}

impl LimitSpec {
    pub fn to_limit(&self) -> Result<Limit, SpecError> {
        let error = |field, message: String| SpecError { field, message };
        let window_ms = match (&self.window, self.window_ms) {
            (Some(_), Some(_)) => {
                return Err(error("window", "give window or window_ms, not both".into()));
            }
            (None, None) => return Err(error("window", "is required (or window_ms)".into())),
            (Some(text), None) => {
                parse_duration_ms(text).map_err(|message| error("window", message))?
            }
            (None, Some(ms)) => ms,
        };
        let field_of = |limit_error: &LimitError| match limit_error.field() {
            "window" if self.window.is_none() => "window_ms",
            field => field,
        };
        let limit = self
            .limit
            .ok_or_else(|| error("limit", "is required".into()))?;
        Limit::new(limit, window_ms, self.precision.unwrap_or(1))
            .map_err(|limit_error| error(field_of(&limit_error), limit_error.to_string()))
    }
}

/// Parse a window length such as `250ms`, `1s`, `10m`, `1h` or `1d`.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let unit_ms = match unit {
        "ms" => 1,
        "s" => SECOND_MS,
        "m" => MINUTE_MS,
        "h" => HOUR_MS,
        "d" => DAY_MS,
        _ => {
            return Err(format!(
                "{text:?} is not a duration: use a whole number and a unit of ms, s, m, h or d (e.g. \"10m\")"
            ));
        }
    };
    let amount: u64 = digits.parse().map_err(|error: std::num::ParseIntError| {
        if *error.kind() == std::num::IntErrorKind::PosOverflow {
            format!("{text:?} is too long")
        } else {
            format!("{text:?} is not a duration: it must start with a whole number (e.g. \"10m\")")
        }
    })?;
    amount
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A duration in the largest unit that writes it exactly: `10m`, `250ms`.
pub struct DisplayMs(pub u64);

impl fmt::Display for DisplayMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0;
        for (unit, unit_ms) in [
            ("d", DAY_MS),
            ("h", HOUR_MS),
            ("m", MINUTE_MS),
            ("s", SECOND_MS),
        ] {
            if ms != 0 && ms.is_multiple_of(unit_ms) {
                return write!(f, "{}{unit}", ms / unit_ms);
            }
        }
        write!(f, "{ms}ms")
    }
}
