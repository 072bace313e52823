//! What a node's connections publish for routing to read without a lock:
//! each slot's phase and the age of its oldest unanswered write, whether
//! it drains a connection given up and what that one still owes, the
//! node's own clock, its redials by reason, and what became of the replies
//! of connections given up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use smallvec::SmallVec;

use super::health::{self, Bounds, Phase, View};

/// Why a connection slot dialled again: the `reason` label of
/// `slidegate_store_redials_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redial {
    /// The connection failed (EOF, I/O or protocol error), or a dial did.
    Failed,
    /// A reply was late beyond the stall bound.
    Stalled,
    /// Every connection was overdue: an extra one was dialled.
    Overdue,
    /// The node's address changed (ElastiCache replaced it).
    Moved,
}

impl Redial {
    pub const ALL: [Redial; 4] = [
        Redial::Failed,
        Redial::Stalled,
        Redial::Overdue,
        Redial::Moved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Redial::Failed => "failed",
            Redial::Stalled => "stalled",
            Redial::Overdue => "overdue",
            Redial::Moved => "moved",
        }
    }
}

/// A node's redials by reason; kept across a change of the node's address.
#[derive(Debug, Default)]
pub struct Redials([AtomicU64; Redial::ALL.len()]);

impl Redials {
    pub fn count(&self, reason: Redial) {
        self.0[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn by_reason(&self) -> [(&'static str, u64); Redial::ALL.len()] {
        Redial::ALL.map(|reason| {
            (
                reason.as_str(),
                self.0[reason as usize].load(Ordering::Relaxed),
            )
        })
    }
}

/// What became of counting writes past the stall bound, by node; kept
/// across a change of the node's address, like [`Redials`].
#[derive(Debug, Default)]
pub struct LateReplies {
    /// Counted requests whose additions were taken back from a reply that
    /// came after their connection was found stalled.
    taken_back: AtomicU64,
    /// Counted requests whose reply never came: their connection ended
    /// first (it failed, its drain ran past its bound, or the node was
    /// dropped). Whatever memcached applied of them stays counted.
    lost: AtomicU64,
}

impl LateReplies {
    pub(super) fn count_taken_back(&self) {
        self.taken_back.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn count_lost(&self, requests: u64) {
        if requests > 0 {
            self.lost.fetch_add(requests, Ordering::Relaxed);
        }
    }

    pub fn taken_back(&self) -> u64 {
        self.taken_back.load(Ordering::Relaxed)
    }

    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

/// The node's own time, in microseconds: what "written at" and "overdue"
/// are measured in, monotonic.
#[derive(Clone, Copy, Debug)]
pub(super) struct NodeClock(pub(super) Instant);

impl NodeClock {
    pub(super) fn now_us(self) -> u64 {
        u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// One connection slot's state, read lock-free by every call's routing.
#[derive(Debug)]
pub(super) struct SlotStatus {
    phase: AtomicU8,
    /// When the oldest unanswered request was written, in the node's
    /// microseconds plus one; 0 when nothing is unanswered.
    oldest_unanswered: AtomicU64,
    /// The slot holds a connection given up as stalled that still reads
    /// its late replies: it may hold no second one (see `health::give_up`).
    draining: AtomicBool,
    /// Requests that draining connection still awaits replies to.
    draining_owed: AtomicUsize,
    pub(super) extra: bool,
}

impl SlotStatus {
    pub(super) fn new(extra: bool) -> SlotStatus {
        let phase = if extra { Phase::Idle } else { Phase::Dialling };
        SlotStatus {
            phase: AtomicU8::new(phase.as_u8()),
            oldest_unanswered: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            draining_owed: AtomicUsize::new(0),
            extra,
        }
    }

    pub(super) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    pub(super) fn set_phase(&self, phase: Phase) {
        self.phase.store(phase.as_u8(), Ordering::Release);
    }

    /// Idle to dialling; false when another caller got there first.
    pub(super) fn activate(&self) -> bool {
        self.phase
            .compare_exchange(
                Phase::Idle.as_u8(),
                Phase::Dialling.as_u8(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    pub(super) fn set_oldest_unanswered(&self, written_us: Option<u64>) {
        let encoded = written_us.map_or(0, |us| us.saturating_add(1));
        self.oldest_unanswered.store(encoded, Ordering::Release);
    }

    pub(super) fn oldest_unanswered(&self) -> Option<u64> {
        match self.oldest_unanswered.load(Ordering::Acquire) {
            0 => None,
            encoded => Some(encoded - 1),
        }
    }

    /// A drain starts (with `owed` requests unanswered) or ends.
    pub(super) fn set_draining(&self, owed: Option<usize>) {
        self.draining_owed
            .store(owed.unwrap_or(0), Ordering::Release);
        self.draining.store(owed.is_some(), Ordering::Release);
    }

    pub(super) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(super) fn set_draining_owed(&self, owed: usize) {
        self.draining_owed.store(owed, Ordering::Release);
    }

    /// Requests the slot's draining connection still awaits replies to.
    pub(super) fn draining_owed(&self) -> usize {
        self.draining_owed.load(Ordering::Acquire)
    }
}

/// What every slot of a node shares.
pub(super) struct NodeStatus {
    pub(super) slots: Box<[Arc<SlotStatus>]>,
    /// Configured connections (the first slots); the rest are extras.
    pub(super) configured: usize,
    pub(super) bounds: Bounds,
    pub(super) clock: NodeClock,
    pub(super) redials: Arc<Redials>,
    pub(super) late_replies: Arc<LateReplies>,
    /// When it last gave reason to doubt its counts.
    pub(super) doubt: super::doubt::Doubt,
}

impl NodeStatus {
    /// The configured slot whose turn `start` is, if it is up and answering
    /// within the call timeout: where [`health::pick`] sends a request
    /// whenever every configured slot is ready and no extra is up, found by
    /// reading that one slot instead of every slot's view (building every
    /// view on every call showed in a check's instruction profile). When
    /// it is not ready, the caller asks `pick`.
    pub(super) fn ready_in_turn(&self, start: usize) -> Option<usize> {
        let index = start.checked_rem(self.configured)?;
        let slot = &self.slots[index];
        // Nothing unanswered needs no clock to be ready.
        let now = slot.oldest_unanswered().map_or(0, |_| self.clock.now_us());
        self.view(slot, now).ready().then_some(index)
    }

    pub(super) fn views(&self) -> SmallVec<[View; 8]> {
        let now = self.clock.now_us();
        self.slots.iter().map(|slot| self.view(slot, now)).collect()
    }

    /// How the routing policy sees `slot` at `now` (the node's microseconds).
    fn view(&self, slot: &SlotStatus, now: u64) -> View {
        let phase = slot.phase();
        View {
            phase,
            state: health::state(phase, slot.oldest_unanswered(), now, self.bounds),
            extra: slot.extra,
        }
    }
}

/// How many of a node's connections are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionStates {
    pub ready: usize,
    pub overdue: usize,
    pub down: usize,
    /// Given up as stalled, taking no work, still reading late replies.
    pub draining: usize,
    /// Requests those draining connections still await replies to.
    pub draining_owed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memcached::conn::health::Pick;

    /// Two configured slots and two extras, each up or at rest as given,
    /// with its oldest unanswered write this many microseconds old.
    fn node(slots: [(Phase, Option<u64>); 4]) -> NodeStatus {
        let clock = NodeClock(Instant::now() - std::time::Duration::from_secs(10));
        let now = clock.now_us();
        NodeStatus {
            slots: slots
                .iter()
                .enumerate()
                .map(|(index, &(phase, age_us))| {
                    let slot = SlotStatus::new(index >= 2);
                    slot.set_phase(phase);
                    slot.set_oldest_unanswered(age_us.map(|age| now - age));
                    Arc::new(slot)
                })
                .collect(),
            configured: 2,
            bounds: Bounds {
                overdue_after_us: 1_000_000,
                stall_after_us: 5_000_000,
            },
            clock,
            redials: Arc::default(),
            late_replies: Arc::default(),
            doubt: Default::default(),
        }
    }

    const ANSWERING: Option<u64> = Some(1_000);
    const OVERDUE: Option<u64> = Some(2_000_000);

    #[test]
    fn the_slot_in_turn_is_the_one_pick_chooses_when_every_configured_one_is_ready() {
        let node = node([
            (Phase::Up, ANSWERING),
            (Phase::Up, None),
            (Phase::Idle, None),
            (Phase::Idle, None),
        ]);
        for start in 0..8 {
            let views = node.views();
            assert_eq!(
                node.ready_in_turn(start).map(Pick::Use),
                Some(health::pick(&views, start)),
                "start {start}"
            );
        }
    }

    #[test]
    fn a_slot_in_turn_that_is_overdue_or_not_up_leaves_the_choice_to_pick() {
        let node = node([
            (Phase::Up, OVERDUE),
            (Phase::Dialling, None),
            (Phase::Up, ANSWERING),
            (Phase::Idle, None),
        ]);
        assert_eq!(node.ready_in_turn(0), None, "overdue");
        assert_eq!(node.ready_in_turn(1), None, "being dialled");
        // An extra is never taken in turn: it is there while the
        // configured ones are overdue, and pick finds it.
        assert_eq!(health::pick(&node.views(), 0), Pick::Use(2));
    }
}
