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
//!   one whose oldest reply is later than the stall bound is given up
//!   (see [`give_up`]): a write it holds may yet be applied, and its
//!   reply is what tells whether to take it back;
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
    /// to be given up.
    Stalled,
    /// Not connected.
    Down,
}

/// The two bounds, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// The call timeout: older than this, a reply is overdue.
    pub overdue_after_us: u64,
    /// Older than this, a reply is late enough to give its connection up.
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

impl View {
    /// Up and answering within the call timeout: a slot that takes
    /// requests in turn.
    pub fn ready(&self) -> bool {
        self.phase == Phase::Up && self.state == Some(State::Ready)
    }
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
    if let Some(index) = in_turn(views, start, View::ready) {
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
        .filter(|&(index, view)| index != me && view.ready())
        .count();
    ready_others >= configured
}

/// What becomes of a connection found stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    /// Closed, and its slot dialled again; what it owes fails. Nothing
    /// it owes could need taking back, or draining is off.
    Close,
    /// Drained: it takes no more writes but reads on, so that a late reply
    /// showing an addition applied gets it taken back, until it owes
    /// nothing or the drain bound passes; its slot dials a replacement.
    Drain,
    /// Kept as it is, reading on and taking no new request while it is
    /// stalled: its slot already drains a connection, and draining this
    /// one too would take a third. It is given up once that drain ends,
    /// or ready again once its late replies come.
    Keep,
}

/// How a stalled connection is given up. A write whose reply is late may
/// still be applied (a frozen node applies what it buffered once it runs
/// again); only the reply can tell, so a connection that owes an addition
/// is kept reading, while its slot holds at most one connection draining
/// beside the one it serves with.
pub fn give_up(owes_an_addition: bool, drains_allowed: bool, slot_drains: bool) -> GiveUp {
    match (owes_an_addition && drains_allowed, slot_drains) {
        (false, _) => GiveUp::Close,
        (true, false) => GiveUp::Drain,
        (true, true) => GiveUp::Keep,
    }
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
mod tests;
