//! [`Limiter::exempt`]: the decision for a key that is never limited (an
//! operator's `exempt_keys`, a forward-auth client in `exempt_addresses`).
//! The limiter does not know which keys those are; the caller does, and
//! asks for this answer so that it is counted like any other decision.

use super::*;

impl<S: Store> Limiter<S> {
    /// Admit a request of `cost` for exempt `key` under `policy`: nothing
    /// is read or counted; each limit shows its whole quota; counted as
    /// outcome `exempt`. The key and cost are held to what a check's are:
    /// an exemption passes requests, not bad input.
    pub fn exempt(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, CheckError> {
        validate(key, policy, cost, self.max_counters())?;
        let started = Instant::now();
        let now_ms = self.clock.now_ms();
        let empty: Vec<Vec<u64>> = policy
            .limits()
            .iter()
            .map(|limit| vec![0; limit.window().precision() as usize + 1])
            .collect();
        let mut verdict = window::decide(policy.limits(), &empty, now_ms, 1, Counting::Never);
        // A cost no limit admits is still exempt.
        verdict.allowed = true;
        verdict.retry_after_ms = Some(0);
        let decision = self.done(Decision::new(verdict, Source::Exempt));
        self.record(policy, &Ok(decision.clone()), started);
        Ok(decision)
    }
}
