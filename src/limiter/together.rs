//! [`Limiter::check_all`]: several (key, policy, cost) items decided as one
//! request. Admitted only if every item admits, and then counted in all of
//! them; if any item rejects, none is counted. Envoy's rate-limit protocol
//! sends several descriptors per request and refuses the request if any is
//! over its limit: counting the others anyway would spend their quota on a
//! request that never ran.
//!
//! The work is a check's, widened: each item's counters go out in its own
//! batch (a batch is one key's counters, which live on one Memcached node),
//! all batches in flight at once, so the request costs one round trip of
//! latency; each item is decided by the window arithmetic, and if any
//! rejects, the increments of all items are taken back, the way a single
//! check takes back its own. A request refused only by other requests'
//! additions, gone by the time of its take-back, goes once more (`again`).

mod group;
// Running a request's batches, and taking them back.
mod take_back;
// One more try for a refusal that additions since taken back caused.
mod again;

use self::again::room_after_take_back;
use self::group::{Group, groups};
use super::owed::Owed;
use super::remembered::Read;
use super::*;
use crate::join::join_all;
use crate::near_cache::Items;

/// One part of a request decided by [`Limiter::check_all`].
#[derive(Clone, Copy, Debug)]
pub struct Item<'a> {
    pub key: &'a str,
    pub policy: &'a Policy,
    pub cost: u64,
}

impl<S: Store> Limiter<S> {
    /// Decide `items` as one request: each decision says whether its item
    /// alone would be admitted (`allowed`) and whether it was counted
    /// (`counted`, the same for all: all were, or none). An item rejected by
    /// the near-cache or that can never pass decides the request without
    /// counting anything; the others are then only read.
    ///
    /// When the store fails, [`FailureMode::Local`] decides the whole request
    /// the same way on this process's counters.
    pub async fn check_all(&self, items: &[Item<'_>]) -> Result<Vec<Decision>, CheckError> {
        for item in items {
            validate(item.key, item.policy, item.cost, self.max_counters())?;
        }
        let deadline = Deadline::after(self.timeout);
        let mut now_ms = self.clock.now_ms();
        let digests: Vec<KeyDigest> = items
            .iter()
            .map(|item| KeyDigest::of(item.policy.scope(), item.key))
            .collect();
        let near_keys: Vec<NearKey> = items
            .iter()
            .zip(&digests)
            .map(|(item, &digest)| NearKey::new(digest, item.policy))
            .collect();

        let asking = Items::of(items.len());
        let mut decided: Vec<Option<Decision>> = vec![None; items.len()];
        for (((item, &digest), near_key), decided) in
            items.iter().zip(&digests).zip(&near_keys).zip(&mut decided)
        {
            if let Some(lower_bounds) =
                self.near_cache
                    .lower_bounds(near_key, item.policy, now_ms, asking)
            {
                let verdict = window::decide(
                    item.policy.limits(),
                    &lower_bounds,
                    now_ms,
                    item.cost,
                    Counting::Never,
                );
                if !verdict.allowed {
                    *decided = Some(self.near_cache_refused(digest, item.policy, verdict, now_ms));
                }
            }
        }
        let doomed = decided.iter().any(Option::is_some)
            || items.iter().any(|item| item.cost > item.policy.max_cost());
        let counting = if doomed {
            Counting::Never
        } else {
            Counting::IfAdmitted
        };
        let mut attempt = 1;
        // A refusal whose take-back left room for every item, kept while
        // the request is tried once more (see `again`).
        let mut refused_first: Option<Vec<(usize, Decision)>> = None;
        let decisions = loop {
            let groups = groups(
                items,
                &decided,
                counting,
                now_ms,
                self.store_deadline(deadline),
            );
            let error = match self
                .decide_groups(deadline, items, &groups, counting, false)
                .await
            {
                Ok(Decided {
                    decisions,
                    room_after_take_back,
                }) => {
                    if room_after_take_back && refused_first.is_none() {
                        refused_first = Some(decisions);
                        now_ms = self.clock.now_ms();
                        continue;
                    }
                    // Only a request that counted can have raced a boundary
                    // (with every item refused by the near-cache there are
                    // no decisions here, and `all` of none is true).
                    let counted = counting == Counting::IfAdmitted
                        && decisions.iter().all(|(_, decision)| decision.counted);
                    let limits = items.iter().flat_map(|item| item.policy.limits());
                    let crossing = if counted {
                        let now = self.clock.now_ms();
                        boundary::recheck(limits, now_ms, now, attempt, self.failure_mode)
                    } else {
                        None
                    };
                    let Some(crossing) = crossing else {
                        break decisions;
                    };
                    let refused = match crossing {
                        Crossing::Stands(error) => {
                            self.metrics.store_error(&error);
                            break decisions
                                .into_iter()
                                .map(|(index, decision)| (index, boundary::stands(decision)))
                                .collect();
                        }
                        Crossing::Retry => None,
                        Crossing::Refused(error) => Some(error),
                    };
                    let batches: Vec<&CounterBatch> =
                        groups.iter().map(|group| &group.batch).collect();
                    self.take_back_all(deadline, &batches, false).await;
                    let Some(error) = refused else {
                        now_ms = self.clock.now_ms();
                        attempt += 1;
                        continue;
                    };
                    self.metrics.store_error(&error);
                    error
                }
                Err(error) => error,
            };
            // The store failed the try again: the refusal it answered
            // stands, rather than the failure mode.
            if let Some(decisions) = refused_first {
                break decisions;
            }
            break match self.failure_mode {
                FailureMode::Deny => {
                    self.metrics.decision(Source::Fallback, false);
                    return Err(CheckError::StoreUnavailable(error));
                }
                FailureMode::Allow => groups
                    .iter()
                    .flat_map(|group| {
                        group.items.iter().zip(group.layouts_by_item(items)).map(
                            |(&index, layouts)| {
                                let empty: Vec<Vec<u64>> =
                                    layouts.iter().map(|layout| vec![0; layout.len()]).collect();
                                let item = items[index];
                                let verdict = window::decide(
                                    item.policy.limits(),
                                    &empty,
                                    now_ms,
                                    item.cost,
                                    Counting::Never,
                                );
                                (index, Decision::new(verdict, Source::Fallback))
                            },
                        )
                    })
                    .collect(),
                FailureMode::Local => {
                    self.decide_groups(deadline, items, &groups, counting, true)
                        .await
                        .map_err(CheckError::StoreUnavailable)?
                        .decisions
                }
            };
        };
        // Counted: what the near-cache remembered of these keys no longer
        // holds all their counts (a refusal answered from it would say to
        // wait less than the store's counts do).
        if decisions.iter().any(|(_, decision)| decision.counted) {
            for near_key in &near_keys {
                self.near_cache.forget_counted(near_key);
            }
        }
        for (index, decision) in decisions {
            decided[index] = Some(decision);
        }
        Ok(decided
            .into_iter()
            .map(|decision| {
                // Every index was decided by the near-cache or by a group.
                self.done(decision.unwrap_or_else(refused))
            })
            .collect())
    }

    /// Run the groups' batches (on the store, or on the local counters) and
    /// decide their items together. A store error takes back what the other
    /// groups added, so the failure mode starts from clean counters.
    async fn decide_groups(
        &self,
        deadline: Deadline,
        items: &[Item<'_>],
        groups: &[Group],
        counting: Counting,
        local: bool,
    ) -> Result<Decided, StoreError> {
        let source = if local {
            Source::Fallback
        } else {
            Source::Store
        };
        let now_ms = groups.first().map_or(0, |group| group.batch.now_ms);
        // Until every batch has answered, an answered one is owed back: if
        // the request is dropped meanwhile (its caller gave up while
        // another node was slow), nobody was told its additions counted.
        let results = join_all(
            groups
                .iter()
                .map(|group| async move {
                    let result = self.run_batch(deadline, &group.batch, local).await;
                    let batch = &group.batch;
                    let owed = Owed {
                        limiter: self,
                        counters: &batch.adds,
                        amount: if result.is_ok() { batch.amount } else { 0 },
                        now_ms: batch.now_ms,
                        local,
                    };
                    (result, owed)
                })
                .collect(),
        )
        .await;
        let results: Vec<Result<BatchCounts, StoreError>> = results
            .into_iter()
            .map(|(result, owed)| {
                owed.claimed();
                result
            })
            .collect();
        let mut counts_by_group = Vec::with_capacity(groups.len());
        let mut failure = None;
        for (group, result) in groups.iter().zip(results) {
            match result {
                Ok(found) => counts_by_group.push(Some(counters::counts_before(
                    &group.layouts,
                    &group.batch,
                    found,
                ))),
                Err(error) => {
                    counts_by_group.push(None);
                    failure = Some(error);
                }
            }
        }
        if let Some(error) = failure {
            let added: Vec<&CounterBatch> = groups
                .iter()
                .zip(&counts_by_group)
                .filter(|(_, counts)| counts.is_some())
                .map(|(group, _)| &group.batch)
                .collect();
            self.take_back_all(deadline, &added, local).await;
            return Err(error);
        }
        let counts_by_group: Vec<counters::CountsByLimit> =
            counts_by_group.into_iter().flatten().collect();

        let verdicts: Vec<Vec<Verdict>> = groups
            .iter()
            .zip(&counts_by_group)
            .map(|(group, counts)| {
                group
                    .split(items, counts)
                    .map(|(index, counts)| {
                        let item = items[index];
                        window::decide(item.policy.limits(), counts, now_ms, item.cost, counting)
                    })
                    .collect()
            })
            .collect();
        let admitted =
            counting != Counting::Never && verdicts.iter().flatten().all(|verdict| verdict.allowed);
        // A refused request's additions, every key's, go back in one
        // exchange rather than one round trip per key.
        let after_rollbacks = if admitted {
            Vec::new()
        } else {
            let batches: Vec<&CounterBatch> = groups.iter().map(|group| &group.batch).collect();
            self.take_back_all(deadline, &batches, local).await
        };
        // The local counters see no other request's additions in flight.
        let room_after_take_back = counting == Counting::IfAdmitted
            && !admitted
            && !local
            && room_after_take_back(items, groups, &counts_by_group, &after_rollbacks, now_ms);
        let mut after_rollbacks = after_rollbacks.into_iter();
        let mut decisions = Vec::new();
        for ((group, counts), verdicts) in groups.iter().zip(&counts_by_group).zip(verdicts) {
            if admitted {
                decisions.extend(
                    group
                        .items
                        .iter()
                        .zip(verdicts)
                        .map(|(&index, verdict)| (index, Decision::new(verdict, source))),
                );
                continue;
            }
            let after_rollback = after_rollbacks.next().flatten();
            let mut first_limit = 0;
            for ((index, counts), verdict) in group.split(items, counts).zip(verdicts) {
                let item = items[index];
                let limits = item.policy.limits().len();
                if !verdict.allowed && !local {
                    let after = after_rollback
                        .as_ref()
                        .map(|values| values[first_limit..first_limit + limits].to_vec());
                    let near_key =
                        NearKey::new(KeyDigest::of(item.policy.scope(), item.key), item.policy);
                    let read = Read {
                        counts,
                        after_rollback: after,
                        by: Items::of(items.len()),
                    };
                    self.remember(near_key, item.policy, read, item.cost, now_ms);
                }
                first_limit += limits;
                // Counted by none: each item's own verdict, as a peek.
                let verdict = window::decide(
                    item.policy.limits(),
                    counts,
                    now_ms,
                    item.cost,
                    Counting::Never,
                );
                decisions.push((index, Decision::new(verdict, source)));
            }
        }
        Ok(Decided {
            decisions,
            room_after_take_back,
        })
    }
}

/// How the groups of one try were decided.
struct Decided {
    decisions: Vec<(usize, Decision)>,
    /// Refused, and the counts its take-back left admit every item.
    room_after_take_back: bool,
}

/// Never needed (every item is decided by the near-cache or by a group); a
/// logic error then refuses rather than panics.
fn refused() -> Decision {
    Decision {
        allowed: false,
        counted: false,
        retry_after_ms: None,
        limits: Vec::new(),
        source: Source::Fallback,
        shadow: false,
        would_allow: false,
        decided_at_ms: 0,
    }
}
