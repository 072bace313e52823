//! The keys this instance refused most over the last minute, in bounded
//! memory whatever the number of distinct keys: a ring of six Space-Saving
//! sketches (Metwally, Agrawal and El Abbadi, 2005), one per 10 seconds,
//! each of a fixed number of counters.
//!
//! Space-Saving keeps `capacity` (key, count) pairs. A key already held is
//! counted; a new key takes the place of the smallest count and inherits
//! it, plus one. Every key refused more than `n / capacity` times in a
//! slice is certain to be held, and its count is over-estimated by at most
//! the count it inherited, so the heavy hitters come out on top in order
//! while a flood of one-shot keys only churns the bottom. Pure: the caller
//! gives the time.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Counters per 10-second sketch.
pub const DEFAULT_CAPACITY: usize = 1024;
/// The ring: six slices of 10 s, the last minute.
const SLICES: usize = 6;
const SLICE_MS: u64 = 10_000;

/// The kinds of an entry's id.
const REFUSED: char = 'r';
const SHADOW: char = 's';

/// One key of the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub policy: String,
    pub key: String,
    /// Refused by a shadow policy's limits, and admitted: what the policy
    /// would refuse once enforced.
    pub shadow: bool,
    /// Refusals over the last minute (an over-estimate by at most the
    /// count a new key inherits in a full sketch).
    pub refused: u64,
    pub last_refused_ms: u64,
}

/// The most refused keys of the last minute.
pub struct TopRefused {
    capacity: usize,
    /// Each slice and the 10-second period it holds.
    slices: Vec<(u64, SpaceSaving)>,
    /// `policy \0 kind key` (kind `r` refused, `s` shadow), reused so that
    /// counting a held key allocates nothing.
    scratch: String,
}

impl TopRefused {
    pub fn new(capacity: usize) -> TopRefused {
        TopRefused {
            capacity: capacity.max(1),
            slices: Vec::with_capacity(SLICES),
            scratch: String::new(),
        }
    }

    /// One refusal of `key` under `policy` at `now_ms`.
    pub fn record(&mut self, policy: &str, key: &str, now_ms: u64) {
        self.count(policy, REFUSED, key, now_ms);
    }

    /// One request of `key` a shadow `policy` admitted and its limits
    /// refuse, at `now_ms`: listed apart from real refusals.
    pub fn record_shadow(&mut self, policy: &str, key: &str, now_ms: u64) {
        self.count(policy, SHADOW, key, now_ms);
    }

    fn count(&mut self, policy: &str, kind: char, key: &str, now_ms: u64) {
        let period = now_ms / SLICE_MS;
        let at = (period % SLICES as u64) as usize;
        if self.slices.len() <= at {
            let capacity = self.capacity;
            self.slices
                .resize_with(at + 1, || (u64::MAX, SpaceSaving::new(capacity)));
        }
        let (held, sketch) = &mut self.slices[at];
        if *held != period {
            // A slice of a minute ago: its memory is reused as it is.
            *held = period;
            sketch.clear();
        }
        self.scratch.clear();
        self.scratch.push_str(policy);
        self.scratch.push('\0');
        self.scratch.push(kind);
        self.scratch.push_str(key);
        sketch.count(&self.scratch, now_ms);
    }

    /// The `top` most refused keys of the minute before `now_ms`, most
    /// refused first (the most recent first among equals).
    pub fn top(&self, top: usize, now_ms: u64) -> Vec<Refused> {
        let period = now_ms / SLICE_MS;
        let mut merged: HashMap<&str, (u64, u64)> = HashMap::new();
        let live = self
            .slices
            .iter()
            .filter(|(held, _)| *held <= period && period - *held < SLICES as u64);
        for (_, sketch) in live {
            for slot in &sketch.slots {
                let entry = merged.entry(&slot.id).or_default();
                entry.0 += slot.count;
                entry.1 = entry.1.max(slot.last_ms);
            }
        }
        let mut keys: Vec<(&str, (u64, u64))> = merged.into_iter().collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        keys.into_iter()
            .take(top)
            .map(|(id, (refused, last_refused_ms))| {
                let (policy, kind_and_key) = id.split_once('\0').unwrap_or(("", id));
                let (shadow, key) = match kind_and_key.strip_prefix(SHADOW) {
                    Some(key) => (true, key),
                    None => (
                        false,
                        kind_and_key.strip_prefix(REFUSED).unwrap_or(kind_and_key),
                    ),
                };
                Refused {
                    policy: policy.to_owned(),
                    key: key.to_owned(),
                    shadow,
                    refused,
                    last_refused_ms,
                }
            })
            .collect()
    }

    /// Keys held across the ring: at most six times the capacity.
    pub fn held(&self) -> usize {
        self.slices
            .iter()
            .map(|(_, sketch)| sketch.slots.len())
            .sum()
    }
}

/// One Space-Saving sketch.
struct SpaceSaving {
    capacity: usize,
    slots: Vec<Slot>,
    /// Where each held key's slot is. Keys are the clients': the hash is
    /// seeded per process, so they cannot be chosen to collide.
    index: HashMap<Box<str>, usize, foldhash::quality::RandomState>,
    /// Every slot once, by its count when it was last pushed, smallest
    /// first: where the slot a new key takes is found. Counting a held key
    /// leaves it as it is (a refusal of a hot key costs no reordering, where
    /// an ordered set cost a removal and an insertion under the lock): a
    /// count only grows while its key holds the slot, so an entry is at
    /// worst low, and it is pushed again with its count when it comes out
    /// on top; the first entry that is not low is a smallest count.
    by_count: BinaryHeap<Reverse<(u64, usize)>>,
}

struct Slot {
    id: Box<str>,
    count: u64,
    last_ms: u64,
}

impl SpaceSaving {
    fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity,
            slots: Vec::new(),
            index: HashMap::default(),
            by_count: BinaryHeap::new(),
        }
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.by_count.clear();
    }

    fn count(&mut self, id: &str, now_ms: u64) {
        if let Some(&at) = self.index.get(id) {
            let slot = &mut self.slots[at];
            slot.count += 1;
            slot.last_ms = now_ms;
            return;
        }
        if self.slots.len() < self.capacity {
            let at = self.slots.len();
            self.slots.push(Slot {
                id: id.into(),
                count: 1,
                last_ms: now_ms,
            });
            self.index.insert(id.into(), at);
            self.by_count.push(Reverse((1, at)));
            return;
        }
        let Some(at) = self.smallest() else {
            return;
        };
        let slot = &mut self.slots[at];
        self.index.remove(&slot.id);
        slot.id = id.into();
        // Space-Saving: the new key inherits the count it replaces.
        slot.count += 1;
        slot.last_ms = now_ms;
        self.index.insert(id.into(), at);
        self.by_count.push(Reverse((slot.count, at)));
    }

    /// The slot of a smallest count, taken out of `by_count`.
    fn smallest(&mut self) -> Option<usize> {
        while let Some(Reverse((pushed, at))) = self.by_count.pop() {
            let count = self.slots[at].count;
            if count == pushed {
                return Some(at);
            }
            self.by_count.push(Reverse((count, at)));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_refused_come_first_through_a_flood_of_one_shot_keys() {
        // 5,600 refusals in one slice of 64 counters: a key refused more
        // than 5600 / 64 = 87.5 times is held, over-estimated by at most
        // that, so 300, 200 and 100 come out in order above any one-shot key.
        let mut top = TopRefused::new(64);
        let t0 = 1_700_000_000_000;
        for round in 0..100u64 {
            let now = t0 + round * 100;
            for _ in 0..3 {
                top.record("api", "heavy", now);
            }
            top.record("api", "medium", now);
            top.record("api", "medium", now);
            top.record("login", "light", now);
            for one_shot in 0..50 {
                top.record("api", &format!("flood-{round}-{one_shot}"), now);
            }
        }
        let found = top.top(3, t0 + 10_000);
        let names: Vec<_> = found
            .iter()
            .map(|r| (r.policy.as_str(), r.key.as_str()))
            .collect();
        assert_eq!(
            names,
            [("api", "heavy"), ("api", "medium"), ("login", "light")]
        );
        assert!(found[0].refused >= 300, "{found:?}");
        assert_eq!(found[0].last_refused_ms, t0 + 9_900);
        assert!(top.held() <= 64 * SLICES);
    }

    /// A new key in a full sketch takes a smallest count, however stale the
    /// order it keeps has become (checked against a scan of every slot).
    #[test]
    fn a_new_key_takes_the_place_of_a_smallest_count() {
        let mut sketch = SpaceSaving::new(16);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for step in 0..20_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // A few hot keys, a long tail of rare ones.
            let id = if state.is_multiple_of(3) {
                format!("hot{}", state % 5)
            } else {
                format!("tail{}", state % 400)
            };
            let held = sketch.index.contains_key(id.as_str());
            let full = sketch.slots.len() == sketch.capacity;
            let smallest = sketch.slots.iter().map(|slot| slot.count).min();
            sketch.count(&id, step);
            let counted = sketch.slots[sketch.index[id.as_str()]].count;
            if full && !held {
                assert_eq!(
                    Some(counted),
                    smallest.map(|count| count + 1),
                    "step {step}"
                );
            }
            assert_eq!(sketch.by_count.len(), sketch.slots.len());
        }
        let total: u64 = sketch.slots.iter().map(|slot| slot.count).sum();
        assert_eq!(total, 20_000, "Space-Saving's counts add up to the stream");
    }

    #[test]
    fn a_minute_later_nothing_is_left() {
        let mut top = TopRefused::new(8);
        top.record("api", "k", 0);
        top.record("api", "k", 30_000);
        assert_eq!(top.top(10, 30_000)[0].refused, 2);
        assert_eq!(top.top(10, 65_000)[0].refused, 1, "the first slice left");
        assert!(top.top(10, 95_000).is_empty());
        // A slice is reused when its period comes round again.
        top.record("api", "other", 120_000);
        assert_eq!(top.top(10, 120_000).len(), 1);
    }
}
