//! The callers' side of one connection: requests in through a bounded
//! queue, batches out. The writer takes what is queued and sends it all in
//! one write, and while that write waits for its replies the next batch
//! gathers: N concurrent checks cost one write, not N. A batch is bounded
//! by the commands it carries, not the requests, so one request of many
//! counters cannot make a write (and the replies every other key waits
//! behind) grow without bound.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::reader::{Answer, InFlight, Shared};
use super::signal::Waiting;
use super::{Commands, NodeClock};
use crate::store::StoreError;
use crate::store::memcached::wire;

/// The most commands one write carries, unless a single request has more
/// (it then goes alone).
pub(super) const MAX_BATCH_COMMANDS: usize = 1024;
/// Writes that may wait for their replies at once on one connection. While
/// one is out, new requests gather into the next write instead of each
/// going out alone: under load a write carries every check that arrived
/// during a round trip, which keeps the wake-ups of memcached (and ours)
/// per check low. A lone caller finds nothing out and is written at once.
const WRITES_IN_FLIGHT: usize = 1;

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
    /// `None` for a compensation that nobody waits for.
    pub reply: Option<oneshot::Sender<Answer>>,
}

impl Request {
    fn abandoned(&self) -> bool {
        self.delivery != Delivery::Always && self.reply.as_ref().is_some_and(|r| r.is_closed())
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

/// How the writer ended.
pub(super) struct WriterEnd {
    pub queue: mpsc::Receiver<Request>,
    /// Every sender is gone: the node was dropped.
    pub node_dropped: bool,
    pub error: Option<String>,
    /// Requests taken from the queue but not written when it stopped: the
    /// slot sends them later or fails them, never drops them (one may be a
    /// take-back that must happen).
    pub unsent: Vec<Request>,
    /// It ended because it was told to retire and had nothing left: no
    /// request in hand, none queued, none unanswered.
    pub retired: bool,
}

/// Requests taken from the queue for the next write, bounded by commands.
struct Batch {
    requests: Vec<Request>,
    commands: usize,
    /// Taken from the queue but past the bound: first in the next batch.
    carried: Option<Request>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            requests: Vec::with_capacity(64),
            commands: 0,
            carried: None,
        }
    }

    fn is_full(&self) -> bool {
        self.carried.is_some() || self.commands >= MAX_BATCH_COMMANDS
    }

    /// Add `request`, or keep it for the next batch when it would take this
    /// one past the bound (a batch always takes its first request).
    fn push(&mut self, request: Request) {
        let commands = request.commands.len();
        if !self.requests.is_empty() && self.commands + commands > MAX_BATCH_COMMANDS {
            self.carried = Some(request);
            return;
        }
        self.commands += commands;
        self.requests.push(request);
    }

    /// Take every request already queued, up to the bound.
    fn fill(&mut self, queue: &mut mpsc::Receiver<Request>) {
        while !self.is_full() {
            match queue.try_recv() {
                Ok(request) => self.push(request),
                Err(_) => break,
            }
        }
    }

    /// Every request it holds, the carried one included, leaving it empty.
    fn take_all(&mut self) -> Vec<Request> {
        self.commands = 0;
        let mut all = std::mem::take(&mut self.requests);
        all.extend(self.carried.take());
        all
    }

    /// Start the next batch with what was carried over.
    fn restart(&mut self) {
        self.requests.clear();
        self.commands = 0;
        if let Some(request) = self.carried.take() {
            self.push(request);
        }
    }
}

pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut queue: mpsc::Receiver<Request>,
    first: Option<Request>,
    shared: Arc<Shared>,
    mut stopped: oneshot::Receiver<()>,
    namespace: Arc<str>,
    clock: NodeClock,
) -> WriterEnd {
    let mut batch = Batch::new();
    if let Some(request) = first {
        batch.push(request);
    }
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut opaque: u32 = 0;
    let mut retire_waiting = Waiting::default();
    let mut answered_waiting = Waiting::default();
    let end = |queue, node_dropped, error, batch: &mut Batch| WriterEnd {
        queue,
        node_dropped,
        error,
        unsent: batch.take_all(),
        retired: false,
    };
    loop {
        if batch.requests.is_empty() {
            let received = tokio::select! {
                biased;
                _ = &mut stopped => return end(queue, false, None, &mut batch),
                () = shared.retire.taken(&mut retire_waiting) => {
                    // Only here, with nothing in hand, can the writer know
                    // that closing loses nothing: a request it had taken, or
                    // one written but unanswered, would be failed with the
                    // connection, and a take-back among them lost.
                    if !shared.in_flight().is_empty() {
                        continue;
                    }
                    match queue.try_recv() {
                        Ok(request) => Some(request),
                        Err(mpsc::error::TryRecvError::Empty) => {
                            return WriterEnd {
                                retired: true,
                                ..end(queue, false, None, &mut batch)
                            };
                        }
                        Err(mpsc::error::TryRecvError::Disconnected) => None,
                    }
                }
                received = queue.recv() => received,
            };
            let Some(request) = received else {
                return end(queue, true, None, &mut batch);
            };
            batch.push(request);
        }
        // Whatever is queued goes with it. The writer does not yield first
        // to let more callers queue theirs: tokio defers a yielded task
        // until its worker next polls the I/O driver, behind every task
        // runnable then, and on a hot key that task's write is what a
        // whole gathered batch waits for (without the yield: one hot key
        // 1.31M -> 1.84M checks/s, one caller 19k -> 26k). Under load the
        // requests that arrive during a write's round trip gather anyway
        // (see WRITES_IN_FLIGHT).
        batch.fill(&mut queue);
        // A write already out brings its replies within a round trip; until
        // then, gather (see WRITES_IN_FLIGHT). A full batch stops taking
        // requests (they wait in the bounded queue, then are refused at
        // once) rather than going out beside an unanswered write: a silent
        // node holds at most two batches.
        while shared.writes_out.load(Ordering::Acquire) >= WRITES_IN_FLIGHT {
            tokio::select! {
                biased;
                _ = &mut stopped => return end(queue, false, None, &mut batch),
                () = shared.write_answered.taken(&mut answered_waiting) => {}
                received = queue.recv(), if !batch.is_full() => match received {
                    Some(request) => {
                        batch.push(request);
                        batch.fill(&mut queue);
                    }
                    None => return end(queue, true, None, &mut batch),
                },
            }
        }
        // Its caller gave up before it was sent: it never happened. Decided
        // once, here: what is encoded below is exactly what goes in flight.
        batch.requests.retain(|request| !request.abandoned());
        if batch.requests.is_empty() {
            batch.restart();
            continue;
        }
        buffer.clear();
        // Each request's first token, in the order they are encoded.
        let mut next_opaque = opaque;
        for request in &batch.requests {
            for command in &request.commands {
                wire::encode(command, &namespace, opaque, &mut buffer);
                opaque = opaque.wrapping_add(1);
            }
        }
        let written_us = clock.now_us();
        let last = batch.requests.len() - 1;
        shared.writes_out.fetch_add(1, Ordering::AcqRel);
        // Moved once, from the batch into the FIFO (a request is a few
        // hundred bytes, and moving them was the writer's largest cost).
        shared.in_flight().extend(
            batch
                .requests
                .drain(..)
                .enumerate()
                .map(|(index, request)| {
                    let first_opaque = next_opaque;
                    next_opaque = next_opaque.wrapping_add(request.commands.len() as u32);
                    InFlight {
                        request,
                        first_opaque,
                        written_us,
                        ends_write: index == last,
                    }
                }),
        );
        batch.restart();
        tokio::select! {
            biased;
            _ = &mut stopped => return end(queue, false, None, &mut batch),
            written = write.write_all(&buffer) => {
                if let Err(error) = written {
                    return end(
                        queue,
                        false,
                        Some(format!("write failed: {error}")),
                        &mut batch,
                    );
                }
            }
        }
        // A burst must not leave a huge buffer behind for good.
        if buffer.capacity() > 1024 * 1024 {
            buffer = Vec::with_capacity(64 * 1024);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memcached::conn::SlotStatus;
    use crate::store::memcached::wire::Command;
    use tokio::io::AsyncReadExt;

    fn request(commands: usize) -> Request {
        Request {
            commands: (0..commands).map(|_| Command::Noop).collect(),
            delivery: Delivery::Plain,
            reply: None,
        }
    }

    #[test]
    fn a_batch_is_bounded_by_commands_not_requests() {
        let mut batch = Batch::new();
        for _ in 0..MAX_BATCH_COMMANDS / 4 {
            batch.push(request(4));
        }
        assert!(batch.is_full());
        assert_eq!(batch.commands, MAX_BATCH_COMMANDS);
        // One request of many counters goes alone, and the next waits.
        let mut batch = Batch::new();
        batch.push(request(2));
        batch.push(request(MAX_BATCH_COMMANDS + 10));
        assert_eq!((batch.requests.len(), batch.commands), (1, 2));
        assert!(batch.is_full(), "what was carried waits for the next write");
        batch.restart();
        assert_eq!(batch.requests.len(), 1);
        assert_eq!(batch.commands, MAX_BATCH_COMMANDS + 10);
        batch.push(request(1));
        assert_eq!(
            batch.requests.len(),
            1,
            "an oversized batch takes nothing more"
        );
        batch.restart();
        assert_eq!((batch.requests.len(), batch.commands), (1, 1));
    }

    fn noop(delivery: Delivery) -> Request {
        Request {
            commands: vec![Command::Noop].into_iter().collect(),
            delivery,
            reply: None,
        }
    }

    /// What the writer wrote next; a writer that writes nothing fails the
    /// test instead of hanging it.
    async fn written(server: &mut tokio::io::DuplexStream, bytes: &mut [u8]) -> usize {
        tokio::time::timeout(std::time::Duration::from_secs(10), server.read(bytes))
            .await
            .expect("the writer wrote nothing within 10 s")
            .unwrap()
    }

    /// An extra connection told to retire just as a take-back reached its
    /// queue (a late reply's undo) must send it, not close with it: the
    /// writer ends only when it has nothing in hand, queued or unanswered.
    #[tokio::test]
    async fn a_retiring_writer_ends_only_with_nothing_in_hand() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let (sender, receiver) = mpsc::channel(8);
        let shared = Arc::new(Shared::new(Arc::new(SlotStatus::new(true))));
        let (_stop, stopped) = oneshot::channel();
        sender.try_send(noop(Delivery::Always)).unwrap();
        shared.retire.raise();
        let writer = tokio::spawn(write_loop(
            client,
            receiver,
            None,
            shared.clone(),
            stopped,
            Arc::from("ns"),
            NodeClock(std::time::Instant::now()),
        ));
        let mut bytes = [0u8; 64];
        let read = written(&mut server, &mut bytes).await;
        assert_eq!(&bytes[..read], b"mn\r\n", "the queued take-back is written");

        // Told again while it is unanswered: it goes on, and writes the next.
        shared.retire.raise();
        tokio::task::yield_now().await;
        sender.try_send(noop(Delivery::Always)).unwrap();
        // Answered (as the reader would): the next write may go out.
        let answered = shared.in_flight().pop_front();
        assert!(answered.is_some());
        shared.writes_out.fetch_sub(1, Ordering::AcqRel);
        shared.write_answered.raise();
        let read = written(&mut server, &mut bytes).await;
        assert_eq!(&bytes[..read], b"mn\r\n", "still writing while unanswered");

        // With nothing queued and nothing unanswered, it retires and gives
        // the queue back for the slot's next connection.
        assert!(shared.in_flight().pop_front().is_some());
        shared.writes_out.fetch_sub(1, Ordering::AcqRel);
        shared.write_answered.raise();
        shared.retire.raise();
        let end = writer.await.unwrap();
        assert!(end.retired && end.unsent.is_empty() && end.error.is_none());
        drop(end.queue);
        assert!(sender.is_closed());
    }
}
