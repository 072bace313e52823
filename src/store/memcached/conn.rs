//! Multiplexed, pipelined connections to one Memcached node.
//!
//! Any number of tasks hand requests (a few meta commands each) to a
//! connection's bounded queue. A writer task takes everything queued, lets
//! the callers that are runnable right now add theirs, and sends it all in
//! one write; a reader task parses the replies in order and completes each
//! waiting request. N concurrent checks cost one write and one read, not N
//! of each, and no caller ever holds a connection.
//!
//! The stream stays in step whatever the callers do:
//! - a request whose caller stopped waiting before it was written is not
//!   sent at all, so the counters are untouched;
//! - a request whose caller stopped waiting after it was written keeps its
//!   place: its replies are read and dropped in order. If they carry
//!   additions that were applied, the additions are taken back (an
//!   [`Outcome`] that nobody claims undoes itself), so Memcached counts only
//!   what a caller was told was counted;
//! - every command carries an opaque token that the reply must echo, so a
//!   reply can never be paired with the wrong command;
//! - a parse error, EOF, a write error, or a reply overdue beyond the stall
//!   bound drops the connection: everything pending on it fails as a
//!   transient store error (never retried: a lost increment's outcome is
//!   unknown), and the connection is dialled again with backoff;
//! - a node's connections take requests in turn, skipping those that are
//!   down, so one waiting out its backoff fails nothing while another to
//!   the same node is up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::dial::{Dialer, Stream};
use super::wire::{self, Command, Reply};
use crate::store::StoreError;

pub type Commands = SmallVec<[Command; 4]>;
pub type Replies = SmallVec<[Reply; 4]>;

/// The most requests one write carries.
const MAX_BATCH: usize = 512;
/// Writes that may wait for their replies at once on one connection. While
/// one is out, new requests gather into the next write instead of each
/// going out alone: under load a write carries every check that arrived
/// during a round trip, which keeps the wake-ups of memcached (and ours)
/// per check low. A lone caller finds nothing out and is written at once.
const WRITES_IN_FLIGHT: usize = 1;
/// Backoff between failed dials: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_LAST: Duration = Duration::from_millis(500);
/// A connection that lived this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(1);

/// How the connections of a node behave.
#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: Arc<str>,
    /// Connections per node.
    pub connections: usize,
    /// Requests that may wait in one connection's queue; past it a call
    /// fails at once, so the failure mode decides instead of a queue.
    pub queue_depth: usize,
    /// A reply this late drops the connection.
    pub stall_timeout: Duration,
}

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

struct Request {
    commands: Commands,
    delivery: Delivery,
    /// `None` for a compensation that nobody waits for.
    reply: Option<oneshot::Sender<Outcome>>,
}

impl Request {
    fn abandoned(&self) -> bool {
        self.delivery != Delivery::Always && self.reply.as_ref().is_some_and(|r| r.is_closed())
    }
}

/// Replies on their way to a caller. Dropped unclaimed (the caller timed
/// out just as they arrived), it takes back the additions they applied.
pub struct Outcome {
    result: Result<Replies, StoreError>,
    undo: Option<Undo>,
}

struct Undo {
    commands: Commands,
    queue: mpsc::WeakSender<Request>,
}

impl Outcome {
    pub fn claim(mut self) -> Result<Replies, StoreError> {
        self.undo = None;
        std::mem::replace(&mut self.result, Ok(Replies::new()))
    }
}

impl Drop for Outcome {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else {
            return;
        };
        let request = Request {
            commands: undo.commands,
            delivery: Delivery::Always,
            reply: None,
        };
        let sent = undo
            .queue
            .upgrade()
            .is_some_and(|queue| queue.try_send(request).is_ok());
        if !sent {
            tracing::warn!("could not take back the additions of a request whose caller gave up");
        }
    }
}

/// A written request and where its replies start.
struct InFlight {
    request: Request,
    first_opaque: u32,
    written_at: Instant,
    /// The last request of its write: its replies end that write.
    ends_write: bool,
}

/// Where a node is: the address to dial and, over TLS, the name its
/// certificate must carry.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: String,
    pub server_name: Option<String>,
}

/// The connections of one node.
pub struct Node {
    queues: Box<[mpsc::Sender<Request>]>,
    /// Whether each connection is up now, by the index of its queue.
    up: Arc<[AtomicBool]>,
    next: AtomicUsize,
}

impl Node {
    /// Start `settings.connections` connections to `target`, dialled now
    /// and redialled whenever they drop, until the node is dropped.
    pub fn spawn(target: Target, settings: Arc<Settings>, dialer: Arc<Dialer>) -> Node {
        let connections = settings.connections.max(1);
        let up: Arc<[AtomicBool]> = (0..connections).map(|_| AtomicBool::new(false)).collect();
        let queues = (0..connections)
            .map(|index| {
                let (sender, receiver) = mpsc::channel(settings.queue_depth.max(1));
                tokio::spawn(supervise(
                    Slot {
                        target: target.clone(),
                        settings: settings.clone(),
                        dialer: dialer.clone(),
                        up: up.clone(),
                        index,
                    },
                    receiver,
                    sender.downgrade(),
                ));
                sender
            })
            .collect();
        Node {
            queues,
            up,
            next: AtomicUsize::new(0),
        }
    }

    /// Connections of this node that are up now.
    pub fn live_connections(&self) -> usize {
        self.up
            .iter()
            .filter(|up| up.load(Ordering::Relaxed))
            .count()
    }

    /// The next connection in turn that is up. Connections redial on their
    /// own backoff, so when a node returns some are up before the others:
    /// a request handed to one still waiting out its backoff would fail
    /// while its node answers. With none up, the next in turn fails it.
    fn pick(&self) -> usize {
        let count = self.queues.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        (0..count)
            .map(|step| first.wrapping_add(step) % count)
            .find(|&index| self.up[index].load(Ordering::Relaxed))
            .unwrap_or(first % count)
    }

    /// Send `commands` and wait for their replies, in order.
    pub async fn call(
        &self,
        commands: Commands,
        delivery: Delivery,
    ) -> Result<Replies, StoreError> {
        let index = self.pick();
        let (reply, receiver) = oneshot::channel();
        let request = Request {
            commands,
            delivery,
            reply: Some(reply),
        };
        self.queues[index]
            .try_send(request)
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => {
                    StoreError::Overloaded("the connection's queue is full".to_owned())
                }
                mpsc::error::TrySendError::Closed(_) => {
                    StoreError::Unreachable("the connection is closed".to_owned())
                }
            })?;
        match receiver.await {
            Ok(outcome) => outcome.claim(),
            Err(_) => Err(StoreError::Unreachable(
                "the connection ended without answering".to_owned(),
            )),
        }
    }
}

/// Fail a request that was never written: nothing was sent, so nothing
/// happened.
fn fail_unsent(request: Request, why: &str) {
    if let Some(reply) = request.reply {
        let _ = reply.send(Outcome {
            result: Err(StoreError::Unreachable(why.to_owned())),
            undo: None,
        });
    } else {
        tracing::warn!(why, "a rollback could not be sent");
    }
}

/// Fail a written request whose replies will never come.
fn fail_written(entry: InFlight, why: &str) {
    let unknown = entry.request.commands.iter().any(Command::changes_state);
    let error = if unknown {
        StoreError::Ambiguous(why.to_owned())
    } else {
        StoreError::Unreachable(why.to_owned())
    };
    if let Some(reply) = entry.request.reply {
        let _ = reply.send(Outcome {
            result: Err(error),
            undo: None,
        });
    }
}

/// State the writer and reader of one live connection share.
#[derive(Default)]
struct Shared {
    in_flight: Mutex<VecDeque<InFlight>>,
    /// Writes whose replies have not all come back.
    writes_out: AtomicUsize,
    /// Told by the reader each time a write's replies are complete.
    write_answered: Notify,
}

impl Shared {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, VecDeque<InFlight>> {
        // Nothing panics while holding the lock; if something did, the
        // queue is still a queue.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// What one connection slot of a node works with.
struct Slot {
    target: Target,
    settings: Arc<Settings>,
    dialer: Arc<Dialer>,
    /// Whether each of the node's connections is up; this slot's is at
    /// `index`.
    up: Arc<[AtomicBool]>,
    index: usize,
}

/// One connection slot: dial, serve until the connection drops, fail what
/// was pending, back off, dial again; until the node is dropped.
async fn supervise(
    slot: Slot,
    mut queue: mpsc::Receiver<Request>,
    requeue: mpsc::WeakSender<Request>,
) {
    let addr = &slot.target.addr;
    let mut backoff = BACKOFF_FIRST;
    loop {
        let dialled = slot
            .dialer
            .dial(addr, slot.target.server_name.as_deref())
            .await;
        let stream = match dialled {
            Ok(stream) => stream,
            Err(why) => {
                tracing::debug!(%addr, %why, "dial failed");
                if !wait_out(&mut queue, backoff, &why).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_LAST);
                continue;
            }
        };
        let connected_at = Instant::now();
        tracing::debug!(%addr, "connected to memcached");
        slot.up[slot.index].store(true, Ordering::Relaxed);
        let (end, returned) = serve(stream, queue, &slot.settings, requeue.clone()).await;
        slot.up[slot.index].store(false, Ordering::Relaxed);
        let Some(returned) = returned else {
            return;
        };
        queue = returned;
        tracing::warn!(%addr, reason = %end, "memcached connection dropped; pending requests failed");
        if connected_at.elapsed() > HEALTHY_AFTER {
            backoff = BACKOFF_FIRST;
        }
        let why = format!("connection to {addr} dropped: {end}");
        if !wait_out(&mut queue, backoff, &why).await {
            return;
        }
        backoff = (backoff * 2).min(BACKOFF_LAST);
    }
}

/// Sit out a backoff, failing at once whatever is queued meanwhile. False
/// when the node is gone.
async fn wait_out(queue: &mut mpsc::Receiver<Request>, backoff: Duration, why: &str) -> bool {
    let until = tokio::time::sleep(backoff);
    tokio::pin!(until);
    loop {
        tokio::select! {
            () = &mut until => return true,
            request = queue.recv() => match request {
                Some(request) => fail_unsent(request, why),
                None => return false,
            },
        }
    }
}

/// Run one connection until it fails (or the node is dropped: then the
/// queue is not returned). Fails everything in flight before returning.
async fn serve(
    stream: Stream,
    queue: mpsc::Receiver<Request>,
    settings: &Settings,
    requeue: mpsc::WeakSender<Request>,
) -> (String, Option<mpsc::Receiver<Request>>) {
    match stream {
        // A TCP stream splits into halves that need no lock between them.
        Stream::Plain(tcp) => {
            let (read, write) = tcp.into_split();
            serve_halves(read, write, queue, settings, requeue).await
        }
        #[cfg(feature = "tls")]
        Stream::Tls(tls) => {
            let (read, write) = tokio::io::split(*tls);
            serve_halves(read, write, queue, settings, requeue).await
        }
    }
}

async fn serve_halves<R, W>(
    read: R,
    write: W,
    queue: mpsc::Receiver<Request>,
    settings: &Settings,
    requeue: mpsc::WeakSender<Request>,
) -> (String, Option<mpsc::Receiver<Request>>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared::default());
    let (stop, stopped) = watch::channel(false);
    let mut reader = tokio::spawn(read_loop(read, shared.clone(), stopped.clone(), requeue));
    let mut writer = tokio::spawn(write_loop(
        write,
        queue,
        shared.clone(),
        stopped,
        settings.namespace.clone(),
    ));
    let mut watchdog = tokio::time::interval(settings.stall_timeout / 4);
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reader_end = None;
    let mut writer_end = None;
    let reason = loop {
        tokio::select! {
            end = &mut reader, if reader_end.is_none() => {
                let why = match end {
                    Ok(Err(why)) => why,
                    Ok(Ok(())) => "stopped".to_owned(),
                    Err(error) => format!("reader task failed: {error}"),
                };
                reader_end = Some(());
                break why;
            }
            end = &mut writer, if writer_end.is_none() => {
                match end {
                    Ok(end) => {
                        let why = end.error.clone().unwrap_or_else(|| "node dropped".to_owned());
                        writer_end = Some(end);
                        break why;
                    }
                    Err(error) => return (format!("writer task failed: {error}"), None),
                }
            }
            _ = watchdog.tick() => {
                let overdue = shared
                    .in_flight()
                    .front()
                    .is_some_and(|oldest| oldest.written_at.elapsed() > settings.stall_timeout);
                if overdue {
                    break format!("no reply within {:?}", settings.stall_timeout);
                }
            }
        }
    };
    let _ = stop.send(true);
    if reader_end.is_none() {
        let _ = reader.await;
    }
    let writer_end = match writer_end {
        Some(end) => end,
        None => match writer.await {
            Ok(end) => end,
            Err(error) => return (format!("writer task failed: {error}"), None),
        },
    };
    let pending: Vec<InFlight> = shared.in_flight().drain(..).collect();
    for entry in pending {
        fail_written(entry, &reason);
    }
    let queue = (!writer_end.node_dropped).then_some(writer_end.queue);
    (reason, queue)
}

struct WriterEnd {
    queue: mpsc::Receiver<Request>,
    node_dropped: bool,
    error: Option<String>,
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut write: W,
    mut queue: mpsc::Receiver<Request>,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
    namespace: Arc<str>,
) -> WriterEnd {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut entries = Vec::with_capacity(MAX_BATCH);
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut opaque: u32 = 0;
    let end = |queue, node_dropped, error| WriterEnd {
        queue,
        node_dropped,
        error,
    };
    loop {
        let received = tokio::select! {
            biased;
            _ = stopped.changed() => return end(queue, false, None),
            received = queue.recv_many(&mut batch, MAX_BATCH) => received,
        };
        if received == 0 {
            return end(queue, true, None);
        }
        // Let the callers that are runnable now queue theirs: this is what
        // turns N concurrent checks into one write.
        tokio::task::yield_now().await;
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        // A write already out brings its replies within a round trip; until
        // then, gather (see WRITES_IN_FLIGHT).
        // A full batch stops taking requests (they wait in the bounded
        // queue, then are refused at once) rather than going out beside an
        // unanswered write: a silent node holds at most two batches.
        while shared.writes_out.load(Ordering::Acquire) >= WRITES_IN_FLIGHT {
            let room = MAX_BATCH - batch.len();
            tokio::select! {
                biased;
                _ = stopped.changed() => return end(queue, false, None),
                () = shared.write_answered.notified() => {}
                received = queue.recv_many(&mut batch, room), if room > 0 => {
                    if received == 0 {
                        return end(queue, true, None);
                    }
                }
            }
        }
        buffer.clear();
        for request in batch.drain(..) {
            if request.abandoned() {
                // Its caller gave up before it was sent: it never happened.
                continue;
            }
            let first_opaque = opaque;
            for command in &request.commands {
                wire::encode(command, &namespace, opaque, &mut buffer);
                opaque = opaque.wrapping_add(1);
            }
            entries.push((request, first_opaque));
        }
        if entries.is_empty() {
            continue;
        }
        let written_at = Instant::now();
        let last = entries.len() - 1;
        shared.writes_out.fetch_add(1, Ordering::AcqRel);
        shared.in_flight().extend(entries.drain(..).enumerate().map(
            |(index, (request, first_opaque))| InFlight {
                request,
                first_opaque,
                written_at,
                ends_write: index == last,
            },
        ));
        tokio::select! {
            biased;
            _ = stopped.changed() => return end(queue, false, None),
            written = write.write_all(&buffer) => {
                if let Err(error) = written {
                    return end(queue, false, Some(format!("write failed: {error}")));
                }
            }
        }
        // A burst must not leave a huge buffer behind for good.
        if buffer.capacity() > 1024 * 1024 {
            buffer = Vec::with_capacity(64 * 1024);
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut read: R,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
    requeue: mpsc::WeakSender<Request>,
) -> Result<(), String> {
    let mut buffer: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut start = 0;
    // Replies gathered so far for the oldest request in flight.
    let mut partial = Replies::new();
    let mut done: Vec<(InFlight, Replies)> = Vec::new();
    loop {
        let parsed = take_replies(&shared, &buffer[start..], &mut partial, &mut done);
        for (entry, replies) in done.drain(..) {
            complete(entry, replies, &requeue);
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
            _ = stopped.changed() => return Ok(()),
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
            if entry.ends_write {
                shared.writes_out.fetch_sub(1, Ordering::AcqRel);
                shared.write_answered.notify_one();
            }
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

/// Hand a request its replies. Additions that were applied are armed to be
/// taken back if the caller never claims them.
fn complete(entry: InFlight, replies: Replies, requeue: &mpsc::WeakSender<Request>) {
    let Some(reply) = entry.request.reply else {
        return;
    };
    let undo = (entry.request.delivery == Delivery::UndoIfUnclaimed)
        .then(|| {
            entry
                .request
                .commands
                .iter()
                .zip(&replies)
                .filter_map(|(command, reply)| match (command, reply) {
                    (
                        Command::Add {
                            counter, amount, ..
                        },
                        Reply::Value(_),
                    ) => Some(Command::Subtract {
                        counter: *counter,
                        amount: *amount,
                    }),
                    _ => None,
                })
                .collect::<Commands>()
        })
        .filter(|commands| !commands.is_empty())
        .map(|commands| Undo {
            commands,
            queue: requeue.clone(),
        });
    // If the caller is gone, the outcome comes back and is dropped here,
    // which sends the undo.
    let _ = reply.send(Outcome {
        result: Ok(replies),
        undo,
    });
}
