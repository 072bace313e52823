//! One stream's state: the domain its first message named, and each bucket
//! it reports with when it last did, so that a bucket it stops reporting is
//! abandoned after `abandon_after`. Pure: the time comes in as an argument.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::Status;

use super::pb::envoy::service::rate_limit_quota::v3::BucketId;
use super::places::Places;

/// The most buckets one stream may keep: what a client can make a stream
/// hold is bounded, as an HTTP body is.
pub const MAX_BUCKETS_PER_STREAM: usize = 10_000;
/// The most buckets all the streams of an instance keep together. Streams
/// and bucket ids are bounded each, but their product is not a bound an
/// operator can plan for; this is (a kept bucket weighs at most a few KB:
/// 8 labels of bounded size, its counter key, its demand).
pub const MAX_BUCKETS: usize = 100_000;

/// The buckets every stream of an instance keeps, counted against one
/// bound; each stream gives back its own when it forgets them or ends.
#[derive(Clone, Debug)]
pub struct BucketBudget {
    held: Arc<Places>,
    most: usize,
}

impl BucketBudget {
    pub fn new(most: usize) -> BucketBudget {
        BucketBudget {
            held: Arc::default(),
            most,
        }
    }

    /// Buckets kept now, over all streams.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.held()
    }

    fn take(&self) -> bool {
        self.held.take(self.most)
    }

    fn give_back(&self, buckets: usize) {
        self.held.give_back(buckets);
    }
}

#[derive(Debug)]
pub struct StreamState {
    /// Tells this stream's demand apart from other streams'.
    pub id: u64,
    domain: Option<String>,
    /// By counter key.
    buckets: HashMap<String, Tracked>,
    budget: BucketBudget,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.budget.give_back(self.buckets.len());
    }
}

#[derive(Debug)]
struct Tracked {
    bucket_id: BucketId,
    last_report_ms: u64,
}

impl StreamState {
    pub fn new(id: u64, budget: BucketBudget) -> StreamState {
        StreamState {
            id,
            domain: None,
            buckets: HashMap::new(),
            budget,
        }
    }

    /// The domain of a message: the first message must name it; a later
    /// one may leave it empty (the proto asks for it only once; Envoy sends
    /// it every time), but may not name another.
    pub fn domain(&mut self, named: &str) -> Result<String, Status> {
        match (&self.domain, named) {
            (None, "") => Err(Status::invalid_argument(
                "domain: must not be empty in a stream's first message",
            )),
            (None, named) => {
                self.domain = Some(named.to_owned());
                Ok(named.to_owned())
            }
            (Some(own), "") => Ok(own.clone()),
            (Some(own), named) if own == named => Ok(own.clone()),
            (Some(own), named) => Err(Status::invalid_argument(format!(
                "domain: this stream serves {own:?}, not {named:?}: one domain a stream"
            ))),
        }
    }

    /// A report of `key` at `now_ms`: how long since the previous one on
    /// this stream (`None` for its first).
    pub fn reported(
        &mut self,
        key: &str,
        bucket_id: &BucketId,
        now_ms: u64,
    ) -> Result<Option<u64>, Status> {
        if let Some(tracked) = self.buckets.get_mut(key) {
            let since = now_ms.saturating_sub(tracked.last_report_ms);
            tracked.last_report_ms = now_ms;
            return Ok(Some(since));
        }
        if self.buckets.len() >= MAX_BUCKETS_PER_STREAM {
            return Err(Status::invalid_argument(format!(
                "bucket_quota_usages: a stream may report at most {MAX_BUCKETS_PER_STREAM} buckets"
            )));
        }
        if !self.budget.take() {
            return Err(Status::resource_exhausted(format!(
                "this instance keeps at most {} buckets over all its streams",
                self.budget.most
            )));
        }
        let tracked = Tracked {
            bucket_id: bucket_id.clone(),
            last_report_ms: now_ms,
        };
        self.buckets.insert(key.to_owned(), tracked);
        Ok(None)
    }

    /// The buckets not reported for `after_ms` (counter key and id),
    /// forgotten by this stream.
    pub fn abandon(&mut self, now_ms: u64, after_ms: u64) -> Vec<(String, BucketId)> {
        let stale: Vec<String> = self
            .buckets
            .iter()
            .filter(|(_, tracked)| now_ms.saturating_sub(tracked.last_report_ms) >= after_ms)
            .map(|(key, _)| key.clone())
            .collect();
        let abandoned: Vec<(String, BucketId)> = stale
            .into_iter()
            .filter_map(|key| {
                let tracked = self.buckets.remove(&key)?;
                Some((key, tracked.bucket_id))
            })
            .collect();
        self.budget.give_back(abandoned.len());
        abandoned
    }

    /// Whether it tracks any bucket.
    pub fn tracks_any(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// Stop tracking `key` (no rule matches it any more), giving back its
    /// place: true when it was tracked.
    pub fn forget(&mut self, key: &str) -> bool {
        let forgotten = self.buckets.remove(key).is_some();
        if forgotten {
            self.budget.give_back(1);
        }
        forgotten
    }

    /// Every bucket's counter key, for the stream's end.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.buckets.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> BucketId {
        BucketId {
            bucket: [("name".to_owned(), name.to_owned())].into(),
        }
    }

    #[test]
    fn the_first_message_names_the_domain_and_later_ones_may_not_change_it() {
        let mut stream = StreamState::new(1, BucketBudget::new(10));
        let error = stream.domain("").unwrap_err();
        assert!(error.message().starts_with("domain:"), "{error:?}");
        assert_eq!(stream.domain("envoy").unwrap(), "envoy");
        assert_eq!(stream.domain("").unwrap(), "envoy");
        assert_eq!(stream.domain("envoy").unwrap(), "envoy");
        assert!(stream.domain("other").is_err());
    }

    #[test]
    fn a_bucket_left_unreported_is_abandoned_once() {
        let mut stream = StreamState::new(1, BucketBudget::new(10));
        assert_eq!(stream.reported("a", &id("a"), 1_000).unwrap(), None);
        assert_eq!(stream.reported("b", &id("b"), 1_000).unwrap(), None);
        assert_eq!(stream.reported("a", &id("a"), 3_500).unwrap(), Some(2_500));
        assert!(stream.abandon(60_999, 60_000).is_empty());
        let abandoned = stream.abandon(61_000, 60_000);
        assert_eq!(abandoned, vec![("b".to_owned(), id("b"))]);
        assert!(stream.abandon(61_000, 60_000).is_empty());
        assert_eq!(stream.keys().collect::<Vec<_>>(), ["a"]);
        // Reported again, it is new again.
        assert_eq!(stream.reported("b", &id("b"), 62_000).unwrap(), None);
    }

    /// Every stream of an instance draws on one budget of buckets: past it
    /// a new bucket is refused (the stream ends with RESOURCE_EXHAUSTED),
    /// and what a stream gives up, abandoned or at its end, is free again.
    #[test]
    fn the_buckets_of_all_streams_are_bounded_together() {
        // The README's figure for an instance; the behaviour below, on a
        // budget of 2.
        assert_eq!(MAX_BUCKETS, 100_000);
        let budget = BucketBudget::new(2);
        let mut first = StreamState::new(1, budget.clone());
        let mut second = StreamState::new(2, budget.clone());
        assert_eq!(first.reported("a", &id("a"), 1_000).unwrap(), None);
        assert_eq!(second.reported("b", &id("b"), 1_000).unwrap(), None);
        // Reported again: no new bucket.
        assert!(first.reported("a", &id("a"), 2_000).is_ok());
        let refused = second.reported("c", &id("c"), 2_000).unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert_eq!(budget.held(), 2);
        // Abandoned, a bucket frees its place.
        assert_eq!(second.abandon(61_000, 60_000).len(), 1);
        assert!(second.reported("c", &id("c"), 61_000).is_ok());
        // A stream's end frees all of its own.
        drop(first);
        assert_eq!(budget.held(), 1);
        assert!(second.reported("d", &id("d"), 61_000).is_ok());
        // Forgotten (a reload left it unmatched), a bucket frees its place
        // once.
        assert!(second.forget("c"));
        assert!(!second.forget("c"));
        assert_eq!(budget.held(), 1);
        assert_eq!(second.keys().collect::<Vec<_>>(), ["d"]);
    }

    /// A stream keeps at most the README's 10,000 buckets: the next new one
    /// is its client's fault, INVALID_ARGUMENT naming the field, while
    /// buckets it already keeps are still reported.
    #[test]
    fn a_stream_keeps_at_most_ten_thousand_buckets() {
        assert_eq!(MAX_BUCKETS_PER_STREAM, 10_000);
        let mut stream = StreamState::new(1, BucketBudget::new(20_000));
        for index in 0..MAX_BUCKETS_PER_STREAM {
            let name = format!("b{index}");
            assert!(stream.reported(&name, &id(&name), 1_000).is_ok(), "{index}");
        }
        let refused = stream
            .reported("one-more", &id("one-more"), 1_000)
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(
            refused.message().starts_with("bucket_quota_usages:"),
            "{refused:?}"
        );
        assert!(stream.reported("b0", &id("b0"), 2_000).is_ok());
    }
}
