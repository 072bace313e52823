//! An HTTP/1 connection that stops making requests gives its place back.
//!
//! A connection holds a place under the cap until it ends, so one that
//! never ends must not keep it: a connection is closed once no request has
//! started on it for the quiet timeout and none is being answered. That
//! covers a keep-alive connection left idle, a head trickled a byte at a
//! time (its request starts only when the head is whole), and a client
//! that stops reading its answers (nothing starts after the answer it
//! does not take).
//!
//! hyper's own `header_read_timeout` does this with a timer armed,
//! registered in tokio's wheel, and dropped for every request: 1,600
//! instructions of a hot reject's 26,100 (callgrind), and a lock on the
//! wheel that both workers take. Here one timer per connection wakes every
//! fifth of the timeout to look at two counters the requests move, so a
//! busy connection pays two additions a request, and an idle one is closed
//! between the quiet timeout and 1.2 times it after its last request.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Poll, Waker};
use std::time::Duration;

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

/// Runs `connection` to its end, unless no request starts on it for
/// `quiet_timeout` while none is being answered: then it is dropped, which
/// closes it, and the answer is `None`.
pub(super) async fn until_quiet<F: Future>(
    connection: F,
    activity: &Activity,
    quiet_timeout: Duration,
) -> Option<F::Output> {
    let look_every = quiet_timeout / LOOKS_PER_TIMEOUT;
    let mut connection = pin!(connection);
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
