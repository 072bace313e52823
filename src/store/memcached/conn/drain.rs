//! A connection given up as stalled, drained: it takes no more writes but
//! reads on, so that each late reply of a counting write gets the
//! take-back any reply whose caller is gone gets (see `reader::complete`),
//! sent by whichever connection serves the slot by then. A frozen node
//! (stopped, swapped out, a paused VM) applies what it buffered once it
//! runs again: closing the connection instead would leave those additions
//! counted, with nobody told of them, until their buckets expire.
//!
//! A drain ends when it owes nothing, when its reader fails (memcached
//! closed or reset the connection), when the drain bound passes, or when
//! the node is dropped. Whatever it still owes then may or may not have
//! been applied: it is never subtracted, only counted as lost
//! (`LateReplies::lost`), and a count it left errs towards refusing. What
//! it owes is bounded by what its writer had out when it was given up
//! (`writer::WRITES_IN_FLIGHT` writes), and a slot drains one connection
//! at a time (see `health::give_up`).
//!
//! A node that left the topology drains as a whole: it is kept until it
//! owes nothing, or its bound passes (`Node::keep_until_it_owes_nothing`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::Node;
use super::queue::Queue;
use super::reader::{Shared, fail_written};
use super::signal::Waiting;
use super::slot::Slot;

/// How often a drain looks whether its node was dropped: nothing it reads
/// could be taken back then, since the node's queues no longer send.
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// How often a node that left the topology looks whether it owes nothing.
const LEFT_NODE_LOOKS_EVERY: Duration = Duration::from_millis(20);

/// What a connection given up keeps: its reader, running, and its write
/// half, never written again but held open, since closing it would tell
/// memcached the stream is over.
pub(super) struct GivenUp<W> {
    pub reader: JoinHandle<Result<(), String>>,
    pub stop_reader: oneshot::Sender<()>,
    pub write: W,
    pub shared: Arc<Shared>,
}

/// Drain `given_up` in a task of its own, the slot being free to dial a
/// replacement at once. `why` is what callers still waiting on it are told.
pub(super) fn start<W: Send + 'static>(given_up: GivenUp<W>, slot: &Slot, why: &str) {
    given_up.shared.start_draining(why);
    tokio::spawn(drain(
        given_up,
        slot.queue.clone(),
        slot.settings.drain_timeout,
        slot.target.addr.clone(),
    ));
}

async fn drain<W>(given_up: GivenUp<W>, queue: Arc<Queue>, within: Duration, addr: String) {
    let GivenUp {
        mut reader,
        stop_reader,
        write,
        shared,
    } = given_up;
    let until = tokio::time::Instant::now() + within;
    let mut look = tokio::time::interval(LOOK_EVERY);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut answered = Waiting::default();
    let mut reader_ended = false;
    // `None` once it owes nothing; else why it ends owing.
    let cut_short = loop {
        if shared.in_flight().is_empty() {
            break None;
        }
        if queue.is_closed() {
            break Some("the node was dropped".to_owned());
        }
        tokio::select! {
            biased;
            end = &mut reader => {
                reader_ended = true;
                break Some(match end {
                    Ok(Err(why)) => why,
                    Ok(Ok(())) => "stopped".to_owned(),
                    Err(error) => format!("reader task failed: {error}"),
                });
            }
            // Raised as each write's replies are complete.
            () = shared.write_answered.taken(&mut answered) => {}
            () = tokio::time::sleep_until(until) => {
                break Some(format!("no reply within the drain bound ({within:?})"));
            }
            _ = look.tick() => {}
        }
    };
    if !reader_ended {
        let _ = stop_reader.send(());
        let _ = reader.await;
    }
    drop(write);
    let owed: Vec<_> = shared.in_flight().drain(..).collect();
    let why = cut_short.as_deref().unwrap_or("drained");
    let lost = owed
        .into_iter()
        .map(|entry| u64::from(fail_written(entry, why)))
        .sum();
    shared.late_replies.count_lost(lost);
    shared.stop_draining();
    match cut_short {
        None => tracing::debug!(%addr, "a stalled connection's late replies are all in; closed"),
        Some(why) => tracing::warn!(
            %addr,
            %why,
            lost,
            "a stalled connection ended owing replies; what their writes added, if memcached \
             applied it, stays counted until its bucket expires"
        ),
    }
}

/// A node that left the topology drains as a whole.
impl Node {
    /// Whether the node has nothing queued and no write unanswered, a
    /// draining connection's included: a reply still to come may carry a
    /// take-back (its caller gave up), and a take-back may be queued;
    /// either needs the connections open.
    fn owes_nothing(&self) -> bool {
        self.queues.iter().all(|queue| queue.is_empty())
            && self
                .status
                .slots
                .iter()
                .all(|slot| slot.oldest_unanswered().is_none() && !slot.draining())
    }

    /// Keep a node that left the topology until it owes nothing, at most
    /// `within`: its connections close when the last handle on it goes,
    /// and without this the replies still due (and the take-backs they
    /// carry for callers that gave up) would be lost with them. Owing
    /// nothing twice in a row, a short while apart, is believed: a writer
    /// holding a request between the queue and the wire shows neither.
    pub async fn keep_until_it_owes_nothing(self: Arc<Self>, within: Duration) {
        let until = tokio::time::Instant::now() + within;
        let mut quiet_looks = 0;
        while quiet_looks < 2 && tokio::time::Instant::now() < until {
            quiet_looks = if self.owes_nothing() {
                quiet_looks + 1
            } else {
                0
            };
            tokio::time::sleep(LEFT_NODE_LOOKS_EVERY).await;
        }
    }
}
