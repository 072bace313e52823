//! A counted request's wait for its answer, and the [`Reservation`] of
//! what its replies report added (see `queued`), held at the connection
//! until the store hands it on (see `store::reservation` for the rule).
//! Whoever holds the replies when the caller is gone gives the additions
//! back: this wait, if it took them, or the reader, if it had not sent
//! them yet. Exactly one of them does, since the wait closes the channel
//! before it looks once more.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::oneshot;

use super::queue::Queue;
use super::queued::{Additions, Queued};
use super::reader::Answer;
use super::{Replies, ended_without_answering};
use crate::store::StoreError;
use crate::store::reservation::Reservation;

/// A counted request's replies, and its additions held until the caller
/// is told of them.
pub struct Counted<'a> {
    pub replies: Replies,
    pub reserved: Reservation<Queued<'a>>,
}

/// The wait for a counted request's answer, and what its caller makes of
/// it (`take`, run in the poll the answer arrives, so that only what the
/// caller keeps is moved out of the wait, not the replies). Dropped before
/// it took the answer (its caller gave up), it closes the channel and
/// looks once more: an answer already sent is taken, and its reservation
/// dropped; one not yet sent never will be, and the reader drops it
/// instead (see `reader::complete`).
pub(super) struct Unclaimed<'a, F> {
    /// `None` once taken.
    pub(super) answer: Option<oneshot::Receiver<Answer>>,
    pub(super) additions: Additions<'a>,
    pub(super) queue: &'a Queue,
    /// `None` once run.
    pub(super) take: Option<F>,
}

impl<'a, T, F> Future for Unclaimed<'a, F>
where
    F: FnOnce(Counted<'a>) -> Result<T, StoreError> + Unpin,
{
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(answer) = self.answer.as_mut() else {
            return Poll::Ready(Err(ended_without_answering()));
        };
        let answered = ready!(Pin::new(answer).poll(context));
        self.answer = None;
        let replies = answered.unwrap_or_else(|_| Err(ended_without_answering()))?;
        let reserved = Queued::additions(self.queue, self.additions, &replies);
        // Run once: the answer, taken above, is not there a second time.
        let Some(take) = self.take.take() else {
            return Poll::Ready(Err(ended_without_answering()));
        };
        Poll::Ready(take(Counted { replies, reserved }))
    }
}

impl<F> Drop for Unclaimed<'_, F> {
    fn drop(&mut self) {
        let Some(mut answer) = self.answer.take() else {
            return;
        };
        answer.close();
        if let Ok(Ok(replies)) = answer.try_recv() {
            drop(Queued::additions(self.queue, self.additions, &replies));
        }
    }
}
