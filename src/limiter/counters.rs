//! Which counters a call touches, and what their answers say: the layout
//! of each limit's buckets at an instant, the store batch that reads the
//! older ones and adds to the current one, and each limit's counts before
//! the request, taken from what the batch found.

use smallvec::SmallVec;

use crate::policy::{Limit, Policy};
use crate::store::{BatchCounts, CounterBatch, CounterKey, Counters, KeyDigest};
use crate::window::Counting;

/// One limit's counters before a request, oldest first: inline up to
/// precision 7, so a check allocates none for them.
pub(crate) type Counts = SmallVec<[u64; 8]>;

/// The counters one call touches, per limit: the older buckets, oldest
/// first, and the current one. Buckets before the epoch do not exist (only a
/// manual clock gets that close to 1970): they are not read, and count 0.
pub(super) struct Layout {
    pub(super) before_epoch: usize,
    pub(super) older: Counters,
    pub(super) current: CounterKey,
}

pub(super) fn layout(digest: KeyDigest, limit: &Limit, now_ms: u64) -> Layout {
    let window = limit.window();
    let current = window.bucket_of(now_ms);
    let counter = |bucket| CounterKey {
        digest,
        window,
        bucket,
    };
    let older: Counters = (1..=u64::from(window.precision()))
        .rev()
        .filter_map(|back| current.checked_sub(back).map(counter))
        .collect();
    Layout {
        before_epoch: window.precision() as usize - older.len(),
        older,
        current: counter(current),
    }
}

/// The layout of every limit of `policy` at `now_ms`, in the policy's order.
pub(super) fn layouts(digest: KeyDigest, policy: &Policy, now_ms: u64) -> Vec<Layout> {
    policy
        .limits()
        .iter()
        .map(|limit| layout(digest, limit, now_ms))
        .collect()
}

impl Layout {
    /// Counters of this limit, the ones before the epoch included.
    pub(super) fn len(&self) -> usize {
        self.before_epoch + self.older.len() + 1
    }
}

/// The store's work for one call: read the older counters and add
/// `cost` to the current ones (or, when nothing is counted, read them).
pub(super) fn batch(
    layouts: &[Layout],
    cost: u64,
    counting: Counting,
    now_ms: u64,
) -> CounterBatch {
    let mut batch = CounterBatch {
        reads: Counters::new(),
        adds: Counters::new(),
        amount: cost,
        now_ms,
    };
    for layout in layouts {
        batch.reads.extend_from_slice(&layout.older);
        if counting == Counting::Never {
            batch.reads.push(layout.current);
        } else {
            batch.adds.push(layout.current);
        }
    }
    batch
}

/// Each limit's counts before this request (oldest first), from what a
/// batch found.
pub(super) fn counts_before(
    layouts: &[Layout],
    batch: &CounterBatch,
    found: BatchCounts,
) -> Vec<Counts> {
    let mut reads = found.read.into_iter();
    let mut added = found.added.into_iter();
    let adding = !batch.adds.is_empty();
    layouts
        .iter()
        .map(|layout| {
            let mut counts: Counts = smallvec::smallvec![0; layout.before_epoch];
            counts.extend(reads.by_ref().take(layout.older.len()));
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
