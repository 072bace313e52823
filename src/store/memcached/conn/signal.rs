//! A flag any task raises and one waiter takes, waking it if it waits:
//! what tokio's `Notify` did for the connection's writer ("a write was
//! answered", "you may retire"), without its cost where the waiter looks;
//! also "a request arrived" (the writer, or the slot while no connection
//! is up) and "look at the deadlines sooner" (the slot's sweep).
//!
//! The writer looks at its flags at every turn of its loop. A `Notify` is
//! waited on through a new `Notified` each time, which takes the notifier's
//! lock to queue itself and again to leave when another branch wins; here
//! a look is a swap of the flag, and the waiter's waker is stored (under
//! a lock) only when it is not the one stored already, which for a task's
//! whole life is once. Raising takes the lock to wake the waker only while
//! the waiter waits for this flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

#[derive(Default)]
pub(super) struct Signal {
    raised: AtomicBool,
    /// Whether the waiter waits now: a raise wakes it only then, or every
    /// answered write would wake a writer busy with something else.
    armed: AtomicBool,
    /// The waiter's waker, once it has waited.
    waiter: Mutex<Option<Waker>>,
}

/// What the one waiter of a [`Signal`] keeps: the waker it stored last.
#[derive(Default)]
pub(super) struct Waiting(Option<Waker>);

impl Signal {
    /// Raises the flag (kept until taken, however often it is raised) and
    /// wakes the waiter if it waits.
    pub(super) fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        // SeqCst against the waiter's arming and look: either its look
        // sees the flag, or this sees it armed.
        if !self.armed.load(Ordering::SeqCst) {
            return;
        }
        let waker = self
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Takes the flag down without waiting: what it asked for is being
    /// done now, and only a raise from here on is news.
    pub(super) fn lower(&self) {
        self.raised.store(false, Ordering::SeqCst);
    }

    /// Once the flag is raised; takes it down.
    pub(super) fn taken<'a>(&'a self, waiting: &'a mut Waiting) -> Taken<'a> {
        Taken {
            signal: self,
            waiting,
        }
    }
}

/// [`Signal::taken`]: armed while it waits, disarmed when it is done or
/// dropped (another branch of the writer's select won).
pub(super) struct Taken<'a> {
    signal: &'a Signal,
    waiting: &'a mut Waiting,
}

impl Future for Taken<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let signal = self.signal;
        let stored = &mut self.waiting.0;
        if !stored
            .as_ref()
            .is_some_and(|stored| stored.will_wake(cx.waker()))
        {
            *signal.waiter.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(cx.waker().clone());
            *stored = Some(cx.waker().clone());
        }
        signal.armed.store(true, Ordering::SeqCst);
        if signal.raised.swap(false, Ordering::SeqCst) {
            signal.armed.store(false, Ordering::SeqCst);
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.signal.armed.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_raise_before_the_wait_is_kept_and_taken_once() {
        let signal = Signal::default();
        let mut waiting = Waiting::default();
        signal.raise();
        signal.raise();
        signal.taken(&mut waiting).await;
        let again = tokio::time::timeout(Duration::from_millis(50), signal.taken(&mut waiting));
        assert!(again.await.is_err(), "two raises before a wait are one");
    }

    /// Counts the wakes of the waker it makes.
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_raise_wakes_the_waiter_only_while_it_waits() {
        let signal = Signal::default();
        let mut waiting = Waiting::default();
        let wakes = Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(Ordering::SeqCst);

        // It waited, then went on to something else: a raise now is kept,
        // and wakes nothing (the writer is busy, or waits for another
        // branch of its select).
        let mut taken = signal.taken(&mut waiting);
        assert!(Pin::new(&mut taken).poll(&mut cx).is_pending());
        drop(taken);
        signal.raise();
        assert_eq!(woken(), 0);
        let mut taken = signal.taken(&mut waiting);
        assert!(Pin::new(&mut taken).poll(&mut cx).is_ready());
        drop(taken);

        // While it waits, a raise wakes it.
        let mut taken = signal.taken(&mut waiting);
        assert!(Pin::new(&mut taken).poll(&mut cx).is_pending());
        signal.raise();
        assert_eq!(woken(), 1);
        assert!(Pin::new(&mut taken).poll(&mut cx).is_ready());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_raise_from_another_thread_wakes_the_waiter_every_time() {
        let signal = Arc::new(Signal::default());
        let waiter = {
            let signal = signal.clone();
            tokio::spawn(async move {
                let mut waiting = Waiting::default();
                for _ in 0..10_000 {
                    signal.taken(&mut waiting).await;
                }
            })
        };
        // Each raise waits for the previous one to be taken, so none merge.
        for _ in 0..10_000 {
            while signal.raised.load(Ordering::SeqCst) {
                tokio::task::yield_now().await;
            }
            signal.raise();
        }
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("a raise was missed: the waiter still waits")
            .unwrap();
    }
}
