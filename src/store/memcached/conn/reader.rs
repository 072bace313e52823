//! The reader of one connection, and the FIFO of written requests it
//! answers: replies parsed in order, each paired with the oldest command
//! still waiting (checked by its opaque token), and handed to its caller.
//! An addition whose caller stopped waiting is taken back, however late
//! its reply: a connection given up as stalled keeps its reader (see
//! `drain`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::oneshot;

use super::queue::{Delivery, Queue, Request};
use super::queued::Queued;
use super::signal::Signal;
use super::{LateReplies, Replies, SlotStatus};
use crate::store::StoreError;
use crate::store::memcached::wire::{self, Command, Reply};

/// A request's replies, or why there are none, on their way to its caller.
pub type Answer = Result<Replies, StoreError>;

/// A written request and where its replies start.
pub(super) struct InFlight {
    pub request: Request,
    pub first_opaque: u32,
    /// When it was written, in the node's microseconds.
    pub written_us: u64,
    /// The last request of its write: its replies end that write.
    pub ends_write: bool,
    /// Its connection was found stalled while it waited: a take-back of
    /// its reply is a late one.
    pub given_up: bool,
}

impl InFlight {
    /// Whether its reply decides a take-back: it adds, and asked for it.
    pub fn counts(&self) -> bool {
        self.request.delivery == Delivery::UndoIfUnclaimed
            && self
                .request
                .commands
                .iter()
                .any(|command| command.addition().is_some())
    }

    /// Its connection was found stalled: a caller still waiting is told
    /// so, as if the connection had ended, and its replies, when they
    /// come, are read and dropped, what they report added taken back.
    pub fn give_up(&mut self, why: &str) {
        self.given_up = true;
        if let Some(reply) = self.request.reply.take() {
            let _ = reply.send(Err(unanswered(&self.request, why)));
        }
    }
}

/// Why a written request has no answer: ambiguous if it changes counts,
/// since it may have happened.
fn unanswered(request: &Request, why: &str) -> StoreError {
    if request.commands.iter().any(Command::changes_state) {
        StoreError::Ambiguous(why.to_owned())
    } else {
        StoreError::Unreachable(why.to_owned())
    }
}

/// Fail a written request whose replies will never come: its additions
/// may or may not have happened. True for a counted request, whose
/// additions, if applied, stay counted.
pub(super) fn fail_written(mut entry: InFlight, why: &str) -> bool {
    entry.give_up(why);
    entry.counts()
}

/// What the writer and the reader of one live connection share: the
/// written requests in order, and how many writes are unanswered. Every
/// change of the oldest entry is published to the connection's slot, where
/// the routing policy reads how overdue the connection is.
pub(super) struct Shared {
    in_flight: Mutex<VecDeque<InFlight>>,
    slot: Arc<SlotStatus>,
    /// Given up and draining: the slot serves with another connection, so
    /// this one publishes only what it still owes.
    draining: AtomicBool,
    /// Where a late take-back is counted.
    pub late_replies: Arc<LateReplies>,
    /// Writes whose replies have not all come back.
    pub writes_out: AtomicUsize,
    /// Raised by the reader each time a write's replies are complete.
    pub write_answered: Signal,
    /// Raised by the watchdog when an extra connection may close: the
    /// writer ends it if its hands, the queue and the FIFO are empty when
    /// it looks.
    pub retire: Signal,
}

/// The FIFO, locked; publishes the oldest entry's age when released, or
/// while draining, how many entries are left.
pub(super) struct Fifo<'a> {
    entries: MutexGuard<'a, VecDeque<InFlight>>,
    slot: &'a SlotStatus,
    draining: bool,
}

impl std::ops::Deref for Fifo<'_> {
    type Target = VecDeque<InFlight>;
    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

impl std::ops::DerefMut for Fifo<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.entries
    }
}

impl Drop for Fifo<'_> {
    fn drop(&mut self) {
        if self.draining {
            self.slot.set_draining_owed(self.entries.len());
        } else {
            self.slot
                .set_oldest_unanswered(self.entries.front().map(|entry| entry.written_us));
        }
    }
}

impl Shared {
    pub fn new(slot: Arc<SlotStatus>, late_replies: Arc<LateReplies>) -> Shared {
        Shared {
            in_flight: Mutex::new(VecDeque::new()),
            slot,
            draining: AtomicBool::new(false),
            late_replies,
            writes_out: AtomicUsize::new(0),
            write_answered: Signal::default(),
            retire: Signal::default(),
        }
    }

    pub fn in_flight(&self) -> Fifo<'_> {
        // Nothing panics while holding the lock; if something did, the
        // queue is still a queue.
        let entries = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Fifo {
            entries,
            slot: &self.slot,
            // Read under the lock: a FIFO locked after `start_draining`
            // publishes only what is owed.
            draining: self.draining.load(Ordering::Acquire),
        }
    }

    /// From now on the slot serves with another connection: this one
    /// publishes what it owes instead of its oldest write, which would
    /// read as the slot's. The flag is set before the lock is taken: a
    /// FIFO locked later sees it, and one locked earlier published its
    /// oldest write before the clear below.
    pub fn start_draining(&self, why: &str) {
        self.draining.store(true, Ordering::Release);
        let mut fifo = self.in_flight();
        for entry in fifo.iter_mut() {
            entry.give_up(why);
        }
        self.slot.set_draining(Some(fifo.len()));
        self.slot.set_oldest_unanswered(None);
    }

    /// The drain is over, and the connection closed: its slot may drain
    /// another.
    pub fn stop_draining(&self) {
        self.slot.set_draining(None);
    }
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(
    mut read: R,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
    requeue: Arc<Queue>,
) -> Result<(), String> {
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut start = 0;
    // Replies gathered so far for the oldest request in flight.
    let mut partial = Replies::new();
    let mut done: Vec<(InFlight, Replies)> = Vec::new();
    loop {
        let parsed = take_replies(&shared, &buffer[start..], &mut partial, &mut done);
        for (entry, replies) in done.drain(..) {
            let (ends_write, late) = (entry.ends_write, entry.given_up);
            if complete(entry, replies, &requeue) && late {
                shared.late_replies.count_taken_back();
            }
            // Only now may the next write go: with the take-backs this
            // answer owes in it, not left queued behind it.
            if ends_write {
                shared.writes_out.fetch_sub(1, Ordering::AcqRel);
                shared.write_answered.raise();
            }
        }
        start += parsed.map_err(|desync| desync.to_string())?;
        if start == buffer.len() {
            buffer.clear();
            start = 0;
        } else if start > 0 && buffer.len() - start < start {
            buffer.drain(..start);
            start = 0;
        }
        if buffer.capacity() - buffer.len() < 4096 {
            buffer.reserve(64 * 1024);
        }
        tokio::select! {
            biased;
            _ = &mut stopped => return Ok(()),
            read = read.read_buf(&mut buffer) => match read {
                Ok(0) => return Err("memcached closed the connection".to_owned()),
                Ok(_) => {}
                Err(error) => return Err(format!("read failed: {error}")),
            },
        }
    }
}

/// Parse every complete reply in `bytes`, pairing each with the oldest
/// command still waiting; finished requests go to `done`. Returns the bytes
/// consumed, or the desync that ends the connection.
fn take_replies(
    shared: &Shared,
    bytes: &[u8],
    partial: &mut Replies,
    done: &mut Vec<(InFlight, Replies)>,
) -> Result<usize, wire::Desync> {
    let mut consumed = 0;
    let mut in_flight = shared.in_flight();
    while let Some(parsed) = wire::parse(&bytes[consumed..])? {
        let Some(oldest) = in_flight.front() else {
            return Err(wire::Desync("a reply to no request".to_owned()));
        };
        let index = partial.len();
        let command = &oldest.request.commands[index];
        let expected = oldest.first_opaque.wrapping_add(index as u32);
        check_pairing(command, &parsed, expected)?;
        consumed += parsed.len;
        partial.push(parsed.reply);
        if partial.len() == oldest.request.commands.len()
            && let Some(entry) = in_flight.pop_front()
        {
            done.push((entry, std::mem::take(partial)));
        }
    }
    Ok(consumed)
}

/// A reply must echo its command's opaque token and be of a kind that
/// command can get; anything else means the stream is out of step.
fn check_pairing(
    command: &Command,
    parsed: &wire::Parsed,
    expected: u32,
) -> Result<(), wire::Desync> {
    let fits = match (command, &parsed.reply) {
        // Error lines carry no token; mn takes none.
        (Command::Noop, Reply::Noop) => parsed.opaque.is_none(),
        (Command::Noop, _) | (_, Reply::Noop) => false,
        (_, Reply::Failed(_)) => parsed.opaque.is_none_or(|opaque| opaque == expected),
        (Command::Add { .. }, Reply::Missing) => false,
        (_, Reply::Value(_) | Reply::Missing) => parsed.opaque == Some(expected),
    };
    if fits {
        Ok(())
    } else {
        Err(wire::Desync(format!(
            "reply {:?} (token {:?}) does not answer {command:?} (token {expected})",
            parsed.reply, parsed.opaque
        )))
    }
}

/// Hand a request its replies. If its caller is gone, or was told its
/// time ran out (see `sweep`), and the request asked for it, the reader
/// holds the reservation of its additions, with nobody to tell: dropped,
/// it gives them back. (A caller that goes after the replies reached it
/// drops its own: see `Unclaimed`.) True when a take-back was queued.
fn complete(entry: InFlight, replies: Replies, requeue: &Queue) -> bool {
    let replies = match entry.request.reply {
        // Answered by the sweep, or when its connection was given up: its
        // caller was told it has no count.
        None => replies,
        Some(reply) => match reply.send(Ok(replies)) {
            Ok(()) | Err(Err(_)) => return false,
            Err(Ok(unclaimed)) => unclaimed,
        },
    };
    if entry.request.delivery != Delivery::UndoIfUnclaimed {
        return false;
    }
    let reserved = Queued::written(requeue, &entry.request.commands, &replies);
    let gives_back = reserved.holds();
    drop(reserved);
    gives_back
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_back() -> Request {
        Request::new(
            std::iter::once(Command::Noop).collect(),
            Delivery::Always,
            None,
        )
    }

    /// A take-back owed when the queue is full (a burst of callers filled
    /// it) is queued all the same, not dropped.
    #[test]
    fn a_take_back_is_queued_in_a_full_queue() {
        let queue = Queue::new(1);
        assert!(queue.push(take_back()).is_ok());
        assert!(
            queue.push(take_back()).is_err(),
            "a caller's request is refused"
        );
        queue.push_owed(take_back());
        assert_eq!(queue.lock().requests.len(), 2);
    }
}
