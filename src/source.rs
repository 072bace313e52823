//! Where a decision came from: a plain value below both the limiter, which
//! decides, and the metrics, which count decisions by it, so neither module
//! needs the other's types to speak of it.

/// Where a decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Store,
    NearCache,
    /// The store failed; the failure mode decided.
    Fallback,
    /// The key (or the client's address) is exempt: admitted, nothing read
    /// or counted.
    Exempt,
}

impl Source {
    pub const ALL: [Source; 4] = [
        Source::Store,
        Source::NearCache,
        Source::Fallback,
        Source::Exempt,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Store => "store",
            Source::NearCache => "near_cache",
            Source::Fallback => "fallback",
            Source::Exempt => "exempt",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
