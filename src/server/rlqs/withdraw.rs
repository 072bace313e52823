//! What one stream added to a bucket's shared demand window, and taking
//! exactly that back when the stream stops reporting the bucket (it ends,
//! abandons it, or no rule matches it any more).
//!
//! Every instance reads the fleet's demand from that shared window, so a
//! stream's demand would otherwise stay in every instance's shares for the
//! window's length after the stream is gone: a client alone on a bucket
//! that reconnects would be shared with its own closed stream. Only what
//! the store confirmed this stream added is taken back, from the very
//! sub-bucket it went into, so a stream can remove nothing of another's
//! demand however it behaves: not by ending twice, nor by ending after its
//! sub-buckets have left the window.

use std::time::Duration;

use crate::limiter::Decision;
use crate::policy::Policy;
use crate::source::Source;
use crate::store::{CounterKey, KeyDigest, Store};
use crate::{AnyStore, Limiter};

/// Sub-buckets of the demand window one addition can still be read in:
/// the window's, and the oldest, which the estimate weighs in part.
const READ: usize = crate::config::rlqs::RLQS_DEMAND_PRECISION as usize + 1;
/// Take-backs sent at once: a stream's end may have thousands of buckets'
/// to send, and a node's queue is bounded.
const AT_ONCE: usize = 256;
/// How long a stream's end waits for its take-backs. They complete
/// whoever waits (the store's subtractions do); this only bounds how long
/// the ending stream holds its place.
const WAIT_AT_MOST: Duration = Duration::from_secs(2);

/// What one stream added to one bucket's demand window, by sub-bucket,
/// oldest first; only the sub-buckets still read are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contributions {
    added: [(u64, u64); READ],
    len: u8,
}

impl Contributions {
    /// Remember what `decision` (a report into the demand window under
    /// `demand`) added, when the store counted it: a fallback counted it
    /// nowhere the fleet reads, and an error, nowhere known.
    pub fn record(&mut self, demand: &Policy, decision: &Decision, amount: u64) {
        if !decision.counted || decision.source != Source::Store || amount == 0 {
            return;
        }
        let Some(limit) = demand.limits().first() else {
            return;
        };
        self.add(limit.window().bucket_of(decision.decided_at_ms), amount);
    }

    fn add(&mut self, sub_bucket: u64, amount: u64) {
        let len = usize::from(self.len);
        if let Some(last) = self.added[..len].last_mut()
            && last.0 == sub_bucket
        {
            last.1 = last.1.saturating_add(amount);
            return;
        }
        // The oldest has left the window by the time READ newer ones exist.
        if len == READ {
            self.added.rotate_left(1);
            self.added[READ - 1] = (sub_bucket, amount);
        } else {
            self.added[len] = (sub_bucket, amount);
            self.len += 1;
        }
    }

    /// The additions the window still reads at sub-bucket `current`.
    fn still_read(&self, current: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.added[..usize::from(self.len)]
            .iter()
            .copied()
            .filter(move |&(sub_bucket, _)| sub_bucket + READ as u64 > current)
    }
}

/// Take back from the shared demand window what each `(bucket key,
/// contributions)` added, on whatever store `limiter` counts in.
pub async fn withdraw<'a>(
    limiter: &Limiter<AnyStore>,
    demand: &Policy,
    buckets: impl IntoIterator<Item = (&'a str, Contributions)>,
) {
    let Some(limit) = demand.limits().first() else {
        return;
    };
    let window = limit.window();
    let now_ms = limiter.now_ms();
    let current = window.bucket_of(now_ms);
    let takes: Vec<(CounterKey, u64)> = buckets
        .into_iter()
        .flat_map(|(key, contributions)| {
            let digest = KeyDigest::of(demand.scope(), key);
            contributions
                .still_read(current)
                .map(move |(bucket, amount)| {
                    let counter = CounterKey {
                        digest,
                        window,
                        bucket,
                    };
                    (counter, amount)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for part in takes.chunks(AT_ONCE) {
        let part: Vec<(&[CounterKey], u64)> = part
            .iter()
            .map(|(counter, amount)| (std::slice::from_ref(counter), *amount))
            .collect();
        let taken = limiter.store().subtract_many(&part, now_ms);
        match tokio::time::timeout(WAIT_AT_MOST, taken).await {
            Ok(results) => {
                if let Some(Err(error)) = results.into_iter().find(Result::is_err) {
                    // What was not taken back leaves the window with time,
                    // as it did before streams took theirs back.
                    tracing::debug!(%error, "an ended RLQS stream's demand was not all taken back");
                }
            }
            Err(_) => {
                tracing::debug!("an ended RLQS stream's demand is still being taken back");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
