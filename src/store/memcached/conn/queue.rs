//! A connection slot's queue of requests: bounded for callers, and ours
//! rather than a channel's, so that the slot can look through it. The
//! deadline sweep answers a request whose caller's time is up wherever it
//! waits, here or written (see [`super::sweep`]), and the queue is the
//! slot's for good: a request queued while a connection ends waits here
//! for the next one, with nothing handed over.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::Commands;
use super::reader::Answer;
use super::signal::Signal;
use super::sweep::Deadlines;
use crate::store::StoreError;

/// What the reader does with an outcome nobody claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Drop it; send the request only if its caller still waits.
    Plain,
    /// Take back the additions it applied if its caller never claims it.
    UndoIfUnclaimed,
    /// Send it even if its caller stopped waiting: a rollback must happen.
    Always,
}

pub(super) struct Request {
    pub commands: Commands,
    pub delivery: Delivery,
    /// `None` for a compensation that nobody waits for, and once the
    /// sweep has answered it.
    pub reply: Option<oneshot::Sender<Answer>>,
    /// When its caller stops waiting, in the node's microseconds
    /// ([`NO_DEADLINE`] for a caller that bounds its own wait).
    pub deadline_us: u64,
    /// The time its caller gave it, for the error that says it ran out.
    pub timeout_ms: u32,
}

/// The deadline of a request whose caller bounds its own wait.
pub(super) const NO_DEADLINE: u64 = u64::MAX;

impl Request {
    /// A request without a deadline of its own.
    pub(super) fn new(
        commands: Commands,
        delivery: Delivery,
        reply: Option<oneshot::Sender<Answer>>,
    ) -> Request {
        Request {
            commands,
            delivery,
            reply,
            deadline_us: NO_DEADLINE,
            timeout_ms: 0,
        }
    }

    /// It must happen whether or not anyone waits for it (a take-back, a
    /// rollback).
    pub(super) fn is_owed(&self) -> bool {
        self.delivery == Delivery::Always
    }

    /// Its caller gave up before it was sent: it is not sent at all.
    pub(super) fn abandoned(&self) -> bool {
        self.delivery != Delivery::Always && self.reply.as_ref().is_some_and(|r| r.is_closed())
    }

    /// Whether its caller's time is up at `now_us` (and it still waits).
    pub(super) fn expired_at(&self, now_us: u64) -> bool {
        self.deadline_us <= now_us && self.reply.is_some()
    }

    /// Tell its caller that its time ran out; what was written still gets
    /// its replies, and its additions are then taken back (see
    /// `reader::complete`).
    pub(super) fn answer_ran_out(&mut self) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(StoreError::Timeout(u64::from(self.timeout_ms))));
        }
    }
}

/// Fail a request that was never written: nothing was sent, so nothing
/// happened.
pub(super) fn fail_unsent(request: Request, why: &str) {
    if let Some(reply) = request.reply {
        let _ = reply.send(Err(StoreError::Unreachable(why.to_owned())));
    } else {
        tracing::warn!(why, "a rollback could not be sent");
    }
}

/// Why a request was not queued.
pub(super) enum Refused {
    Full,
    /// The node was dropped.
    Closed,
}

pub(super) struct Queue {
    inner: Mutex<Queued>,
    /// Requests callers may queue; a take-back goes in even past it.
    depth: usize,
    /// Raised at every request queued: wakes the slot's writer, or the
    /// slot itself while no connection is up, if it waits.
    pub(super) arrived: Signal,
    /// What the slot's deadline sweep looks at next.
    pub(super) deadlines: Deadlines,
}

pub(super) struct Queued {
    pub(super) requests: VecDeque<Request>,
    /// The node was dropped: nothing more is queued, and the slot ends
    /// once what is queued is written.
    closed: bool,
}

/// What a queue holds (or [`Queue::take_batch`] took).
pub(super) enum Contents {
    Requests,
    Empty,
    /// Closed, and nothing left in it.
    Ended,
}

impl Queued {
    fn contents(&self) -> Contents {
        match (self.requests.is_empty(), self.closed) {
            (false, _) => Contents::Requests,
            (true, false) => Contents::Empty,
            (true, true) => Contents::Ended,
        }
    }
}

impl Queue {
    pub(super) fn new(depth: usize) -> Queue {
        Queue {
            inner: Mutex::new(Queued {
                requests: VecDeque::new(),
                closed: false,
            }),
            depth: depth.max(1),
            arrived: Signal::default(),
            deadlines: Deadlines::default(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Queued> {
        // Nothing panics while holding the lock; if something did, the
        // queue is still a queue.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue a caller's request; refused (and dropped) when the queue is
    /// full, so the failure mode decides instead of a queue without bound.
    pub(super) fn push(&self, request: Request) -> Result<(), Refused> {
        let (deadline_us, timeout_ms) = (request.deadline_us, request.timeout_ms);
        {
            let mut queued = self.lock();
            if queued.closed {
                return Err(Refused::Closed);
            }
            if queued.requests.len() >= self.depth {
                return Err(Refused::Full);
            }
            queued.requests.push_back(request);
        }
        self.arrived.raise();
        self.deadlines.waiting(deadline_us, timeout_ms);
        Ok(())
    }

    /// Queue a request that must happen (a take-back, a rollback) even
    /// past the bound, ahead of callers' requests. One is owed only for a
    /// request already answered, so this adds no unbounded work, while
    /// refusing it would leave counted a cost that nobody was told about.
    /// First in line, it goes out with the very next write: behind a full
    /// queue it could wait for several, and be lost with a connection
    /// that ended meanwhile.
    pub(super) fn push_owed(&self, request: Request) {
        let mut queued = self.lock();
        if queued.closed {
            drop(queued);
            fail_unsent(request, "the connection's queue is closed");
            return;
        }
        queued.requests.push_front(request);
        drop(queued);
        self.arrived.raise();
    }

    pub(super) fn is_empty(&self) -> bool {
        self.lock().requests.is_empty()
    }

    /// The node was dropped: nothing queued from now on is sent.
    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The node was dropped: refuse what comes next, and wake whoever
    /// waits so the slot ends once what is queued is written.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.arrived.raise();
        self.deadlines.wake();
    }

    /// The requests of the next write, oldest first, up to
    /// `max_commands` (a request of more goes alone).
    pub(super) fn take_batch(&self, batch: &mut Vec<Request>, max_commands: usize) -> Contents {
        let mut queued = self.lock();
        let mut commands = 0;
        while let Some(next) = queued.requests.front() {
            let more = next.commands.len();
            if !batch.is_empty() && commands + more > max_commands {
                break;
            }
            commands += more;
            batch.extend(queued.requests.pop_front());
        }
        if batch.is_empty() {
            queued.contents()
        } else {
            Contents::Requests
        }
    }

    pub(super) fn contents(&self) -> Contents {
        self.lock().contents()
    }

    /// Fail what callers queued (the slot cannot send it now); what is
    /// owed stays for the slot's next connection, since a take-back or a
    /// rollback never sent is still owed, unless the node was dropped. True
    /// while the node is still there.
    pub(super) fn fail_all(&self, why: &str) -> bool {
        let (failed, open) = {
            let mut queued = self.lock();
            let open = !queued.closed;
            let all = std::mem::take(&mut queued.requests);
            let (owed, failed) = all
                .into_iter()
                .partition(|request| open && request.is_owed());
            queued.requests = owed;
            (failed, open)
        };
        for request in failed {
            fail_unsent(request, why);
        }
        open
    }

    /// Move what is owed to `keeper`, the queue of a slot that redials
    /// until the node is dropped: an extra connection that cannot be
    /// dialled rests until it is needed again, which may be never.
    pub(super) fn hand_over_owed(&self, keeper: &Queue) {
        let owed: VecDeque<Request> = {
            let mut queued = self.lock();
            let all = std::mem::take(&mut queued.requests);
            let (owed, others) = all.into_iter().partition(Request::is_owed);
            queued.requests = others;
            owed
        };
        for request in owed {
            keeper.push_owed(request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memcached::wire::Command;

    fn request(delivery: Delivery) -> (Request, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let commands = std::iter::once(Command::Noop).collect();
        (Request::new(commands, delivery, Some(reply)), answer)
    }

    fn deliveries(queue: &Queue) -> Vec<Delivery> {
        queue.lock().requests.iter().map(|r| r.delivery).collect()
    }

    /// A connection that cannot send fails its callers' requests at once,
    /// but what is owed waits for the next one: a take-back never sent is
    /// still owed. Owed requests go ahead of callers' ones.
    #[test]
    fn what_is_owed_outlasts_a_failed_connection_and_goes_first() {
        let queue = Queue::new(8);
        let (plain, mut plain_answer) = request(Delivery::Plain);
        assert!(queue.push(plain).is_ok());
        let (owed, mut owed_answer) = request(Delivery::Always);
        queue.push_owed(owed);
        assert_eq!(deliveries(&queue), [Delivery::Always, Delivery::Plain]);

        assert!(queue.fail_all("the connection dropped"));
        assert!(matches!(
            plain_answer.try_recv(),
            Ok(Err(StoreError::Unreachable(_)))
        ));
        assert!(owed_answer.try_recv().is_err(), "not answered: still owed");
        assert_eq!(deliveries(&queue), [Delivery::Always]);

        // The node is dropped: nothing will send it.
        queue.close();
        assert!(!queue.fail_all("the node was dropped"));
        assert!(matches!(
            owed_answer.try_recv(),
            Ok(Err(StoreError::Unreachable(_)))
        ));
        assert!(queue.is_empty());
    }

    /// An extra slot that cannot dial hands what it owes to its keeper,
    /// and keeps its callers' requests (to fail them).
    #[test]
    fn only_what_is_owed_is_handed_over() {
        let (extra, keeper) = (Queue::new(8), Queue::new(8));
        assert!(extra.push(request(Delivery::UndoIfUnclaimed).0).is_ok());
        extra.push_owed(request(Delivery::Always).0);
        assert!(keeper.push(request(Delivery::Plain).0).is_ok());
        extra.hand_over_owed(&keeper);
        assert_eq!(deliveries(&extra), [Delivery::UndoIfUnclaimed]);
        assert_eq!(deliveries(&keeper), [Delivery::Always, Delivery::Plain]);
    }
}
