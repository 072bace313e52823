//! Refusals from the near-cache, and their revalidation: an entry older
//! than the interval is checked against the store by one check (a read,
//! nothing counted) before it refuses again, so that a reset or an evicted
//! counter reaches every instance within the interval, while a hot key
//! still costs at most one store read per interval.

use super::remembered::Read;
use super::*;
use crate::near_cache::{Items, Lookup};

impl<S: Store> Limiter<S> {
    /// The near-cache's refusal of this request, if it has one; else the
    /// store decides, told whether its entry was read again first.
    pub(super) async fn near_cache_refusal(
        &self,
        digest: KeyDigest,
        near_key: NearKey,
        policy: &Policy,
        cost: u64,
        now_ms: u64,
        deadline: Deadline,
    ) -> Screened {
        let passed = Screened::Passed { read_again: false };
        let (bounds, due) = match self
            .near_cache
            .lookup(&near_key, policy, now_ms, Items::One)
        {
            Lookup::Unknown => return passed,
            Lookup::Trusted(bounds) => (bounds, false),
            Lookup::Revalidate(bounds) => (bounds, true),
        };
        let verdict = window::decide(policy.limits(), &bounds, now_ms, cost, Counting::Never);
        if verdict.allowed {
            if due {
                // This check took the entry's turn to be read again, and
                // the store decides it without reading what the entry
                // holds for larger costs: the entry goes, or a reset
                // elsewhere would go unseen for another interval.
                self.near_cache.forget(&near_key);
            }
            return passed;
        }
        if !due {
            return Screened::Refused(self.near_cache_refused(digest, policy, verdict, now_ms));
        }
        // Boxed: at most once per interval per key, and a check's future
        // (moved whole at each await it is created for) stays small.
        let reread = Box::pin(self.read_again(digest, near_key, policy, cost, now_ms, deadline));
        match reread.await {
            Reread::StillRefused(decision) => Screened::Refused(decision),
            Reread::Admits => Screened::Passed { read_again: true },
            // The entry is still the best knowledge there is, and a store
            // outage must not turn hot rejects into admissions.
            Reread::StoreFailed => {
                Screened::Refused(self.near_cache_refused(digest, policy, verdict, now_ms))
            }
        }
    }

    /// The near-cache's refusal, answered without the store. The key is
    /// still a client that asks, so its counters are marked as used
    /// ([`Store::touch`], no round trip): a store that evicts the least
    /// recently used keeps them, and the store still holds its counts when
    /// the entry is read again.
    pub(super) fn near_cache_refused(
        &self,
        digest: KeyDigest,
        policy: &Policy,
        verdict: Verdict,
        now_ms: u64,
    ) -> Decision {
        if self.store.keeps_what_is_touched() {
            self.store
                .touch(&counters::all(digest, policy, now_ms), now_ms);
        }
        Decision::new(verdict, Source::NearCache)
    }

    /// Read the key's counters, counting nothing. Still refused: the fresh
    /// counts are remembered. Admitted now (a reset, an eviction): the
    /// entry is forgotten, and the check goes on to count as usual.
    async fn read_again(
        &self,
        digest: KeyDigest,
        near_key: NearKey,
        policy: &Policy,
        cost: u64,
        now_ms: u64,
        deadline: Deadline,
    ) -> Reread {
        let layouts = counters::layouts(digest, policy, now_ms);
        let batch = counters::batch(
            &layouts,
            cost,
            Counting::Never,
            now_ms,
            self.store_deadline(deadline),
        );
        let Ok(found) = self.timed_read_and_add(deadline, &batch).await else {
            return Reread::StoreFailed;
        };
        let counts = counters::counts_before(&layouts, &batch, found);
        let verdict = window::decide(policy.limits(), &counts, now_ms, cost, Counting::Never);
        if verdict.allowed {
            self.near_cache.forget(&near_key);
            return Reread::Admits;
        }
        // Forgotten first: a refusal that is not remembered (a cost that
        // can never pass) must not leave the old counts trusted for
        // another interval.
        self.near_cache.forget(&near_key);
        let read = Read {
            counts: &counts,
            after_rollback: None,
            by: Items::One,
        };
        self.remember(near_key, policy, read, cost, now_ms);
        Reread::StillRefused(Decision::new(verdict, Source::Store))
    }
}

/// What the near-cache made of a check before the store.
pub(super) enum Screened {
    Refused(Decision),
    /// The store decides. `read_again`: the entry was read again first,
    /// so part of the check's time is spent before it gets there.
    Passed {
        read_again: bool,
    },
}

/// What reading an old entry's counters again found.
enum Reread {
    StillRefused(Decision),
    Admits,
    StoreFailed,
}
