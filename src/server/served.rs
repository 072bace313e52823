//! An HTTP/1 connection from accept to close, as the server ends it: when
//! it has gone quiet, or when shutdown drains it.
//!
//! **Quiet.** A connection holds a place under the cap until it ends, so
//! one that never ends must not keep it: a connection is closed once no
//! request has started on it for the quiet timeout and none is being
//! answered. That covers a keep-alive connection left idle, a head
//! trickled a byte at a time (its request starts only when the head is
//! whole), and a client that stops reading its answers (nothing starts
//! after the answer it does not take). hyper's own `header_read_timeout`
//! does the first two with a timer armed, registered in tokio's wheel, and
//! dropped for every request (a visible share of a hot reject's
//! instructions in `bench/http_instructions.sh`), and a lock on the wheel
//! that both workers take. Here one
//! timer per connection wakes every fifth of the timeout to look at two
//! counters the requests move, so an idle connection is closed between
//! the quiet timeout and 1.2 times it after its last request.
//!
//! **Drain.** At shutdown every connection is told to finish what it is
//! answering and close (hyper's graceful shutdown: an idle one closes at
//! once), and shutdown waits until all have. hyper-util's `GracefulShutdown`
//! does this with a watch channel whose change every connection polls, each
//! time it is polled, under the channel's lock: work on every request,
//! and a lock the workers share. Here a
//! connection reads one flag when it is polled; its waker is registered
//! once, for shutdown to wake it.
//!
//! So a busy connection pays two additions and a load a request, and no
//! lock.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// How many times per quiet timeout a connection's activity is looked at.
const LOOKS_PER_TIMEOUT: u32 = 5;

/// The requests of one connection, as its watch sees them.
#[derive(Default)]
pub(super) struct Activity {
    started: AtomicU64,
    finished: AtomicU64,
}

impl Activity {
    /// Counts a request as started; the request is being answered until
    /// what this returns is dropped (answered, or given up).
    pub(super) fn serving(self: &Arc<Activity>) -> Serving {
        // Relaxed: the requests are served inside the connection's own
        // future, so they and the watch never run at once.
        self.started.fetch_add(1, Ordering::Relaxed);
        Serving(self.clone())
    }

    /// The requests started and finished so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.started.load(Ordering::Relaxed),
            self.finished.load(Ordering::Relaxed),
        )
    }
}

/// A request being answered ([`Activity::serving`]).
pub(super) struct Serving(Arc<Activity>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::Relaxed);
    }
}

/// A connection that can be asked to finish what it is answering and
/// close: hyper's, and the tests' stand-ins.
pub(super) trait Drainable: Future {
    fn drain(self: Pin<&mut Self>);
}

impl<I, B, S> Drainable for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn drain(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// The connections of one listener, for shutdown to drain.
#[derive(Default)]
pub(super) struct Drain {
    draining: AtomicBool,
    /// Each open connection's waker, once it has been polled.
    open: Mutex<Members>,
    all_closed: Notify,
}

#[derive(Default)]
struct Members {
    wakers: HashMap<u64, Option<Waker>>,
    next_id: u64,
}

impl Drain {
    /// A connection's place among those shutdown drains, held until it
    /// is dropped: taken when the connection is accepted, so that shutdown
    /// waits for it even if it has not been polled yet.
    pub(super) fn member(self: &Arc<Drain>) -> Member {
        let mut open = self.members();
        let id = open.next_id;
        open.next_id += 1;
        open.wakers.insert(id, None);
        Member {
            drain: self.clone(),
            id,
            registered: None,
        }
    }

    /// Tells every connection to finish what it is answering and close.
    pub(super) fn begin(&self) {
        self.draining.store(true, Ordering::SeqCst);
        let wakers: Vec<Waker> = self.members().wakers.values().flatten().cloned().collect();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Once every connection has closed.
    pub(super) async fn finished(&self) {
        loop {
            let closed = self.all_closed.notified();
            let mut closed = pin!(closed);
            closed.as_mut().enable();
            if self.members().wakers.is_empty() {
                return;
            }
            closed.await;
        }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection's place in a [`Drain`].
pub(super) struct Member {
    drain: Arc<Drain>,
    id: u64,
    /// The waker last registered, kept to see whether it changed.
    registered: Option<Waker>,
}

impl Member {
    /// Whether shutdown has begun. Registers `waker` first when it is new,
    /// so that a shutdown beginning after this look wakes it.
    fn draining(&mut self, waker: &Waker) -> bool {
        if !self
            .registered
            .as_ref()
            .is_some_and(|registered| registered.will_wake(waker))
        {
            self.drain
                .members()
                .wakers
                .insert(self.id, Some(waker.clone()));
            self.registered = Some(waker.clone());
        }
        // SeqCst against `begin`'s store: either this load sees it, or
        // `begin` took the lock after the waker went in, and wakes it.
        self.drain.draining.load(Ordering::SeqCst)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut open = self.drain.members();
        open.wakers.remove(&self.id);
        if open.wakers.is_empty() {
            self.drain.all_closed.notify_waiters();
        }
    }
}

/// Runs `connection` to its end, unless it goes quiet: no request starts
/// on it for `quiet_timeout` while none is being answered. Then it is
/// dropped, which closes it, and the answer is `None`. When `member`'s
/// drain begins, the connection is told to finish and close.
pub(super) async fn until_quiet<F: Drainable>(
    connection: F,
    activity: &Activity,
    mut member: Member,
    quiet_timeout: Duration,
) -> Option<F::Output> {
    let look_every = quiet_timeout / LOOKS_PER_TIMEOUT;
    let mut connection = pin!(connection);
    let mut draining = false;
    let mut look = pin!(tokio::time::sleep(look_every));
    let mut last_seen = activity.counts();
    // When the watch last saw a request start, go on or end: at most
    // `look_every` after it really did, so the connection is never closed
    // early.
    let mut active_at = Instant::now();
    // The waker the look's timer holds. Polling a timer is 130
    // instructions, twice a request; while it holds this task's waker and
    // has not fired, there is nothing to poll it for.
    let mut look_wakes: Option<Waker> = None;
    poll_fn(|cx| {
        if !draining && member.draining(cx.waker()) {
            draining = true;
            connection.as_mut().drain();
        }
        if let Poll::Ready(output) = connection.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        let waits_for_us = look_wakes
            .as_ref()
            .is_some_and(|waker| waker.will_wake(cx.waker()));
        if waits_for_us && !look.is_elapsed() {
            return Poll::Pending;
        }
        while look.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let seen = activity.counts();
            let (started, finished) = seen;
            if seen != last_seen || started != finished {
                last_seen = seen;
                active_at = now;
            } else if now >= active_at + quiet_timeout {
                return Poll::Ready(None);
            }
            look.as_mut().reset(now + look_every);
        }
        look_wakes = Some(cx.waker().clone());
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests;
