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
//! a lock) only when the one stored is not its own, which for a task's
//! whole life is once while it is the only waiter. Waiters may take turns
//! (an extra slot at rest, then its connection's writer, then the slot
//! again): each store is numbered, so a waiter back after another stores
//! its waker again. Raising takes the lock to wake the waker only while the
//! waiter waits for this flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// How many wakers were stored in `waiter`: the number of the one there.
    stores: AtomicU64,
}

/// What a waiter of a [`Signal`] keeps: the waker it stored last, and that
/// store's number.
#[derive(Default)]
pub(super) struct Waiting {
    stored: Option<(Waker, u64)>,
}

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
        let stored = &mut self.waiting.stored;
        let in_place = stored.as_ref().is_some_and(|(waker, number)| {
            *number == signal.stores.load(Ordering::SeqCst) && waker.will_wake(cx.waker())
        });
        if !in_place {
            let mut waiter = signal.waiter.lock().unwrap_or_else(PoisonError::into_inner);
            *waiter = Some(cx.waker().clone());
            let number = signal.stores.fetch_add(1, Ordering::SeqCst) + 1;
            *stored = Some((cx.waker().clone(), number));
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

    /// Waiters take turns (the extra slot at rest, then its connection's
    /// writer, then the slot again): a waiter that comes back after another
    /// stored its waker is woken again, though its own waker never changed.
    #[test]
    fn a_waiter_back_after_another_is_woken() {
        let signal = Signal::default();
        let (slot_wakes, writer_wakes) = (
            Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0))),
            Arc::new(Wakes(std::sync::atomic::AtomicUsize::new(0))),
        );
        let (slot_waker, writer_waker) = (
            Waker::from(slot_wakes.clone()),
            Waker::from(writer_wakes.clone()),
        );
        let mut slot = Waiting::default();
        let mut slot_cx = Context::from_waker(&slot_waker);
        let mut taken = signal.taken(&mut slot);
        assert!(Pin::new(&mut taken).poll(&mut slot_cx).is_pending());
        drop(taken);

        let mut writer = Waiting::default();
        let mut taken = signal.taken(&mut writer);
        assert!(
            Pin::new(&mut taken)
                .poll(&mut Context::from_waker(&writer_waker))
                .is_pending()
        );
        drop(taken);

        let mut taken = signal.taken(&mut slot);
        assert!(Pin::new(&mut taken).poll(&mut slot_cx).is_pending());
        signal.raise();
        assert_eq!(
            slot_wakes.0.load(Ordering::SeqCst),
            1,
            "the slot was not woken"
        );
        assert_eq!(writer_wakes.0.load(Ordering::SeqCst), 0);
        assert!(Pin::new(&mut taken).poll(&mut slot_cx).is_ready());
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
