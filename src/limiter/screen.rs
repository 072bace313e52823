//! The screen: the near-cache may answer first. A rejected key's counts
//! are kept as lower bounds, so the next rejects of that key cost no round
//! trip; an entry older than the interval is checked against the store by
//! one request (a read, nothing counted) before it refuses again, so that a
//! reset or an evicted counter reaches every instance within the interval,
//! while a hot key still costs at most one store read per interval.

use std::time::Duration;

use super::counters::{self, Counts};
use super::deadline::Deadline;
use super::exchange::Exchange;
use super::request::Part;
use super::{Decision, Source};
use crate::near_cache::{Items, Lookup, NearCache, NearKey, Seen};
use crate::store::Store;
use crate::window::{self, Counting, Verdict};

/// The near-cache and how it is read, revalidated and written.
pub(super) struct Screen {
    pub(super) near_cache: NearCache,
}

/// What the screen made of a part before the store.
pub(super) enum Screened {
    Refused(Decision),
    /// The store decides. `read_again`: the entry was read again first,
    /// so part of the request's time is spent before it gets there.
    Passed {
        read_again: bool,
    },
}

/// What the screen's first look made of a part: screened, or due to be
/// read again first ([`Screen::read_again_due`]: at most once per
/// interval per key).
pub(super) enum Looked<'p> {
    Screened(Screened),
    Due(Box<Due<'p>>),
}

/// A part whose near-cache entry refused it, and is due to be read again.
/// Boxed: rare, and kept out of every check's future.
pub(super) struct Due<'p> {
    part: Part<'p>,
    cost: u64,
    now_ms: u64,
    asking: Items,
    /// The entry's refusal, answered if the store fails.
    verdict: Verdict,
}

/// What a refused request read of one part's counters.
pub(super) struct Read<'a> {
    /// Each limit's counts before the request, oldest first.
    pub(super) counts: &'a [Counts],
    /// Each current counter's value after the request's take-back, when
    /// known.
    pub(super) after_rollback: Option<Vec<Option<u64>>>,
    /// How many parts the request decided together.
    pub(super) by: Items,
}

impl Screen {
    /// The near-cache's refusal of a part of `cost`, if it has one; else
    /// the store decides. Without the store: most parts pass or are
    /// refused here, and a check's future holds no screen of its own (see
    /// [`Looked::Due`] for the rest).
    pub(super) fn screen<'p, S: Store>(
        &self,
        exchange: &Exchange<S>,
        part: Part<'p>,
        cost: u64,
        now_ms: u64,
        asking: Items,
    ) -> Looked<'p> {
        let passed = Looked::Screened(Screened::Passed { read_again: false });
        let (bounds, due) =
            match self
                .near_cache
                .lookup(&part.near_key, part.policy, now_ms, asking)
            {
                Lookup::Unknown => return passed,
                Lookup::Trusted(bounds) => (bounds, false),
                Lookup::Revalidate(bounds) => (bounds, true),
            };
        let verdict = window::decide(part.limits(), &bounds, now_ms, cost, Counting::Never);
        if verdict.allowed {
            if due {
                // This request took the entry's turn to be read again, and
                // the store decides it without reading what the entry
                // holds for larger costs: the entry goes, or a reset
                // elsewhere would go unseen for another interval.
                self.near_cache.forget(&part.near_key);
            }
            return passed;
        }
        if !due {
            let refused = self.refused(exchange, part, verdict, now_ms);
            return Looked::Screened(Screened::Refused(refused));
        }
        Looked::Due(Box::new(Due {
            part,
            cost,
            now_ms,
            asking,
            verdict,
        }))
    }

    /// A part whose entry refuses and is due to be read again: refused
    /// with fresh counts, passed on to the store, or (the store failed)
    /// refused by the entry.
    pub(super) async fn read_again_due<S: Store>(
        &self,
        exchange: &Exchange<S>,
        due: Box<Due<'_>>,
        deadline: Deadline,
    ) -> Screened {
        let Due {
            part,
            cost,
            now_ms,
            asking,
            verdict,
        } = *due;
        match self
            .read_again(exchange, part, cost, now_ms, deadline, asking)
            .await
        {
            Some(Some(decision)) => Screened::Refused(decision),
            Some(None) => Screened::Passed { read_again: true },
            // The store failed: the entry is still the best knowledge
            // there is, and an outage must not turn hot rejects into
            // admissions.
            None => Screened::Refused(self.refused(exchange, part, verdict, now_ms)),
        }
    }

    /// The near-cache's refusal, answered without the store. The key is
    /// still a client that asks, so its counters are marked as used
    /// ([`Store::touch`], no round trip): a store that evicts the least
    /// recently used keeps them for when the entry is read again.
    fn refused<S: Store>(
        &self,
        exchange: &Exchange<S>,
        part: Part<'_>,
        verdict: Verdict,
        now_ms: u64,
    ) -> Decision {
        let store = &exchange.store;
        if store.keeps_what_is_touched() {
            store.touch(&counters::all(part.digest, part.policy, now_ms), now_ms);
        }
        Decision::new(verdict, Source::NearCache)
    }

    /// Read the part's counters, counting nothing: `None` if the store
    /// failed; still refused, the refusal (the fresh counts remembered);
    /// admitted now (a reset, an eviction), the entry forgotten.
    async fn read_again<S: Store>(
        &self,
        exchange: &Exchange<S>,
        part: Part<'_>,
        cost: u64,
        now_ms: u64,
        deadline: Deadline,
        asking: Items,
    ) -> Option<Option<Decision>> {
        let layouts = counters::layouts(part.digest, part.policy, now_ms);
        let store_deadline = exchange.store_deadline(deadline);
        let batch = counters::batch(&layouts, cost, Counting::Never, now_ms, store_deadline);
        let found = exchange.timed_read_and_add(deadline, &batch).await.ok()?;
        let counts = counters::counts_before(&layouts, &batch, found);
        let verdict = window::decide(part.limits(), &counts, now_ms, cost, Counting::Never);
        // Forgotten first: a refusal that is not remembered (a cost that
        // can never pass) must not leave the old counts trusted for
        // another interval.
        self.near_cache.forget(&part.near_key);
        if verdict.allowed {
            return Some(None);
        }
        let read = Read {
            counts: &counts,
            after_rollback: None,
            by: asking,
        };
        self.remember(part, read, cost, now_ms);
        Some(Some(Decision::new(verdict, Source::Store)))
    }

    /// Remember a rejected part's counts in the near-cache, as lower bounds.
    ///
    /// A current count read by an increment can include increments of
    /// concurrent requests that are themselves being rejected and rolled
    /// back. Two bounds remove that excess: the value left after our own
    /// rollback (others may have rolled back by then), and the ceiling, the
    /// most that admitted requests can have left in the current bucket given
    /// the older ones. The ceiling assumes that every addition under it is
    /// an admitted one, which holds while a counter is asked by requests of
    /// one item only. A request of several items can hold one there and
    /// still be refused by another item: what such a request read refuses
    /// only requests of several ([`Items::Several`]). A counter asked both
    /// alone and together (RLS `[a]` and `[a, b]`) can still show a lone
    /// request such an addition in flight; what it remembers then errs
    /// towards refusing until the entry is read again.
    pub(super) fn remember(&self, part: Part<'_>, read: Read<'_>, cost: u64, now_ms: u64) {
        let Read {
            counts,
            after_rollback,
            by,
        } = read;
        let limits = part.limits();
        let lower_bounds: Vec<Vec<u64>> = limits
            .iter()
            .zip(counts)
            .enumerate()
            .map(|(index, (limit, counts))| {
                let mut bounds = counts.to_vec();
                let ceiling = window::current_ceiling(*limit, counts, now_ms);
                let rolled_back = after_rollback
                    .as_ref()
                    .and_then(|values| values.get(index).copied().flatten())
                    .unwrap_or(u64::MAX);
                if let Some(current) = bounds.last_mut() {
                    *current = (*current).min(ceiling).min(rolled_back);
                }
                bounds
            })
            .collect();
        let verdict = window::decide(limits, &lower_bounds, now_ms, cost, Counting::Never);
        // Remember only what rejects on its own, for as long as it does.
        let Some(lifetime) = verdict.retry_after_ms.filter(|_| !verdict.allowed) else {
            return;
        };
        let seen = limits.iter().zip(lower_bounds).map(|(limit, counts)| Seen {
            window: limit.window(),
            bucket: limit.window().bucket_of(now_ms),
            counts: counts.into(),
        });
        let lifetime = Duration::from_millis(lifetime);
        self.near_cache
            .remember(part.near_key, seen, lifetime, now_ms, by);
    }

    /// What the near-cache remembered of `near_key` no longer holds all
    /// its counts (something was counted): a refusal answered from it
    /// would say to wait less than the store's counts do.
    pub(super) fn counted(&self, near_key: &NearKey) {
        self.near_cache.forget_counted(near_key);
    }
}
