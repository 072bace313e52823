//! Limits and policies. They can only be built valid, so everything past
//! this module (the window arithmetic, the stores, the near-cache) never
//! meets a zero window, a precision that does not divide it, or a limit of 0.

mod spec;

use std::hash::{Hash, Hasher};
use std::time::Duration;

pub use self::spec::{DisplayMs, LimitSpec, SpecError, parse_duration_ms};

/// The largest `limit` and `cost`. Far above any real quota, and low enough
/// that counts, costs and scaled estimates never come near overflow.
pub const MAX_AMOUNT: u64 = 1_000_000_000_000;
/// The longest window: a year. Bucket TTLs (2 windows) stay well inside
/// Memcached's 32-bit absolute expiry times.
pub const MAX_WINDOW_MS: u64 = 365 * DAY_MS;
/// The finest precision: sub-buckets per window.
pub const MAX_PRECISION: u32 = 1000;
/// The most limits one policy may hold; each costs precision + 1 counters.
pub const MAX_LIMITS: usize = 16;
/// The most counters a policy may touch (precision + 1 summed over its
/// limits) when `limits.max_counters` is not configured: what one check
/// costs the store and the near-cache stays small, whoever sends it.
pub const DEFAULT_MAX_COUNTERS: usize = 128;
/// The most counters any policy can touch: [`MAX_LIMITS`] limits at
/// [`MAX_PRECISION`], the highest `limits.max_counters` can be set.
pub const MAX_COUNTERS: usize = MAX_LIMITS * (MAX_PRECISION as usize + 1);
/// The scope of limits given inline in a request rather than by name.
pub const INLINE_SCOPE: &str = "inline";

const SECOND_MS: u64 = 1000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;

/// A sliding window: its length and into how many sub-buckets it is cut.
/// Together with the scope and key, this is what identifies a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    window_ms: u64,
    precision: u32,
}

impl Window {
    pub fn new(window_ms: u64, precision: u32) -> Result<Window, LimitError> {
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(LimitError::Window(window_ms));
        }
        if precision == 0 || precision > MAX_PRECISION {
            return Err(LimitError::PrecisionRange(precision));
        }
        if !window_ms.is_multiple_of(u64::from(precision)) {
            return Err(LimitError::PrecisionDivides {
                precision,
                window_ms,
            });
        }
        Ok(Window {
            window_ms,
            precision,
        })
    }

    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    pub fn precision(&self) -> u32 {
        self.precision
    }

    /// The length of one sub-bucket (the whole window when precision is 1).
    pub fn bucket_ms(&self) -> u64 {
        self.window_ms / u64::from(self.precision)
    }

    /// The index of the (sub-)bucket holding `now_ms`, aligned on the epoch.
    pub fn bucket_of(&self, now_ms: u64) -> u64 {
        now_ms / self.bucket_ms()
    }
}

/// One quota: at most `limit` units per sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    limit: u64,
    window: Window,
}

impl Limit {
    pub fn new(limit: u64, window_ms: u64, precision: u32) -> Result<Limit, LimitError> {
        let window = Window::new(window_ms, precision)?;
        if limit == 0 || limit > MAX_AMOUNT {
            return Err(LimitError::Limit(limit));
        }
        Ok(Limit { limit, window })
    }

    /// `limit` units per `window`, one bucket per window (precision 1).
    pub fn per(limit: u64, window: Duration) -> Result<Limit, LimitError> {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        Limit::new(limit, window_ms, 1)
    }

    /// The same limit cut into `precision` sub-buckets.
    pub fn with_precision(self, precision: u32) -> Result<Limit, LimitError> {
        Limit::new(self.limit, self.window.window_ms, precision)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn window(&self) -> Window {
        self.window
    }
}

/// Why a limit could not be built. `field` names the offending field the way
/// both the HTTP API and the config file spell it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("must be an integer from 1 to {MAX_AMOUNT}, got {0}")]
    Limit(u64),
    #[error("must be from 1ms to 365d, got {0}ms")]
    Window(u64),
    #[error("must be from 1 to {MAX_PRECISION}, got {0}")]
    PrecisionRange(u32),
    #[error("{precision} does not divide the window of {window_ms}ms")]
    PrecisionDivides { precision: u32, window_ms: u64 },
}

impl LimitError {
    pub fn field(&self) -> &'static str {
        match self {
            LimitError::Limit(_) => "limit",
            LimitError::Window(_) => "window",
            LimitError::PrecisionRange(_) | LimitError::PrecisionDivides { .. } => "precision",
        }
    }
}

/// A set of limits decided together under one scope: a request is admitted
/// only if every limit admits it, and then it is counted in all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    scope: String,
    limits: Vec<Limit>,
    /// A hash of the limits' windows, computed once: it tells the
    /// near-cache's entries of one key under different policies apart.
    windows_id: u64,
    /// A hash of the limits, values included, seeded once per process
    /// (see [`limits_id`](Self::limits_id)).
    limits_id: u64,
    /// The largest cost any limit could ever admit, computed once: every
    /// check asks.
    max_cost: u64,
    /// Shadow mode: decide and count as usual, but always admit.
    shadow: bool,
}

impl Policy {
    /// A named policy; its name is the scope of its counters.
    pub fn new(name: impl Into<String>, limits: Vec<Limit>) -> Result<Policy, PolicyError> {
        let name = name.into();
        if !is_plain_name(&name) {
            return Err(PolicyError::Name(name));
        }
        if name == INLINE_SCOPE {
            return Err(PolicyError::ReservedName);
        }
        Policy::build(name, limits)
    }

    /// Limits given in a request: they share the `inline` scope, so two
    /// requests naming the same key and window count into the same counters.
    pub fn inline(limits: Vec<Limit>) -> Result<Policy, PolicyError> {
        Policy::build(INLINE_SCOPE.to_owned(), limits)
    }

    /// Limits of a protocol face (Envoy RLS) under a scope that is not a
    /// plain name, such as `rls:`, so their counters can never be shared with
    /// a named or an inline policy.
    #[cfg(feature = "grpc")]
    pub(crate) fn protocol(scope: &str, limits: Vec<Limit>) -> Result<Policy, PolicyError> {
        debug_assert!(!is_plain_name(scope));
        Policy::build(scope.to_owned(), limits)
    }

    fn build(scope: String, limits: Vec<Limit>) -> Result<Policy, PolicyError> {
        if limits.is_empty() {
            return Err(PolicyError::Empty);
        }
        if limits.len() > MAX_LIMITS {
            return Err(PolicyError::TooMany(limits.len()));
        }
        // Two limits with one window would count every request twice into
        // the same counters.
        for (second, limit) in limits.iter().enumerate() {
            if let Some(first) = limits[..second]
                .iter()
                .position(|other| other.window == limit.window)
            {
                return Err(PolicyError::Duplicate { first, second });
            }
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for limit in &limits {
            limit.window.hash(&mut hasher);
        }
        // Seeded per process: the limits of inline policies are a
        // client's to choose, and two that collided would share an
        // exchange in flight and be decided by one of them.
        static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
            std::sync::OnceLock::new();
        let limits_id = std::hash::BuildHasher::hash_one(
            SEED.get_or_init(std::collections::hash_map::RandomState::new),
            &limits,
        );
        Ok(Policy {
            scope,
            windows_id: hasher.finish(),
            limits_id,
            max_cost: limits.iter().map(Limit::limit).min().unwrap_or(0),
            limits,
            shadow: false,
        })
    }

    /// The same policy in shadow mode (or not): it decides and counts
    /// exactly as without it (a request it would refuse is not counted), but
    /// admits every request, and says what it would have decided
    /// ([`crate::Decision::would_allow`]). For rolling out a limit safely:
    /// watch `slidegate_decisions_total{outcome="shadow"}` first.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use slidegate::{Limit, Limiter, MemoryStore, Policy};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Limiter::new(MemoryStore::new());
    /// let policy = Policy::new("new-limit", vec![Limit::per(1, Duration::from_secs(60))?])?
    ///     .with_shadow(true);
    /// limiter.check("k", &policy, 1).await?;
    /// let second = limiter.check("k", &policy, 1).await?;
    /// assert!(second.allowed && second.shadow && !second.would_allow);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_shadow(mut self, shadow: bool) -> Policy {
        self.shadow = shadow;
        self
    }

    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    pub fn limits(&self) -> &[Limit] {
        &self.limits
    }

    /// A hash of the windows of the limits, the same in one process for
    /// policies with the same windows. Collisions are possible: a user of
    /// it compares the windows too.
    pub fn windows_id(&self) -> u64 {
        self.windows_id
    }

    /// A hash of the limits, values included, the same in one process for
    /// policies with the same limits and seeded per process, computed
    /// once: what tells requests of one key in flight under other limit
    /// values apart, without hashing the limits at each request.
    pub fn limits_id(&self) -> u64 {
        self.limits_id
    }

    /// The counters one check of this policy reads or adds to: precision + 1
    /// per limit.
    pub fn counters(&self) -> usize {
        self.limits
            .iter()
            .map(|limit| limit.window().precision() as usize + 1)
            .sum()
    }

    /// Whether this policy touches at most `max_counters` counters.
    pub fn within(&self, max_counters: usize) -> Result<(), PolicyError> {
        let counters = self.counters();
        if counters > max_counters {
            return Err(PolicyError::TooManyCounters {
                counters,
                max: max_counters,
            });
        }
        Ok(())
    }

    /// The largest cost any limit of this policy could ever admit.
    pub fn max_cost(&self) -> u64 {
        self.max_cost
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("must not be empty")]
    Empty,
    #[error("at most {MAX_LIMITS} limits, got {0}")]
    TooMany(usize),
    #[error(
        "limits {first} and {second} have the same window and precision, so they would count into the same counters"
    )]
    Duplicate { first: usize, second: usize },
    #[error(
        "{counters} counters (precision + 1 summed over the limits), more than limits.max_counters = {max}"
    )]
    TooManyCounters { counters: usize, max: usize },
    #[error("policy name {0:?} must be {PLAIN_NAME_RULE}")]
    Name(String),
    #[error("the name `inline` is reserved for limits given in a request")]
    ReservedName,
}

/// What [`is_plain_name`] asks, for error messages.
pub const PLAIN_NAME_RULE: &str = "1 to 64 characters of A-Z a-z 0-9 _ - .";

/// Whether `name` is 1 to 64 characters of `A-Z a-z 0-9 _ - .`: the rule for
/// policy names (they appear in response headers and metrics) and Memcached
/// namespaces (they prefix keys).
pub fn is_plain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests;
