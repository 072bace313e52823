//! One connection slot of a node, over its life: dialled, served until
//! the connection ends (a failure, a stall, or an extra no longer
//! needed), what was pending failed, and dialled again: with backoff for
//! a configured slot, on the next request for an extra one. A connection
//! given up as stalled that owes an addition is drained instead of
//! failed (see `drain`), beside the slot's next connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use super::drain::{self, GivenUp};
use super::health::{self, Calm, GiveUp, Phase, State};
use super::queue::{Contents, Queue};
use super::reader::{InFlight, Shared, fail_written, read_loop};
use super::signal::Waiting;
use super::sweep::Sweeper;
use super::writer::{WriterEnd, write_loop};
use super::{NodeStatus, Redial, Settings, SlotStatus, Target};
use crate::store::memcached::dial::{Dialer, Stream};

/// Backoff between failed dials: from the first to the last, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(20);
const BACKOFF_LAST: Duration = Duration::from_millis(500);
/// A connection that lived this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(1);
/// How many call timeouts the node must stay calm before an extra
/// connection closes (see [`Calm`]).
const CALM_TIMEOUTS: u32 = 4;
/// The watchdog never looks more often than this.
const WATCH_AT_MOST_EVERY: Duration = Duration::from_millis(5);

/// What one connection slot of a node works with.
pub(super) struct Slot {
    pub(super) target: Target,
    pub(super) settings: Arc<Settings>,
    pub(super) dialer: Arc<Dialer>,
    pub(super) node: Arc<NodeStatus>,
    pub(super) index: usize,
    /// Its queue, the slot's across its connections; closed when the node
    /// is dropped.
    pub(super) queue: Arc<Queue>,
    /// Where what it owes goes when it cannot send it: its own queue for a
    /// configured slot, which redials until the node is dropped; a
    /// configured slot's for an extra.
    pub(super) keeper: Arc<Queue>,
}

impl Slot {
    pub(super) fn status(&self) -> &Arc<SlotStatus> {
        &self.node.slots[self.index]
    }

    async fn dial(&self) -> Result<Stream, String> {
        self.dialer
            .dial(&self.target.addr, self.target.server_name.as_deref())
            .await
    }

    /// How often the watchdog looks: often enough to see an overdue extra
    /// become closable, and a stall, soon after they happen.
    fn watch_period(&self) -> Duration {
        (self.settings.stall_timeout / 4)
            .min(self.settings.overdue_after)
            .max(WATCH_AT_MOST_EVERY)
    }

    /// The watchdog's look at a live connection: the end it calls for, if
    /// any. An extra the node no longer needs closes once it has answered
    /// everything it was given: the watchdog tells its writer, which ends
    /// it only if nothing reached it meanwhile (see [`Shared::retire`]).
    fn watch(&self, shared: &Shared, calm: &mut Calm) -> Option<Ended> {
        let views = self.node.views();
        let me = views[self.index];
        let status = self.status();
        if me.state == Some(State::Stalled) {
            let bound = self.settings.stall_timeout;
            let owes_an_addition = shared.in_flight().iter().any(InFlight::counts);
            let drains_allowed = !self.settings.drain_timeout.is_zero();
            let verdict = health::give_up(owes_an_addition, drains_allowed, status.draining());
            if verdict == GiveUp::Keep {
                // Nobody waits on it any more than on a drained one.
                let why = format!("{}: no reply within {bound:?}", self.target.addr);
                for entry in shared.in_flight().iter_mut() {
                    entry.give_up(&why);
                }
            } else {
                let drained = verdict == GiveUp::Drain;
                return Some(Ended::Stalled { bound, drained });
            }
        }
        let closable = status.extra
            && me.phase == Phase::Up
            && health::extra_may_close(&views, self.index, self.node.configured);
        let hold = (self.settings.overdue_after * CALM_TIMEOUTS).as_micros();
        let hold = u64::try_from(hold).unwrap_or(u64::MAX);
        if calm.observe(closable, self.node.clock.now_us(), hold) {
            status.set_phase(Phase::Closing);
        }
        let drained = || shared.in_flight().is_empty() && self.queue.is_empty();
        if status.phase() == Phase::Closing && drained() {
            shared.retire.raise();
        }
        None
    }
}

/// Why a connection ended.
enum Ended {
    Failed(String),
    /// No reply within `bound`; `drained`: it was given up for new
    /// requests, and reads on (see `drain`).
    Stalled {
        bound: Duration,
        drained: bool,
    },
    /// An extra that was no longer needed.
    Retired,
}

impl Ended {
    fn redial(&self) -> Redial {
        match self {
            Ended::Failed(_) | Ended::Retired => Redial::Failed,
            Ended::Stalled { .. } => Redial::Stalled,
        }
    }

    fn log(&self, addr: &str) {
        if let Ended::Stalled { drained: true, .. } = self {
            tracing::warn!(%addr, reason = %self, "memcached connection stalled: given up for new requests, its late replies still read");
        } else {
            tracing::warn!(%addr, reason = %self, "memcached connection dropped; pending requests failed");
        }
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Failed(why) => f.write_str(why),
            Ended::Stalled { bound, .. } => write!(f, "no reply within {bound:?}"),
            Ended::Retired => f.write_str("an extra connection no longer needed"),
        }
    }
}

/// A configured connection slot: dial, serve until the connection drops,
/// fail what was pending, back off, dial again; until the node is dropped.
pub(super) async fn supervise(slot: Slot) {
    let addr = &slot.target.addr;
    let mut sweeper = Sweeper::new(slot.node.clock, slot.watch_period());
    let mut backoff = BACKOFF_FIRST;
    loop {
        let stream = match sweeping(slot.dial(), &mut sweeper, &slot.queue).await {
            Ok(stream) => stream,
            Err(why) => {
                tracing::debug!(%addr, %why, "dial failed");
                slot.node.doubt.now(slot.node.clock);
                if !wait_out(&slot.queue, backoff, &why).await {
                    return;
                }
                backoff = (backoff * 2).min(BACKOFF_LAST);
                slot.node.redials.count(Redial::Failed);
                continue;
            }
        };
        let connected_at = Instant::now();
        tracing::debug!(%addr, "connected to memcached");
        let Some(ended) = serve(stream, &slot, &mut sweeper).await else {
            return;
        };
        ended.log(addr);
        slot.node.doubt.now(slot.node.clock);
        if connected_at.elapsed() > HEALTHY_AFTER {
            backoff = BACKOFF_FIRST;
        }
        let why = format!("connection to {addr} dropped: {ended}");
        if !wait_out(&slot.queue, backoff, &why).await {
            return;
        }
        backoff = (backoff * 2).min(BACKOFF_LAST);
        slot.node.redials.count(ended.redial());
    }
}

/// An extra connection slot: at rest until a caller activates it with a
/// request, then dialled and served until the node no longer needs it (or
/// it fails); then at rest again. A dial that fails fails what waits for
/// it: the configured connections are the ones that retry.
pub(super) async fn supervise_extra(slot: Slot) {
    let addr = &slot.target.addr;
    let status = slot.status().clone();
    let mut sweeper = Sweeper::new(slot.node.clock, slot.watch_period());
    let mut arrived = Waiting::default();
    loop {
        loop {
            match slot.queue.contents() {
                Contents::Requests => break,
                Contents::Empty => slot.queue.arrived.taken(&mut arrived).await,
                Contents::Ended => return,
            }
        }
        status.set_phase(Phase::Dialling);
        let stream = match sweeping(slot.dial(), &mut sweeper, &slot.queue).await {
            Ok(stream) => stream,
            Err(why) => {
                tracing::debug!(%addr, %why, "dial of an extra connection failed");
                slot.node.doubt.now(slot.node.clock);
                slot.queue.hand_over_owed(&slot.keeper);
                slot.queue.fail_all(&why);
                status.set_phase(Phase::Idle);
                continue;
            }
        };
        tracing::debug!(%addr, "extra connection to memcached, the others being overdue");
        let Some(ended) = serve(stream, &slot, &mut sweeper).await else {
            return;
        };
        status.set_phase(Phase::Idle);
        match ended {
            Ended::Retired => tracing::debug!(%addr, "extra connection closed"),
            ended => {
                ended.log(addr);
                slot.node.doubt.now(slot.node.clock);
            }
        }
    }
}

/// `future`'s output, the slot's deadline sweep kept meanwhile (a dial:
/// requests queue while it lasts).
async fn sweeping<F: Future>(future: F, sweeper: &mut Sweeper, queue: &Queue) -> F::Output {
    let mut future = std::pin::pin!(future);
    loop {
        tokio::select! {
            output = &mut future => return output,
            () = sweeper.due(queue) => sweeper.sweep(queue, None),
        }
    }
}

/// Sit out a backoff, failing at once whatever is queued meanwhile. False
/// when the node is gone.
async fn wait_out(queue: &Queue, backoff: Duration, why: &str) -> bool {
    let until = tokio::time::sleep(backoff);
    tokio::pin!(until);
    let mut arrived = Waiting::default();
    loop {
        if !queue.fail_all(why) {
            return false;
        }
        tokio::select! {
            () = &mut until => return true,
            () = queue.arrived.taken(&mut arrived) => {}
        }
    }
}

/// Serve one connection until it ends; then fail everything still in
/// flight, or `None` when the node was dropped.
async fn serve(stream: Stream, slot: &Slot, sweeper: &mut Sweeper) -> Option<Ended> {
    slot.status().set_phase(Phase::Up);
    let served = match stream {
        // A TCP stream splits into halves that need no lock between them.
        Stream::Plain(tcp) => {
            let (read, write) = tcp.into_split();
            serve_halves(read, write, slot, sweeper).await
        }
        #[cfg(feature = "tls")]
        Stream::Tls(tls) => {
            let (read, write) = tokio::io::split(*tls);
            serve_halves(read, write, slot, sweeper).await
        }
    };
    slot.status().set_phase(Phase::Dialling);
    served
}

async fn serve_halves<R, W>(read: R, write: W, slot: &Slot, sweeper: &mut Sweeper) -> Option<Ended>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let shared = Arc::new(Shared::new(
        slot.status().clone(),
        slot.node.late_replies.clone(),
    ));
    // One stop for each task: a oneshot is polled with an atomic load,
    // where a watch's `changed()`, made anew at every turn of the loops,
    // took its notifier's lock twice a check.
    let (stop_reader, reader_stopped) = oneshot::channel();
    let (stop_writer, writer_stopped) = oneshot::channel();
    let mut reader = tokio::spawn(read_loop(
        read,
        shared.clone(),
        reader_stopped,
        slot.queue.clone(),
    ));
    let mut writer = tokio::spawn(write_loop(
        write,
        slot.queue.clone(),
        shared.clone(),
        writer_stopped,
        slot.settings.namespace.clone(),
        slot.node.clock,
    ));
    let mut watchdog = tokio::time::interval(slot.watch_period());
    let mut calm = Calm::default();
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first of the three ways to end; the other two tasks are then
    // stopped and awaited.
    enum First {
        Reader(Ended),
        Writer(Result<WriterEnd, tokio::task::JoinError>),
        Watchdog(Ended),
    }
    let first_end = loop {
        tokio::select! {
            end = &mut reader => break First::Reader(Ended::Failed(match end {
                Ok(Err(why)) => why,
                Ok(Ok(())) => "stopped".to_owned(),
                Err(error) => format!("reader task failed: {error}"),
            })),
            end = &mut writer => break First::Writer(end.map(|(end, _)| end)),
            _ = watchdog.tick() => if let Some(ended) = slot.watch(&shared, &mut calm) {
                break First::Watchdog(ended);
            },
            () = sweeper.due(&slot.queue) => sweeper.sweep(&slot.queue, Some(&shared)),
        }
    };
    let _ = stop_writer.send(());
    let first_end = match first_end {
        First::Watchdog(ended @ Ended::Stalled { drained: true, .. }) => {
            match (&mut writer).await {
                Ok((end, write)) => {
                    let why = format!("connection to {} ended: {ended}", slot.target.addr);
                    let given_up = GivenUp {
                        reader,
                        stop_reader,
                        write,
                        shared,
                    };
                    drain::start(given_up, slot, &why);
                    return (!end.node_dropped).then_some(ended);
                }
                Err(error) => First::Writer(Err(error)),
            }
        }
        other => other,
    };
    let _ = stop_reader.send(());
    let (ended, writer_end) = match first_end {
        First::Reader(ended) => (ended, writer.await.map(|(end, _)| end)),
        First::Writer(Ok(end)) if end.retired => {
            let _ = reader.await;
            (Ended::Retired, Ok(end))
        }
        First::Writer(end) => {
            let _ = reader.await;
            let why = match &end {
                Ok(end) => end
                    .error
                    .clone()
                    .unwrap_or_else(|| "node dropped".to_owned()),
                Err(error) => format!("writer task failed: {error}"),
            };
            (Ended::Failed(why), end)
        }
        First::Watchdog(ended) => {
            let _ = reader.await;
            (ended, writer.await.map(|(end, _)| end))
        }
    };
    let pending: Vec<_> = shared.in_flight().drain(..).collect();
    // Named: a caller's error is what the status page and the logs show,
    // and with several nodes it must say which one went.
    let why = format!("connection to {} ended: {ended}", slot.target.addr);
    let lost = pending
        .into_iter()
        .map(|entry| u64::from(fail_written(entry, &why)))
        .sum();
    slot.node.late_replies.count_lost(lost);
    match writer_end {
        Ok(end) if !end.node_dropped => Some(ended),
        Ok(_) => None,
        Err(error) => {
            tracing::error!(addr = %slot.target.addr, %error, "memcached writer task failed; connection slot closed");
            None
        }
    }
}
