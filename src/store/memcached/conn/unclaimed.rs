//! A counted request's wait for its answer, and what happens when its
//! caller gives up during it: the additions it reports applied are taken
//! back, by this wait or by the reader, exactly once.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::oneshot;

use super::ended_without_answering;
use super::queue::Queue;
use super::reader::{self, Answer};
use crate::store::CounterKey;

/// The additions among a request's commands: `counters`, each added
/// `amount`, whose replies start at `first_reply`.
#[derive(Clone, Copy, Debug)]
pub struct Additions<'a> {
    pub counters: &'a [CounterKey],
    pub amount: u64,
    pub first_reply: usize,
}

/// The wait for a counted request's answer. Dropped before it took the
/// answer (its caller gave up), it closes the channel and looks once more:
/// an answer already sent is taken, and the additions it reports applied
/// are taken back; one not yet sent never will be, and the reader takes
/// them back instead (see `reader::complete`). Either way exactly one of
/// them does, and Memcached counts only what a caller was told was
/// counted. The additions are borrowed from the caller, not carried with
/// the answer: an answer is then a few dozen bytes instead of a few
/// hundred, moved three times per check.
pub(super) struct Unclaimed<'a> {
    /// `None` once taken.
    pub(super) answer: Option<oneshot::Receiver<Answer>>,
    pub(super) additions: Additions<'a>,
    pub(super) queue: &'a Queue,
}

impl Future for Unclaimed<'_> {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Answer> {
        let Some(answer) = self.answer.as_mut() else {
            return Poll::Ready(Err(ended_without_answering()));
        };
        let answered = ready!(Pin::new(answer).poll(context));
        self.answer = None;
        Poll::Ready(answered.unwrap_or_else(|_| Err(ended_without_answering())))
    }
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        let Some(mut answer) = self.answer.take() else {
            return;
        };
        answer.close();
        let Ok(Ok(replies)) = answer.try_recv() else {
            return;
        };
        let Additions {
            counters,
            amount,
            first_reply,
        } = self.additions;
        let pairs = counters
            .iter()
            .map(|&counter| Some((counter, amount)))
            .zip(replies.iter().skip(first_reply));
        if let Some(take_back) = reader::take_back_of(pairs) {
            self.queue.push_owed(take_back);
        }
    }
}
