//! Which counters a call touches, and what their answers say: the layout
//! of each limit's buckets at an instant, the store batch that reads the
//! older ones and adds to the current one, and each limit's counts before
//! the request, taken from what the batch found.

use smallvec::SmallVec;

use crate::policy::{Limit, Policy};
use crate::store::{BatchCounts, CallDeadline, CounterBatch, CounterKey, Counters, KeyDigest};
use crate::window::Counting;

/// One limit's counters before a request, oldest first: inline up to
/// precision 7, so a check allocates none for them.
pub(crate) type Counts = SmallVec<[u64; 8]>;

/// Each limit's counts, in the policy's order: inline up to two limits, so
/// a check allocates nothing for them.
pub(crate) type CountsByLimit = SmallVec<[Counts; 2]>;

/// The counters one call touches, per limit: the older buckets, oldest
/// first, and the current one. Buckets before the epoch do not exist (only a
/// manual clock gets that close to 1970): they are not read, and count 0.
/// The older counters are the buckets just before the current one, so a
/// layout holds their number, not their keys: 48 bytes instead of 216,
/// kept inline in a check's future.
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub(super) before_epoch: u32,
    older: u32,
    pub(super) current: CounterKey,
}

/// The layouts of a policy's limits: inline up to two limits.
pub(super) type Layouts = SmallVec<[Layout; 2]>;

pub(super) fn layout(digest: KeyDigest, limit: &Limit, now_ms: u64) -> Layout {
    let window = limit.window();
    let current = window.bucket_of(now_ms);
    let precision = window.precision();
    // A bucket number below the precision means the older ones would start
    // before the epoch.
    let older = u32::try_from(current.min(u64::from(precision))).unwrap_or(precision);
    Layout {
        before_epoch: precision - older,
        older,
        current: CounterKey {
            digest,
            window,
            bucket: current,
        },
    }
}

/// The layout of every limit of `policy` at `now_ms`, in the policy's order.
pub(super) fn layouts(digest: KeyDigest, policy: &Policy, now_ms: u64) -> Layouts {
    policy
        .limits()
        .iter()
        .map(|limit| layout(digest, limit, now_ms))
        .collect()
}

/// Every counter of `policy` for `digest` at `now_ms`, the older ones and
/// the current one of each limit: what a check would read.
pub(super) fn all(digest: KeyDigest, policy: &Policy, now_ms: u64) -> Counters {
    layouts(digest, policy, now_ms)
        .iter()
        .flat_map(|layout| layout.older().chain([layout.current]))
        .collect()
}

impl Layout {
    /// Counters of this limit, the ones before the epoch included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        (self.before_epoch + self.older) as usize + 1
    }

    /// The older counters that exist, oldest first.
    pub(super) fn older(&self) -> impl Iterator<Item = CounterKey> + use<> {
        let current = self.current;
        (1..=u64::from(self.older))
            .rev()
            .map(move |back| CounterKey {
                bucket: current.bucket - back,
                ..current
            })
    }
}

/// The store's work for one call: read the older counters and add
/// `cost` to the current ones (or, when nothing is counted, read them),
/// by `deadline` when the store keeps it (see `Limiter::store_deadline`).
pub(super) fn batch(
    layouts: &[Layout],
    cost: u64,
    counting: Counting,
    now_ms: u64,
    deadline: Option<CallDeadline>,
) -> CounterBatch {
    let mut batch = empty(cost, now_ms, deadline);
    fill(&mut batch, layouts, counting);
    batch
}

/// A batch of no counters yet, to [`fill`] where it is kept: a batch is a
/// few hundred bytes, copied whole at each move.
pub(super) fn empty(cost: u64, now_ms: u64, deadline: Option<CallDeadline>) -> CounterBatch {
    CounterBatch {
        reads: Counters::new(),
        adds: Counters::new(),
        amount: cost,
        now_ms,
        deadline,
    }
}

/// Add the counters of `layouts` to `batch`: what [`batch`] reads and adds.
pub(super) fn fill(batch: &mut CounterBatch, layouts: &[Layout], counting: Counting) {
    for layout in layouts {
        for older in layout.older() {
            batch.reads.push(older);
        }
        if counting == Counting::Never {
            batch.reads.push(layout.current);
        } else {
            batch.adds.push(layout.current);
        }
    }
}

/// Each limit's counts before this request (oldest first), from what a
/// batch found.
pub(super) fn counts_before(
    layouts: &[Layout],
    batch: &CounterBatch,
    found: BatchCounts,
) -> CountsByLimit {
    let mut reads = found.read.into_iter();
    let mut added = found.added.into_iter();
    let adding = !batch.adds.is_empty();
    layouts
        .iter()
        .map(|layout| {
            let mut counts: Counts = smallvec::smallvec![0; layout.before_epoch as usize];
            for read in reads.by_ref().take(layout.older as usize) {
                counts.push(read);
            }
            counts.push(if adding {
                // The value after our addition, less our own cost: what
                // was counted before us, concurrent callers included.
                added
                    .next()
                    .unwrap_or(batch.amount)
                    .saturating_sub(batch.amount)
            } else {
                reads.next().unwrap_or(0)
            });
            counts
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest() -> KeyDigest {
        KeyDigest::of("scope", "key")
    }

    /// The older counters are the buckets just before the current one,
    /// oldest first; near the epoch only the ones that exist are read, the
    /// rest count 0, and the counts line up with the buckets either way.
    #[test]
    fn a_layout_reads_the_buckets_before_the_current_one() {
        let limit = Limit::new(10, 4_000, 4).unwrap();
        let buckets = |layout: &Layout| layout.older().map(|key| key.bucket).collect::<Vec<_>>();

        let far = layout(digest(), &limit, 1_000_000 * 4_000 + 2_500);
        assert_eq!(far.current.bucket, 4_000_002);
        assert_eq!(buckets(&far), [3_999_998, 3_999_999, 4_000_000, 4_000_001]);
        assert_eq!((far.before_epoch, far.len()), (0, 5));

        let near = layout(digest(), &limit, 1_500);
        assert_eq!(near.current.bucket, 1);
        assert_eq!(
            buckets(&near),
            [0],
            "bucket 0 exists; those before it do not"
        );
        assert_eq!((near.before_epoch, near.len()), (3, 5));

        let batch = batch(&[near], 1, Counting::IfAdmitted, 1_500, None);
        assert_eq!(batch.reads.len(), 1);
        let found = BatchCounts {
            read: [7].into_iter().collect(),
            added: [3].into_iter().collect(),
        };
        let counts = counts_before(&[near], &batch, found);
        assert_eq!(counts[0].as_slice(), [0, 0, 0, 7, 2]);
    }
}
