//! The decision for a key that is never limited (an operator's
//! `exempt_keys`, a forward-auth client in `exempt_addresses`). The limiter
//! does not know which keys those are; the caller does, and asks for this
//! answer (`Limiter::exempt`) so that it is counted like any other.

use super::{Decision, Policy, Source};
use crate::window::{self, Counting};

/// Admit a request under `policy` at `now_ms`: nothing is read or counted;
/// each limit shows its whole quota.
pub(super) fn exempt(policy: &Policy, now_ms: u64) -> Decision {
    let empty: Vec<Vec<u64>> = policy
        .limits()
        .iter()
        .map(|limit| vec![0; limit.window().precision() as usize + 1])
        .collect();
    let mut verdict = window::decide(policy.limits(), &empty, now_ms, 1, Counting::Never);
    // A cost no limit admits is still exempt.
    verdict.allowed = true;
    verdict.retry_after_ms = Some(0);
    Decision::new(verdict, Source::Exempt)
}
