//! One deadline sweep per connection slot, instead of a timer per call.
//!
//! A counted call carries its caller's deadline. The slot keeps one timer,
//! set to the earliest deadline among its requests, queued or written;
//! when it fires, every request whose time is up is answered with the
//! timeout error: a queued one is taken out, never sent, so nothing
//! happened; a written one keeps its place in the FIFO, its replies are
//! read and dropped when they come, and the additions they report are
//! taken back, so Memcached counts only what a caller was told was
//! counted. A tokio timer per call was registered in the runtime's timer
//! wheel and taken out again on every check (`bench/instructions.sh`
//! shows its cost), though nearly every call is answered long before its
//! deadline.
//!
//! The timer is set to the earliest deadline the sweep found, and never
//! further than a horizon: the shortest timeout a request has brought (or
//! the slot's watch period, if shorter). A request that starts waiting
//! with an earlier deadline than the timer's (the first one, or a check's
//! later call, with less time left) wakes the sweep to look again. Without
//! the horizon, a sweep that found nothing waiting left the timer far off,
//! and every request's deadline came before it: with one caller, whose
//! request is answered before the woken sweep looks, that was a wake-up
//! of the slot's task per check (the CPU per check of the one-caller row
//! of `bench/run.sh` shows it).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Sleep;

use super::NodeClock;
use super::queue::{NO_DEADLINE, Queue};
use super::reader::Shared;
use super::signal::{Signal, Waiting};

/// When the sweep looks next, and how to make it look sooner.
pub(super) struct Deadlines {
    /// The deadline the sweep's timer is set to, in the node's
    /// microseconds; [`NO_DEADLINE`] before the first sweep and while one
    /// is under way, so that any request that starts waiting then wakes it.
    next_us: AtomicU64,
    sooner: Signal,
    /// The shortest timeout of a request that woke the sweep, in
    /// microseconds: the furthest the timer is set from a sweep.
    shortest_timeout_us: AtomicU64,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            next_us: AtomicU64::new(NO_DEADLINE),
            sooner: Signal::default(),
            shortest_timeout_us: AtomicU64::new(NO_DEADLINE),
        }
    }
}

impl Deadlines {
    /// A request with this deadline now waits where the sweep looks (the
    /// queue, or the FIFO of written requests): wake the sweep if its
    /// timer is set later. SeqCst against the sweep's own store: either
    /// the sweep saw the request, or this sees what the sweep set.
    pub(super) fn waiting(&self, deadline_us: u64, timeout_ms: u32) {
        if deadline_us != NO_DEADLINE && deadline_us < self.next_us.load(Ordering::SeqCst) {
            let timeout_us = u64::from(timeout_ms).saturating_mul(1_000).max(1);
            self.shortest_timeout_us
                .fetch_min(timeout_us, Ordering::Relaxed);
            self.sooner.raise();
        }
    }

    /// Make the sweep look now (the node was dropped).
    pub(super) fn wake(&self) {
        self.sooner.raise();
    }
}

/// The slot's sweep: its timer, and its place as the waiter of
/// [`Deadlines::sooner`].
pub(super) struct Sweeper {
    /// Set at each sweep; first a horizon away.
    timer: Pin<Box<Sleep>>,
    waiting: Waiting,
    clock: NodeClock,
    /// The furthest the timer is set from a sweep, in microseconds, unless
    /// a request brought a shorter timeout.
    horizon_us: u64,
}

impl Sweeper {
    pub(super) fn new(clock: NodeClock, horizon: Duration) -> Sweeper {
        let horizon_us = u64::try_from(horizon.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        Sweeper {
            timer: Box::pin(tokio::time::sleep(Duration::from_micros(horizon_us))),
            waiting: Waiting::default(),
            clock,
            horizon_us,
        }
    }

    /// Once the timer fires or a request with an earlier deadline starts
    /// waiting.
    pub(super) async fn due(&mut self, queue: &Queue) {
        let Sweeper { timer, waiting, .. } = self;
        tokio::select! {
            biased;
            () = queue.deadlines.sooner.taken(waiting) => {}
            () = timer.as_mut() => {}
        }
    }

    /// Answer every request of the slot whose caller's time is up, queued
    /// or written (`written`: the connection's FIFO, while one is up), and
    /// set the timer to the earliest deadline left, or the horizon.
    pub(super) fn sweep(&mut self, queue: &Queue, written: Option<&Shared>) {
        let deadlines = &queue.deadlines;
        // What raised the flag before now is seen by this look; what
        // starts waiting from here on raises it again.
        deadlines.sooner.lower();
        deadlines.next_us.store(NO_DEADLINE, Ordering::SeqCst);
        let now_us = self.clock.now_us();
        let horizon_us = self
            .horizon_us
            .min(deadlines.shortest_timeout_us.load(Ordering::Relaxed));
        let mut earliest = now_us.saturating_add(horizon_us);
        // One pass each. A queued request that ran out is taken out, never
        // sent; a written one keeps its place for its replies.
        queue.lock().requests.retain_mut(|request| {
            if request.expired_at(now_us) {
                request.answer_ran_out();
                return false;
            }
            if request.reply.is_some() {
                earliest = earliest.min(request.deadline_us);
            }
            true
        });
        let mut answered_written = 0;
        if let Some(shared) = written {
            for entry in shared.in_flight().iter_mut() {
                if entry.request.expired_at(now_us) {
                    entry.request.answer_ran_out();
                    answered_written += 1;
                } else if entry.request.reply.is_some() {
                    earliest = earliest.min(entry.request.deadline_us);
                }
            }
        }
        if answered_written > 0 {
            tracing::debug!(
                answered_written,
                "written requests ran out of time; their replies will be dropped"
            );
        }
        deadlines.next_us.store(earliest, Ordering::SeqCst);
        let at = self.clock.0 + Duration::from_micros(earliest);
        self.timer.as_mut().reset(at.into());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use tokio::sync::oneshot;

    use super::*;
    use crate::store::StoreError;
    use crate::store::memcached::conn::queue::{Delivery, Request};
    use crate::store::memcached::conn::reader::{Answer, InFlight};
    use crate::store::memcached::conn::{Commands, SlotStatus};
    use crate::store::memcached::wire::Command;

    const TIMEOUT_MS: u32 = 5_000;

    fn counted(deadline_us: u64) -> (Request, oneshot::Receiver<Answer>) {
        let (reply, answer) = oneshot::channel();
        let mut request = Request::new(
            Commands::from_slice(&[Command::Noop]),
            Delivery::UndoIfUnclaimed,
            Some(reply),
        );
        request.deadline_us = deadline_us;
        request.timeout_ms = TIMEOUT_MS;
        (request, answer)
    }

    fn written(request: Request) -> InFlight {
        InFlight {
            request,
            first_opaque: 0,
            written_us: 0,
            ends_write: true,
            given_up: false,
        }
    }

    fn ran_out(answer: &mut oneshot::Receiver<Answer>) -> bool {
        matches!(answer.try_recv(), Ok(Err(StoreError::Timeout(ms))) if ms == u64::from(TIMEOUT_MS))
    }

    /// Queued or written, a request whose time is up is answered so: the
    /// queued one is taken out (never sent), the written one keeps its
    /// place for its replies. Those in time wait on, and the timer is set
    /// to the earliest of their deadlines.
    #[tokio::test]
    async fn a_request_out_of_time_is_answered_where_it_waits() {
        let clock = NodeClock(Instant::now() - Duration::from_secs(10));
        let soon_us = clock.now_us() + 2_000_000;
        let queue = Queue::new(8);
        let shared = Shared::new(Arc::new(SlotStatus::new(false)), Arc::default());
        let (late_queued, mut late_queued_answer) = counted(1_000);
        let (queued, mut queued_answer) = counted(soon_us + 60_000_000);
        assert!(queue.push(late_queued).is_ok() && queue.push(queued).is_ok());
        let (late_written, mut late_written_answer) = counted(2_000);
        let (in_time, mut in_time_answer) = counted(soon_us);
        shared.in_flight().push_back(written(late_written));
        shared.in_flight().push_back(written(in_time));

        let mut sweeper = Sweeper::new(clock, Duration::from_secs(3600));
        sweeper.sweep(&queue, Some(&shared));

        assert!(ran_out(&mut late_queued_answer) && ran_out(&mut late_written_answer));
        assert_eq!(queue.lock().requests.len(), 1, "the late one is not sent");
        let fifo = shared.in_flight();
        assert_eq!(fifo.len(), 2, "a written one waits for its replies");
        assert!(fifo[0].request.reply.is_none() && fifo[1].request.reply.is_some());
        drop(fifo);
        assert!(queued_answer.try_recv().is_err() && in_time_answer.try_recv().is_err());
        assert_eq!(queue.deadlines.next_us.load(Ordering::SeqCst), soon_us);
        assert_eq!(
            sweeper.timer.deadline(),
            (clock.0 + Duration::from_micros(soon_us)).into()
        );
    }

    /// With nothing waiting, the timer is set no further than the
    /// shortest timeout the requests brought: the next request's deadline
    /// (its timeout away) then falls after it, and wakes nothing.
    #[tokio::test]
    async fn with_nothing_waiting_the_timer_is_set_a_timeout_away() {
        let clock = NodeClock(Instant::now());
        let queue = Queue::new(8);
        let mut sweeper = Sweeper::new(clock, Duration::from_secs(3600));
        let (request, _answer) = counted(clock.now_us() + 1_000_000);
        assert!(
            queue.push(request).is_ok(),
            "the first request wakes the sweep"
        );
        assert!(poll_once(sweeper.due(&queue)));
        queue.lock().requests.clear();
        let before_us = clock.now_us();
        sweeper.sweep(&queue, None);
        let next_us = queue.deadlines.next_us.load(Ordering::SeqCst);
        let timeout_us = u64::from(TIMEOUT_MS) * 1_000;
        assert!(next_us >= before_us + timeout_us && next_us <= clock.now_us() + timeout_us);
    }

    /// A request that starts waiting with a deadline before the one the
    /// timer is set to wakes the sweep; one after it does not.
    #[tokio::test]
    async fn only_an_earlier_deadline_wakes_the_sweep() {
        let clock = NodeClock(Instant::now());
        let queue = Queue::new(8);
        let mut sweeper = Sweeper::new(clock, Duration::from_secs(3600));
        let (request, _answer) = counted(clock.now_us() + 3_000_000);
        assert!(queue.push(request).is_ok());
        sweeper.sweep(&queue, None);
        assert!(!poll_once(sweeper.due(&queue)), "nothing new: it waits");
        let (later, _later_answer) = counted(clock.now_us() + 4_000_000);
        assert!(queue.push(later).is_ok());
        assert!(
            !poll_once(sweeper.due(&queue)),
            "a later deadline waits its turn"
        );
        let (sooner, _sooner_answer) = counted(clock.now_us() + 1_000_000);
        assert!(queue.push(sooner).is_ok());
        assert!(
            poll_once(sweeper.due(&queue)),
            "an earlier deadline is looked at"
        );
    }

    /// Whether `future` is ready at its first poll.
    fn poll_once<F: Future>(future: F) -> bool {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        future.as_mut().poll(&mut context).is_ready()
    }
}
