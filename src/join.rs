//! Waiting on several futures at once, for the store calls of one request
//! that go out together (each key's batch, each key's rollback); and
//! starting one that nobody waits for.

use std::pin::Pin;
use std::task::Poll;

/// Poll every future until all are done; the outputs in the same order.
/// (The crate has no futures dependency; this is all it would be used for.)
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|context| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(context) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// Poll `future` once, then drop it: for work that begins on its first
/// poll and must not wait for anyone, such as a take-back
/// ([`Store::subtract`](crate::store::Store::subtract) completes once
/// started, whoever waits).
pub(crate) fn start_now<F: Future>(future: F) {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let _ = future.as_mut().poll(&mut context);
}
