//! The writer of one connection: what is queued goes out in one write,
//! and while that write waits for its replies the next batch gathers in
//! the queue: N concurrent checks cost one write, not N. A batch is
//! bounded by the commands it carries, not the requests, so one request
//! of many counters cannot make a write (and the replies every other key
//! waits behind) grow without bound.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use super::NodeClock;
use super::queue::{Contents, Queue, Request};
use super::reader::{InFlight, Shared};
use super::signal::Waiting;
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

/// How the writer ended. It holds no request when it ends: between taking
/// a batch from the queue and putting it in the FIFO it never waits.
pub(super) struct WriterEnd {
    /// The queue is closed and empty: the node was dropped.
    pub node_dropped: bool,
    pub error: Option<String>,
    /// It ended because it was told to retire and had nothing left: none
    /// queued, none unanswered.
    pub retired: bool,
}

impl WriterEnd {
    fn stopped() -> WriterEnd {
        WriterEnd {
            node_dropped: false,
            error: None,
            retired: false,
        }
    }

    fn node_dropped() -> WriterEnd {
        WriterEnd {
            node_dropped: true,
            ..WriterEnd::stopped()
        }
    }

    fn retired() -> WriterEnd {
        WriterEnd {
            retired: true,
            ..WriterEnd::stopped()
        }
    }
}

/// Whether a writer told to retire may end its connection: only with
/// nothing in hand can it know that closing loses nothing, since a request
/// written but unanswered would be failed with the connection, and a
/// take-back among them lost. (It holds no request of its own when it
/// waits: see [`WriterEnd`].)
fn retirable(shared: &Shared, queue: &Queue) -> bool {
    shared.in_flight().is_empty() && queue.is_empty()
}

/// Write what is queued until stopped, told to retire, or failed; then
/// hand the write half back: a connection given up as stalled keeps it,
/// unwritten, while it reads its late replies, since closing it would tell
/// memcached the stream is over.
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    queue: Arc<Queue>,
    shared: Arc<Shared>,
    stopped: oneshot::Receiver<()>,
    namespace: Arc<str>,
    clock: NodeClock,
) -> (WriterEnd, W) {
    let end = write_until_end(&mut write, &queue, &shared, stopped, &namespace, clock).await;
    (end, write)
}

async fn write_until_end<W: AsyncWrite + Unpin>(
    write: &mut W,
    queue: &Queue,
    shared: &Shared,
    mut stopped: oneshot::Receiver<()>,
    namespace: &str,
    clock: NodeClock,
) -> WriterEnd {
    let mut batch: Vec<Request> = Vec::with_capacity(64);
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut opaque: u32 = 0;
    let mut arrived_waiting = Waiting::default();
    let mut retire_waiting = Waiting::default();
    let mut answered_waiting = Waiting::default();
    loop {
        // A write already out brings its replies within a round trip; until
        // then the next batch gathers in the queue (see WRITES_IN_FLIGHT),
        // where callers are refused once it is full: a silent node holds
        // at most a write and a queue. With none out, whatever is queued
        // goes at once. The writer does not yield first to let more
        // callers queue theirs: tokio defers a yielded task until its
        // worker next polls the I/O driver, behind every task runnable
        // then, and on a hot key that task's write is what a whole
        // gathered batch waits for (without the yield: one hot key 1.31M
        // -> 1.84M checks/s, one caller 19k -> 26k).
        let write_out = shared.writes_out.load(Ordering::Acquire) >= WRITES_IN_FLIGHT;
        let contents = if write_out {
            queue.contents()
        } else {
            queue.take_batch(&mut batch, MAX_BATCH_COMMANDS)
        };
        match contents {
            Contents::Ended => return WriterEnd::node_dropped(),
            // A request's arrival is the news, not an answer: waiting for
            // the answer with nothing queued, the reader's raise woke the
            // writer for nothing beside the caller it answered, and tokio,
            // finding two tasks woken at once, woke the other worker for
            // one of them (with one caller: two futex calls and two
            // context switches a check).
            Contents::Empty => {
                tokio::select! {
                    biased;
                    _ = &mut stopped => return WriterEnd::stopped(),
                    () = shared.retire.taken(&mut retire_waiting) => {
                        if retirable(shared, queue) {
                            return WriterEnd::retired();
                        }
                    }
                    () = queue.arrived.taken(&mut arrived_waiting) => {}
                }
                continue;
            }
            Contents::Requests if write_out => {
                tokio::select! {
                    biased;
                    _ = &mut stopped => return WriterEnd::stopped(),
                    () = shared.write_answered.taken(&mut answered_waiting) => {}
                }
                continue;
            }
            Contents::Requests => {}
        }
        let written_us = clock.now_us();
        // Its caller gave up before it was sent, or its time ran out: it
        // never happened. Decided once, here: what is encoded below is
        // exactly what goes in flight.
        batch.retain_mut(|request| {
            if request.expired_at(written_us) {
                request.answer_ran_out();
                return false;
            }
            !request.abandoned()
        });
        if batch.is_empty() {
            continue;
        }
        buffer.clear();
        // Each request's first token, in the order they are encoded.
        let mut next_opaque = opaque;
        let mut earliest = (u64::MAX, 0);
        let mut encoder = wire::Encoder::new(namespace, &mut buffer);
        for request in &batch {
            earliest = earliest.min((request.deadline_us, request.timeout_ms));
            for command in &request.commands {
                encoder.encode(command, opaque);
                opaque = opaque.wrapping_add(1);
            }
        }
        let last = batch.len() - 1;
        shared.writes_out.fetch_add(1, Ordering::AcqRel);
        // Moved once, from the batch into the FIFO (a request is a few
        // hundred bytes, and moving them was the writer's largest cost).
        shared
            .in_flight()
            .extend(batch.drain(..).enumerate().map(|(index, request)| {
                let first_opaque = next_opaque;
                next_opaque = next_opaque.wrapping_add(request.commands.len() as u32);
                InFlight {
                    request,
                    first_opaque,
                    written_us,
                    ends_write: index == last,
                    given_up: false,
                }
            }));
        // Out of the queue and into the FIFO: the sweep looks there now.
        queue.deadlines.waiting(earliest.0, earliest.1);
        tokio::select! {
            biased;
            _ = &mut stopped => return WriterEnd::stopped(),
            written = write.write_all(&buffer) => {
                if let Err(error) = written {
                    return WriterEnd {
                        error: Some(format!("write failed: {error}")),
                        ..WriterEnd::stopped()
                    };
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
    use crate::store::memcached::conn::queue::Delivery;
    use crate::store::memcached::wire::Command;
    use tokio::io::AsyncReadExt;

    fn request(commands: usize) -> Request {
        Request::new(
            (0..commands).map(|_| Command::Noop).collect(),
            Delivery::Plain,
            None,
        )
    }

    fn taken(queue: &Queue) -> Vec<usize> {
        let mut batch = Vec::new();
        queue.take_batch(&mut batch, MAX_BATCH_COMMANDS);
        batch.iter().map(|request| request.commands.len()).collect()
    }

    #[test]
    fn a_batch_is_bounded_by_commands_not_requests() {
        let queue = Queue::new(1_000);
        for _ in 0..MAX_BATCH_COMMANDS / 4 + 1 {
            assert!(queue.push(request(4)).is_ok());
        }
        assert_eq!(taken(&queue), vec![4; MAX_BATCH_COMMANDS / 4]);
        assert_eq!(taken(&queue), vec![4], "the rest waits for the next write");
        // One request of many counters goes alone, and the next waits.
        for commands in [2, MAX_BATCH_COMMANDS + 10, 1] {
            assert!(queue.push(request(commands)).is_ok());
        }
        assert_eq!(taken(&queue), vec![2]);
        assert_eq!(
            taken(&queue),
            vec![MAX_BATCH_COMMANDS + 10],
            "an oversized batch takes nothing more"
        );
        assert_eq!(taken(&queue), vec![1]);
    }

    fn noop(delivery: Delivery) -> Request {
        Request::new(vec![Command::Noop].into_iter().collect(), delivery, None)
    }

    /// The writer of `queue` on `client`, and what stops it.
    fn start(
        client: tokio::io::DuplexStream,
        queue: &Arc<Queue>,
        shared: &Arc<Shared>,
        clock: NodeClock,
    ) -> (
        tokio::task::JoinHandle<(WriterEnd, tokio::io::DuplexStream)>,
        oneshot::Sender<()>,
    ) {
        let (stop, stopped) = oneshot::channel();
        let writer = tokio::spawn(write_loop(
            client,
            queue.clone(),
            shared.clone(),
            stopped,
            Arc::from("ns"),
            clock,
        ));
        (writer, stop)
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
        let queue = Arc::new(Queue::new(8));
        let shared = Arc::new(Shared::new(Arc::new(SlotStatus::new(true)), Arc::default()));
        queue.push_owed(noop(Delivery::Always));
        shared.retire.raise();
        let (writer, _stop) = start(
            client,
            &queue,
            &shared,
            NodeClock(std::time::Instant::now()),
        );
        let mut bytes = [0u8; 64];
        let read = written(&mut server, &mut bytes).await;
        assert_eq!(&bytes[..read], b"mn\r\n", "the queued take-back is written");

        // Told again while it is unanswered: it goes on, and writes the next.
        shared.retire.raise();
        tokio::task::yield_now().await;
        queue.push_owed(noop(Delivery::Always));
        // Answered (as the reader would): the next write may go out.
        let answered = shared.in_flight().pop_front();
        assert!(answered.is_some());
        shared.writes_out.fetch_sub(1, Ordering::AcqRel);
        shared.write_answered.raise();
        let read = written(&mut server, &mut bytes).await;
        assert_eq!(&bytes[..read], b"mn\r\n", "still writing while unanswered");

        // With nothing queued and nothing unanswered, it retires; the queue
        // stays the slot's, for its next connection.
        assert!(shared.in_flight().pop_front().is_some());
        shared.writes_out.fetch_sub(1, Ordering::AcqRel);
        shared.write_answered.raise();
        shared.retire.raise();
        let (end, _) = writer.await.unwrap();
        assert!(end.retired && end.error.is_none() && !end.node_dropped);
    }

    /// A request whose caller's time ran out while it was queued is
    /// answered so, and not sent: nothing happened.
    #[tokio::test]
    async fn a_request_out_of_time_when_its_write_goes_is_not_sent() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let queue = Arc::new(Queue::new(8));
        let shared = Arc::new(Shared::new(
            Arc::new(SlotStatus::new(false)),
            Arc::default(),
        ));
        let clock = NodeClock(std::time::Instant::now());
        let (reply, answer) = oneshot::channel();
        let mut late = request(1);
        late.reply = Some(reply);
        late.deadline_us = 0;
        late.timeout_ms = 7;
        assert!(queue.push(late).is_ok());
        assert!(queue.push(noop(Delivery::Always)).is_ok());
        let (_writer, _stop) = start(client, &queue, &shared, clock);
        let mut bytes = [0u8; 64];
        let read = written(&mut server, &mut bytes).await;
        assert_eq!(
            &bytes[..read],
            b"mn\r\n",
            "only the request in time is written"
        );
        assert!(matches!(
            answer.await.unwrap(),
            Err(crate::store::StoreError::Timeout(7))
        ));
    }

    /// The node dropped while a write waits for its replies: the writer
    /// ends (its slot then fails what is unanswered), rather than waiting
    /// for a request that can no longer come.
    #[tokio::test]
    async fn a_writer_with_a_write_out_ends_when_the_node_is_dropped() {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let queue = Arc::new(Queue::new(8));
        let shared = Arc::new(Shared::new(
            Arc::new(SlotStatus::new(false)),
            Arc::default(),
        ));
        assert!(queue.push(noop(Delivery::Plain)).is_ok());
        let (writer, _stop) = start(
            client,
            &queue,
            &shared,
            NodeClock(std::time::Instant::now()),
        );
        let mut bytes = [0u8; 64];
        written(&mut server, &mut bytes).await;
        assert_eq!(shared.writes_out.load(Ordering::SeqCst), 1);
        queue.close();
        let end = tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the writer still waits after its node was dropped")
            .unwrap()
            .0;
        assert!(end.node_dropped);
    }
}
