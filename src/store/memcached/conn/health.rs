//! Overdue, stalled, redialled: which of a node's connections takes the
//! next request, when an extra connection is dialled or closed, and when a
//! connection is given up. A pure policy over the connections' states and
//! the time (plain microseconds), so every rule is tested without a socket
//! or a clock.
//!
//! The rules, for one node:
//! - a connection whose oldest unanswered request is older than the call
//!   timeout is *overdue*: whatever is queued behind it would time out in
//!   its caller, so it takes no new requests while another is *ready*;
//! - when every connection that is up is overdue, an extra connection is
//!   dialled (at most as many extras as configured connections) and takes
//!   the new requests; with none left to dial, a request fails at once,
//!   and the failure mode decides without waiting out a timeout;
//! - an overdue connection whose late replies all arrive is ready again;
//!   one whose oldest reply is later than the stall bound is dropped;
//! - an extra closes once the node has its configured number of ready
//!   connections besides it.

/// Where a connection slot is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No connection, none wanted (an extra slot at rest).
    Idle,
    /// Being dialled, or waiting out a backoff before the next dial.
    Dialling,
    /// Connected and serving.
    Up,
    /// Connected, finishing what it was given before it closes: an extra
    /// the node no longer needs.
    Closing,
}

impl Phase {
    pub const ALL: [Phase; 4] = [Phase::Idle, Phase::Dialling, Phase::Up, Phase::Closing];

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    pub fn from_u8(value: u8) -> Phase {
        Phase::ALL
            .get(usize::from(value))
            .copied()
            .unwrap_or(Phase::Idle)
    }
}

/// How a connection is doing, for routing and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Up, every request answered within the call timeout so far.
    Ready,
    /// Up, but its oldest unanswered request is older than the call timeout.
    Overdue,
    /// Up, but its oldest unanswered request is older than the stall bound:
    /// to be dropped.
    Stalled,
    /// Not connected.
    Down,
}

/// The two bounds, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The call timeout: older than this, a reply is overdue.
    pub overdue_after_us: u64,
    /// Older than this, a reply is given up and its connection dropped.
    pub stall_after_us: u64,
}

/// How a connection is doing at `now_us`, given when its oldest unanswered
/// request was written (`None`: nothing unanswered). `None` for a slot with
/// no connection that counts (an idle extra).
pub fn state(
    phase: Phase,
    oldest_unanswered_us: Option<u64>,
    now_us: u64,
    bounds: Bounds,
) -> Option<State> {
    match phase {
        Phase::Idle => None,
        Phase::Dialling => Some(State::Down),
        Phase::Up | Phase::Closing => {
            let age = oldest_unanswered_us.map_or(0, |written| now_us.saturating_sub(written));
            Some(if age > bounds.stall_after_us {
                State::Stalled
            } else if age > bounds.overdue_after_us {
                State::Overdue
            } else {
                State::Ready
            })
        }
    }
}

/// One slot as the policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    pub phase: Phase,
    pub state: Option<State>,
    /// An extra slot (dialled only while the configured ones are overdue).
    pub extra: bool,
}

/// Where the next request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// To this slot's queue.
    Use(usize),
    /// Dial this idle extra slot, and queue the request there: it is
    /// written as soon as the connection is up.
    Activate(usize),
    /// Every connection that is up is overdue and no extra is left: fail
    /// the request at once.
    Exhausted,
}

/// Where a request goes: the ready connections take turns (`start` is a
/// counter that moves on with every request).
pub fn pick(views: &[View], start: usize) -> Pick {
    if views.is_empty() {
        return Pick::Exhausted;
    }
    let ready = |view: &View| view.phase == Phase::Up && view.state == Some(State::Ready);
    if let Some(index) = in_turn(views, start, ready) {
        return Pick::Use(index);
    }
    // An extra being dialled was wanted because everything else is
    // overdue: it is the first connection that will answer.
    if let Some(index) = in_turn(views, start, |view| {
        view.extra && view.phase == Phase::Dialling
    }) {
        return Pick::Use(index);
    }
    if views.iter().any(|view| view.phase == Phase::Up) {
        return match views
            .iter()
            .position(|view| view.extra && view.phase == Phase::Idle)
        {
            Some(index) => Pick::Activate(index),
            None => Pick::Exhausted,
        };
    }
    // Nothing is up: the node is down or not yet connected, and its own
    // connections are (re)dialling. The next one in turn queues the request
    // while it dials, or fails it at once while it waits out a backoff.
    in_turn(views, start, |view| !view.extra).map_or(Pick::Exhausted, Pick::Use)
}

/// The slot whose turn `start` is among those that `fit`: each of them in
/// turn, evenly. (Searching onwards from `start % views.len()` gave a
/// slot after a run of unfit ones all of their turns too: with two ready
/// connections and two extras at rest, one took three requests in four.)
fn in_turn(views: &[View], start: usize, fit: impl Fn(&View) -> bool) -> Option<usize> {
    let fitting = views.iter().filter(|view| fit(view)).count();
    let turn = start.checked_rem(fitting)?;
    views
        .iter()
        .enumerate()
        .filter(|(_, view)| fit(view))
        .nth(turn)
        .map(|(index, _)| index)
}

/// Where a request that must be sent (a rollback) goes when [`pick`] finds
/// nothing ready: the connection that is up, in turn, even if overdue. Its
/// caller does not wait for it; it is written when the connection gets to
/// it, or failed if the connection is dropped.
pub fn pick_any_up(views: &[View], start: usize) -> Option<usize> {
    in_turn(views, start, |view| view.phase == Phase::Up)
}

/// Whether the extra connection in slot `me` may close: the node has its
/// `configured` number of ready connections besides it.
pub fn extra_may_close(views: &[View], me: usize, configured: usize) -> bool {
    let ready_others = views
        .iter()
        .enumerate()
        .filter(|&(index, view)| {
            index != me && view.phase == Phase::Up && view.state == Some(State::Ready)
        })
        .count();
    ready_others >= configured
}

/// How long a condition has held, so an extra connection closes only once
/// the node has been calm for a while: through a stall that never ends,
/// connections turn ready for an instant each time their late replies
/// arrive, and closing on that would redial an extra a moment later.
#[derive(Clone, Copy, Debug, Default)]
pub struct Calm {
    since_us: Option<u64>,
}

impl Calm {
    /// Whether `holds` has been true at every look for `hold_us` up to `now_us`.
    pub fn observe(&mut self, holds: bool, now_us: u64, hold_us: u64) -> bool {
        if !holds {
            self.since_us = None;
            return false;
        }
        let since = *self.since_us.get_or_insert(now_us);
        now_us.saturating_sub(since) >= hold_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        overdue_after_us: 50_000,
        stall_after_us: 1_000_000,
    };

    /// A manual clock: microseconds since the node's epoch.
    const NOW: u64 = 10_000_000;

    fn up(written_ago_us: Option<u64>, extra: bool) -> View {
        let phase = Phase::Up;
        View {
            phase,
            state: state(phase, written_ago_us.map(|ago| NOW - ago), NOW, BOUNDS),
            extra,
        }
    }

    fn at_rest(phase: Phase, extra: bool) -> View {
        View {
            phase,
            state: state(phase, None, NOW, BOUNDS),
            extra,
        }
    }

    const READY: Option<u64> = None;
    const OVERDUE: Option<u64> = Some(200_000);

    #[test]
    fn a_reply_older_than_the_timeout_is_overdue_and_past_the_bound_stalled() {
        let of = |ago: Option<u64>| state(Phase::Up, ago.map(|ago| NOW - ago), NOW, BOUNDS);
        assert_eq!(of(None), Some(State::Ready));
        assert_eq!(
            of(Some(50_000)),
            Some(State::Ready),
            "at the timeout, not past it"
        );
        assert_eq!(of(Some(50_001)), Some(State::Overdue));
        assert_eq!(of(Some(1_000_000)), Some(State::Overdue));
        assert_eq!(of(Some(1_000_001)), Some(State::Stalled));
        assert_eq!(state(Phase::Dialling, None, NOW, BOUNDS), Some(State::Down));
        assert_eq!(state(Phase::Idle, Some(0), NOW, BOUNDS), None);
        // A request written "after now" (another thread's clock read) is fresh.
        assert_eq!(
            state(Phase::Up, Some(NOW + 5), NOW, BOUNDS),
            Some(State::Ready)
        );
    }

    #[test]
    fn ready_connections_take_requests_in_turn_and_overdue_ones_none() {
        let views = [
            up(READY, false),
            up(OVERDUE, false),
            up(READY, false),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(pick(&views, 0), Pick::Use(0));
        assert_eq!(pick(&views, 1), Pick::Use(2), "the overdue one is skipped");
        assert_eq!(pick(&views, 2), Pick::Use(0));
        assert_eq!(pick(&views, 3), Pick::Use(2));
        // Wrapping round the counter is still in turn.
        assert_eq!(pick(&views, usize::MAX), Pick::Use(2));
        assert_eq!(pick(&views, usize::MAX.wrapping_add(1)), Pick::Use(0));
    }

    /// Requests spread evenly over the ready connections, however many
    /// slots at rest (extras) or overdue lie between them: a slot after a
    /// run of unready ones must not take the turns of all of them.
    #[test]
    fn requests_spread_evenly_over_the_ready_connections() {
        let spread = |views: &[View]| {
            let mut taken = vec![0usize; views.len()];
            for start in 0..1_200 {
                match pick(views, start) {
                    Pick::Use(index) => taken[index] += 1,
                    other => panic!("{other:?}"),
                }
            }
            taken
        };
        let two_and_extras = [
            up(READY, false),
            up(READY, false),
            at_rest(Phase::Idle, true),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(spread(&two_and_extras), [600, 600, 0, 0]);
        let one_overdue = [
            up(READY, false),
            up(OVERDUE, false),
            up(READY, false),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(spread(&one_overdue), [600, 0, 600, 0]);
        let an_extra_up = [
            up(OVERDUE, false),
            up(READY, false),
            up(READY, true),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(spread(&an_extra_up), [0, 600, 600, 0]);
    }

    #[test]
    fn every_connection_overdue_dials_an_extra_then_sends_there_while_it_dials() {
        let mut views = [
            up(OVERDUE, false),
            up(OVERDUE, false),
            at_rest(Phase::Idle, true),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(pick(&views, 0), Pick::Activate(2));
        views[2] = at_rest(Phase::Dialling, true);
        assert_eq!(pick(&views, 1), Pick::Use(2));
        views[2] = up(READY, true);
        assert_eq!(pick(&views, 1), Pick::Use(2));
        // That one overdue too: the next extra.
        views[2] = up(OVERDUE, true);
        assert_eq!(pick(&views, 0), Pick::Activate(3));
    }

    #[test]
    fn with_no_extra_left_an_overdue_node_fails_at_once() {
        let views = [up(OVERDUE, false), up(Some(2_000_000), true)];
        assert_eq!(pick(&views, 0), Pick::Exhausted);
        assert_eq!(pick_any_up(&views, 1), Some(1), "a rollback still goes out");
    }

    #[test]
    fn a_node_with_nothing_up_queues_on_its_own_connections_not_extras() {
        let views = [
            at_rest(Phase::Dialling, false),
            at_rest(Phase::Dialling, false),
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(pick(&views, 0), Pick::Use(0));
        assert_eq!(pick(&views, 1), Pick::Use(1));
        assert_eq!(pick(&views, 2), Pick::Use(0));
        assert_eq!(pick_any_up(&views, 0), None);
        assert_eq!(pick(&[], 0), Pick::Exhausted);
    }

    #[test]
    fn a_closing_extra_takes_no_new_requests() {
        let views = [
            up(OVERDUE, false),
            View {
                phase: Phase::Closing,
                ..up(READY, true)
            },
            at_rest(Phase::Idle, true),
        ];
        assert_eq!(pick(&views, 1), Pick::Activate(2));
    }

    #[test]
    fn an_extra_closes_once_the_configured_number_besides_it_are_ready() {
        let views = [
            up(READY, false),
            up(OVERDUE, false),
            up(READY, true),
            up(READY, true),
        ];
        // Two configured: slot 2 sees slots 0 and 3 ready, so it may close;
        // once it has, slot 3 sees only slot 0 and stays.
        assert!(extra_may_close(&views, 2, 2));
        let after = [views[0], views[1], at_rest(Phase::Idle, true), views[3]];
        assert!(!extra_may_close(&after, 3, 2));
        let drained = [up(READY, false), up(READY, false), after[2], after[3]];
        assert!(extra_may_close(&drained, 3, 2));
    }

    #[test]
    fn calm_must_hold_unbroken_for_the_whole_stretch() {
        let mut calm = Calm::default();
        assert!(!calm.observe(true, 1_000, 200));
        assert!(!calm.observe(true, 1_199, 200));
        assert!(calm.observe(true, 1_200, 200));
        // One look where it does not hold starts the stretch again.
        assert!(!calm.observe(false, 1_300, 200));
        assert!(!calm.observe(true, 1_400, 200));
        assert!(calm.observe(true, 1_600, 200));
        assert!(Calm::default().observe(true, 5, 0), "no stretch asked for");
    }

    #[test]
    fn phases_survive_their_atomic_encoding() {
        for phase in Phase::ALL {
            assert_eq!(Phase::from_u8(phase.as_u8()), phase);
        }
    }
}
