//! Multiplexed, pipelined connections to one Memcached node.
//!
//! Any number of tasks hand requests (a few meta commands each) to a
//! connection slot's bounded queue; a writer sends everything queued in one
//! write and a reader parses the replies in order and completes each
//! waiting request. N concurrent checks cost one write and one read, not N
//! of each, and no caller ever holds a connection. A counted request
//! carries its caller's deadline, kept by one sweep per slot instead of a
//! timer per call.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | a node's connection slots: routing a call, dialling, serving, ending a connection |
//! | [`queue`] | a slot's queue of requests, bounded for callers |
//! | [`writer`] | the writer and the batching of writes |
//! | [`sweep`] | the deadline sweep: a request whose caller's time is up is answered, queued or written |
//! | [`reader`] | the reader and its FIFO of written requests; answers, and the take-back of a caller already gone |
//! | [`drain`] | a connection given up as stalled, read on for its late replies until it owes nothing or its bound passes; a node that left the topology, kept until it owes nothing |
//! | [`health`] | the pure policy: overdue, stalled and how it is given up, extra connections, which slot takes a request |
//! | `status` | what routing reads lock-free: each slot's phase, oldest unanswered write and drain, the node's clock, redials and late replies |
//! | [`unclaimed`] | a counted request's wait, and the reservation of what its replies report added |
//! | [`queued`] | where a dropped reservation's additions go back to: subtractions queued on the slot that counted them |
//! | [`doubt`] | when the node last gave reason to doubt it holds every count (a connection lost, a dial failed), and its birth |
//!
//! The stream stays in step whatever the callers do:
//! - a request whose caller stopped waiting (or whose deadline passed)
//!   before it was written is not sent at all, so the counters are
//!   untouched;
//! - a request whose caller stopped waiting (or whose deadline passed)
//!   after it was written keeps its place: its replies are read and
//!   dropped in order. If they carry additions that were applied, the
//!   reservation of them is dropped (by the reader, or by the caller's
//!   [`Unclaimed`] wait if the replies reached it first) and gives them
//!   back, so Memcached counts only what a caller was told was counted
//!   (the rule, `store::reservation`);
//! - every command carries an opaque token that the reply must echo, so a
//!   reply can never be paired with the wrong command;
//! - a parse error, EOF or a write error drops the connection: everything
//!   pending on it fails as a transient store error (never retried: a lost
//!   increment's outcome is unknown, and is never subtracted either), and
//!   the connection is dialled again with backoff;
//! - a reply overdue beyond the stall bound gives the connection up: its
//!   callers still waiting are told so, as if it had dropped, and another
//!   connection is dialled for the slot; but if it owes an addition it
//!   keeps reading (it *drains*, see [`drain`]), since a frozen node
//!   applies what it buffered once it runs again, and only the reply can
//!   tell that an addition nobody was told of must be taken back. A slot
//!   drains one connection at a time, so a node has at most two
//!   connections per slot.
//!
//! And a slow stretch ends with it: a connection whose oldest reply is late
//! beyond the call timeout takes no new requests (they would only time out
//! behind the late ones); new requests go to a ready connection, or to an
//! extra one dialled for them, and the overdue one takes requests again
//! once its late replies are in (see [`health`]).

mod doubt;
mod drain;
mod health;
mod queue;
mod queued;
mod reader;
mod signal;
mod slot;
mod status;
mod sweep;
mod unclaimed;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use tokio::sync::oneshot;

use self::health::{Bounds, Pick, State};
use self::queue::{Queue, Refused, Request};
use self::reader::Answer;
use self::slot::{Slot, supervise, supervise_extra};
use self::unclaimed::Unclaimed;
use super::dial::Dialer;
use super::wire::{Command, Reply};
use crate::store::{CallDeadline, StoreError};

pub use self::queue::Delivery;
pub use self::queued::{Additions, Queued, giving_back};
pub use self::status::{ConnectionStates, LateReplies, Redial, Redials};
use self::status::{NodeClock, NodeStatus, SlotStatus};
pub use self::unclaimed::Counted;

/// A request's commands and its replies, inline up to two: a check of one
/// limit at precision 1, the commonest, is one `mg` and one `ma`. A request
/// is moved about six times on its way through a connection, so the inline
/// size is paid on every check, while a longer request (several limits, a
/// precision above 1) pays one allocation for each instead (compare the
/// two with `bench/instructions.sh`).
pub type Commands = SmallVec<[Command; 2]>;
pub type Replies = SmallVec<[Reply; 2]>;

/// How the connections of a node behave.
#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: Arc<str>,
    /// Connections per node; as many extra ones may be dialled while these
    /// are overdue.
    pub connections: usize,
    /// Requests that may wait in one connection's queue; past it a call
    /// fails at once, so the failure mode decides instead of a queue.
    pub queue_depth: usize,
    /// The call timeout: a connection whose oldest reply is later than this
    /// is overdue and takes no new requests.
    pub overdue_after: Duration,
    /// A reply this late gives the connection up.
    pub stall_timeout: Duration,
    /// How long a connection given up as stalled still reads its late
    /// replies, to take back what they report added for nobody; zero: it
    /// is closed at once, and what it owes is lost.
    pub drain_timeout: Duration,
}

/// Where a node is: the address to dial and, over TLS, the name its
/// certificate must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: String,
    pub server_name: Option<String>,
}

/// The connections of one node: the configured ones, dialled now and
/// redialled whenever they drop, and as many extra slots, dialled only
/// while every connection that is up is overdue.
pub struct Node {
    target: Target,
    queues: Box<[Arc<Queue>]>,
    status: Arc<NodeStatus>,
    next: AtomicUsize,
}

impl Drop for Node {
    /// Its slots end once what is queued is written.
    fn drop(&mut self) {
        for queue in &self.queues {
            queue.close();
        }
    }
}

impl Node {
    /// Start the connections to `target`, until the node is dropped.
    pub fn spawn(target: Target, settings: Arc<Settings>, dialer: Arc<Dialer>) -> Node {
        Node::spawn_counting(target, settings, dialer, Default::default())
    }

    /// The same node at a new address (ElastiCache replaced it): its
    /// redials and late replies are carried over, each connection counted
    /// as moved.
    pub fn moved(&self, target: Target, settings: Arc<Settings>, dialer: Arc<Dialer>) -> Node {
        let redials = self.status.redials.clone();
        for _ in 0..self.status.configured {
            redials.count(Redial::Moved);
        }
        let late_replies = self.status.late_replies.clone();
        Node::spawn_counting(target, settings, dialer, (redials, late_replies))
    }

    fn spawn_counting(
        target: Target,
        settings: Arc<Settings>,
        dialer: Arc<Dialer>,
        (redials, late_replies): (Arc<Redials>, Arc<LateReplies>),
    ) -> Node {
        let configured = settings.connections.max(1);
        let slots: Box<[Arc<SlotStatus>]> = (0..2 * configured)
            .map(|index| Arc::new(SlotStatus::new(index >= configured)))
            .collect();
        let status = Arc::new(NodeStatus {
            slots,
            configured,
            bounds: Bounds {
                overdue_after_us: micros(settings.overdue_after),
                stall_after_us: micros(settings.stall_timeout),
            },
            clock: NodeClock(Instant::now()),
            redials,
            late_replies,
            doubt: Default::default(),
        });
        let queues: Box<[Arc<Queue>]> = (0..2 * configured)
            .map(|_| Arc::new(Queue::new(settings.queue_depth)))
            .collect();
        for (index, queue) in queues.iter().enumerate() {
            let slot = Slot {
                target: target.clone(),
                settings: settings.clone(),
                dialer: dialer.clone(),
                node: status.clone(),
                index,
                queue: queue.clone(),
                // An extra's configured counterpart keeps what it owes.
                keeper: queues[index % configured].clone(),
            };
            if index < configured {
                tokio::spawn(supervise(slot));
            } else {
                tokio::spawn(supervise_extra(slot));
            }
        }
        Node {
            target,
            queues,
            status,
            next: AtomicUsize::new(0),
        }
    }

    /// Where this node's connections are dialled.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// This node's connections by state; extras at rest are not counted.
    pub fn connection_states(&self) -> ConnectionStates {
        let mut states = ConnectionStates::default();
        for view in self.status.views() {
            match view.state {
                Some(State::Ready) => states.ready += 1,
                Some(State::Overdue | State::Stalled) => states.overdue += 1,
                Some(State::Down) => states.down += 1,
                None => {}
            }
        }
        for slot in self.status.slots.iter().filter(|slot| slot.draining()) {
            states.draining += 1;
            states.draining_owed += slot.draining_owed();
        }
        states
    }

    /// Doubt its counts from now on (see [`doubt`]): a call to it failed,
    /// or it joined or moved after the store started.
    pub fn doubt(&self) {
        self.status.doubt.now(self.status.clock);
    }

    /// When it was born (see [`Command::Born`]), if known since its last
    /// doubt; and the doubts so far, to give [`learn_born`](Self::learn_born).
    pub fn born(&self) -> (Option<u64>, u64) {
        (self.status.doubt.born(), self.status.doubt.generation())
    }

    /// The birth it answered to a question asked at `generation`.
    pub fn learn_born(&self, born: u64, generation: u64) {
        self.status.doubt.learn_born(born, generation);
    }

    /// Whether its counts were doubted within the last `span`.
    pub fn doubted_within(&self, span: Duration) -> bool {
        self.status.doubt.within(self.status.clock, span)
    }

    /// What became of the replies of its connections given up as stalled.
    pub fn late_replies(&self) -> &LateReplies {
        &self.status.late_replies
    }

    pub fn redials(&self) -> [(&'static str, u64); Redial::ALL.len()] {
        self.status.redials.by_reason()
    }

    /// Which slot's queue takes a request now (see [`health::pick`]).
    fn route(&self, delivery: Delivery) -> Result<usize, StoreError> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(index) = self.status.ready_in_turn(start) {
            return Ok(index);
        }
        let views = self.status.views();
        match health::pick(&views, start) {
            Pick::Use(index) => Ok(index),
            Pick::Activate(index) => {
                if self.status.slots[index].activate() {
                    self.status.redials.count(Redial::Overdue);
                }
                Ok(index)
            }
            Pick::Exhausted => match delivery {
                // A rollback waits behind late replies rather than not
                // happening at all.
                Delivery::Always => health::pick_any_up(&views, start).ok_or_else(overdue),
                Delivery::Plain | Delivery::UndoIfUnclaimed => Err(overdue()),
            },
        }
    }

    /// Send `commands` and wait for their replies, in order.
    pub async fn call(
        &self,
        commands: Commands,
        delivery: Delivery,
    ) -> Result<Replies, StoreError> {
        let (_, answer) = self.send(commands, delivery, None)?;
        answer
            .await
            .unwrap_or_else(|_| Err(ended_without_answering()))
    }

    /// Send `commands`, some of which are `additions`, and wait for their
    /// replies, until `deadline` if one is given: then the timeout error
    /// (see [`sweep`]). The replies come with the reservation of what they
    /// report added, handed to `take` in the poll they arrive: what it
    /// returns is the call's. A caller that stops waiting, or runs out of
    /// time, is not counted: if it goes after the replies reached it, its
    /// wait gives the additions back (see [`Unclaimed`]); if before, the
    /// reader does.
    pub async fn call_counted<'a, T>(
        &'a self,
        commands: Commands,
        additions: Additions<'a>,
        deadline: Option<CallDeadline>,
        take: impl FnOnce(Counted<'a>) -> Result<T, StoreError> + Unpin,
    ) -> Result<T, StoreError> {
        let (index, answer) = self.send(commands, Delivery::UndoIfUnclaimed, deadline)?;
        Unclaimed {
            answer: Some(answer),
            additions,
            queue: &self.queues[index],
            take: Some(take),
        }
        .await
    }

    /// Route and queue a request; its answer comes on the receiver.
    fn send(
        &self,
        commands: Commands,
        delivery: Delivery,
        deadline: Option<CallDeadline>,
    ) -> Result<(usize, oneshot::Receiver<Answer>), StoreError> {
        let index = self.route(delivery)?;
        let (reply, answer) = oneshot::channel();
        let mut request = Request::new(commands, delivery, Some(reply));
        if let Some(deadline) = deadline {
            request.deadline_us =
                micros(deadline.at.saturating_duration_since(self.status.clock.0));
            request.timeout_ms = u32::try_from(deadline.timeout.as_millis()).unwrap_or(u32::MAX);
        }
        if delivery == Delivery::Always {
            // Owed (a rollback): not refused for a full queue, and first
            // in line (see `push_owed`), whether or not its caller still
            // waits.
            self.queues[index].push_owed(request);
        } else {
            self.queues[index]
                .push(request)
                .map_err(|refused| match refused {
                    Refused::Full => {
                        StoreError::Overloaded("the connection's queue is full".to_owned())
                    }
                    Refused::Closed => {
                        StoreError::Unreachable("the connection is closed".to_owned())
                    }
                })?;
        }
        Ok((index, answer))
    }
}

pub(super) fn ended_without_answering() -> StoreError {
    StoreError::Unreachable("the connection ended without answering".to_owned())
}

fn overdue() -> StoreError {
    StoreError::Overloaded("every connection to the node is overdue".to_owned())
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
