//! One stream's state: the domain its first message named, and each bucket
//! it reports with when it last did, so that a bucket it stops reporting is
//! abandoned after `abandon_after`, and what it added to the bucket's
//! shared demand, to take back when it stops. Pure: the time comes in as
//! an argument.

use std::collections::HashMap;

use prost::Message;
use tonic::Status;

use super::budget::BucketBudget;
use super::pb::envoy::service::rate_limit_quota::v3::BucketId;
use super::withdraw::Contributions;

/// The most buckets one stream may keep: what a client can make a stream
/// hold is bounded, as an HTTP body is.
pub const MAX_BUCKETS_PER_STREAM: usize = 10_000;

#[derive(Debug)]
pub struct StreamState {
    /// Tells this stream's demand apart from other streams'.
    pub id: u64,
    domain: Option<String>,
    /// By counter key.
    buckets: HashMap<String, Tracked>,
    /// What its buckets weigh together, held in the budget.
    weight: u64,
    budget: BucketBudget,
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.budget.give_back(self.buckets.len(), self.weight);
    }
}

#[derive(Debug)]
struct Tracked {
    /// The id as the client sent it, encoded: an abandon action names it,
    /// and encoded it weighs its bytes, not a map's.
    id: Box<[u8]>,
    last_report_ms: u64,
    weight: u64,
    demand: Contributions,
}

/// What keeping a bucket costs beside its id's bytes: its counter key (32
/// hex digits) in this stream's map and in the instance's demand map, a
/// slot in each (a map grows by doubling while at most 7/8 full: two
/// slots' room a bucket), the demand entry's map of streams, and the
/// allocator's header on each of these five allocations.
fn weigh(id_bytes: usize) -> u64 {
    const KEY_BYTES: usize = 32;
    const ALLOCATIONS: usize = 5;
    const ALLOCATION_HEADER: usize = 16;
    let slots = 2 * (size_of::<(String, Tracked)>() + super::demand::ENTRY_BYTES);
    (id_bytes + 2 * KEY_BYTES + slots + ALLOCATIONS * ALLOCATION_HEADER) as u64
}

impl StreamState {
    pub fn new(id: u64, budget: BucketBudget) -> StreamState {
        StreamState {
            id,
            domain: None,
            buckets: HashMap::new(),
            weight: 0,
            budget,
        }
    }

    /// The domain of a message, at most `max_bytes` long: the first message
    /// must name it; a later one may leave it empty (the proto asks for it
    /// only once; Envoy sends it every time), but may not name another.
    pub fn domain(&mut self, named: &str, max_bytes: usize) -> Result<String, Status> {
        if named.len() > max_bytes {
            return Err(Status::invalid_argument(format!(
                "domain: {} bytes, longer than rlqs.max_domain_bytes ({max_bytes})",
                named.len()
            )));
        }
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
        let id = bucket_id.encode_to_vec().into_boxed_slice();
        let weight = weigh(id.len());
        self.budget.take(weight)?;
        self.weight += weight;
        let tracked = Tracked {
            id,
            last_report_ms: now_ms,
            weight,
            demand: Contributions::default(),
        };
        self.buckets.insert(key.to_owned(), tracked);
        Ok(None)
    }

    /// What this stream added to `key`'s shared demand, to take back when
    /// it stops reporting it (`key` is tracked: it was just reported).
    pub fn demand_of(&mut self, key: &str) -> Option<&mut Contributions> {
        self.buckets.get_mut(key).map(|tracked| &mut tracked.demand)
    }

    /// The buckets not reported for `after_ms` (counter key, id and what it
    /// added to the shared demand), forgotten by this stream.
    pub fn abandon(
        &mut self,
        now_ms: u64,
        after_ms: u64,
    ) -> Vec<(String, BucketId, Contributions)> {
        let stale: Vec<String> = self
            .buckets
            .iter()
            .filter(|(_, tracked)| now_ms.saturating_sub(tracked.last_report_ms) >= after_ms)
            .map(|(key, _)| key.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|key| {
                let tracked = self.untrack(&key)?;
                // Encoded by this stream from a decoded id: it decodes.
                let id = BucketId::decode(&*tracked.id).unwrap_or_default();
                Some((key, id, tracked.demand))
            })
            .collect()
    }

    /// Whether it tracks any bucket.
    pub fn tracks_any(&self) -> bool {
        !self.buckets.is_empty()
    }

    /// Stop tracking `key` (no rule matches it any more), giving back its
    /// place: what it added to the shared demand, when it was tracked.
    pub fn forget(&mut self, key: &str) -> Option<Contributions> {
        self.untrack(key).map(|tracked| tracked.demand)
    }

    /// Stop tracking every bucket, for the stream's end: each one's
    /// counter key and what it added to the shared demand.
    pub fn forget_all(&mut self) -> Vec<(String, Contributions)> {
        self.budget.give_back(self.buckets.len(), self.weight);
        self.weight = 0;
        self.buckets
            .drain()
            .map(|(key, tracked)| (key, tracked.demand))
            .collect()
    }

    fn untrack(&mut self, key: &str) -> Option<Tracked> {
        let tracked = self.buckets.remove(key)?;
        self.weight -= tracked.weight;
        self.budget.give_back(1, tracked.weight);
        Some(tracked)
    }
}

#[cfg(test)]
mod tests {
    use super::super::budget::MAX_BUCKETS;
    use super::*;

    /// Room for every test's buckets, in bytes.
    const PLENTY: u64 = 1 << 30;

    fn id(name: &str) -> BucketId {
        BucketId {
            bucket: [("name".to_owned(), name.to_owned())].into(),
        }
    }

    fn keys(stream: &StreamState) -> Vec<&str> {
        let mut keys: Vec<&str> = stream.buckets.keys().map(String::as_str).collect();
        keys.sort_unstable();
        keys
    }

    #[test]
    fn the_first_message_names_the_domain_and_later_ones_may_not_change_it() {
        let mut stream = StreamState::new(1, BucketBudget::new(10, PLENTY));
        let error = stream.domain("", 256).unwrap_err();
        assert!(error.message().starts_with("domain:"), "{error:?}");
        assert_eq!(stream.domain("envoy", 256).unwrap(), "envoy");
        assert_eq!(stream.domain("", 256).unwrap(), "envoy");
        assert_eq!(stream.domain("envoy", 256).unwrap(), "envoy");
        assert!(stream.domain("other", 256).is_err());
    }

    /// A domain past the bound is refused naming it, first message or not.
    #[test]
    fn a_domain_is_at_most_its_bound() {
        let mut stream = StreamState::new(1, BucketBudget::new(10, PLENTY));
        let error = stream.domain("envoy-long", 5).unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            error.message(),
            "domain: 10 bytes, longer than rlqs.max_domain_bytes (5)"
        );
        assert_eq!(stream.domain("envoy", 5).unwrap(), "envoy");
        assert!(stream.domain("envoy-long", 5).is_err());
    }

    #[test]
    fn a_bucket_left_unreported_is_abandoned_once() {
        let mut stream = StreamState::new(1, BucketBudget::new(10, PLENTY));
        assert_eq!(stream.reported("a", &id("a"), 1_000).unwrap(), None);
        assert_eq!(stream.reported("b", &id("b"), 1_000).unwrap(), None);
        assert_eq!(stream.reported("a", &id("a"), 3_500).unwrap(), Some(2_500));
        assert!(stream.abandon(60_999, 60_000).is_empty());
        let abandoned = stream.abandon(61_000, 60_000);
        assert_eq!(
            abandoned,
            vec![("b".to_owned(), id("b"), Contributions::default())]
        );
        assert!(stream.abandon(61_000, 60_000).is_empty());
        assert_eq!(keys(&stream), ["a"]);
        // Reported again, it is new again.
        assert_eq!(stream.reported("b", &id("b"), 62_000).unwrap(), None);
    }

    /// Every stream of an instance draws on one budget of buckets: past it
    /// a new bucket is refused (the stream ends with RESOURCE_EXHAUSTED),
    /// and what a stream gives up, abandoned or at its end, is free again.
    #[test]
    fn the_buckets_of_all_streams_are_bounded_together() {
        // The book's figure for an instance; the behaviour below, on a
        // budget of 2.
        assert_eq!(MAX_BUCKETS, 100_000);
        let budget = BucketBudget::new(2, PLENTY);
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
        assert_eq!(budget.held().0, 2);
        // Abandoned, a bucket frees its place.
        assert_eq!(second.abandon(61_000, 60_000).len(), 1);
        assert!(second.reported("c", &id("c"), 61_000).is_ok());
        // A stream's end frees all of its own.
        drop(first);
        assert_eq!(budget.held().0, 1);
        assert!(second.reported("d", &id("d"), 61_000).is_ok());
        // Forgotten (a reload left it unmatched), a bucket frees its place
        // once.
        assert!(second.forget("c").is_some());
        assert!(second.forget("c").is_none());
        assert_eq!(budget.held().0, 1);
        assert_eq!(keys(&second), ["d"]);
        assert_eq!(second.forget_all().len(), 1);
        assert_eq!(budget.held(), (0, 0));
        drop(second);
        assert_eq!(budget.held(), (0, 0), "an ended stream gives back once");
    }

    /// Kept buckets are weighed in bytes, a large id more than a small
    /// one, against one bound for the instance: past it a new bucket is
    /// refused naming `rlqs.max_tracked_bytes`, and a bucket given up
    /// frees what it weighed.
    #[test]
    fn kept_buckets_are_weighed_in_bytes_against_one_bound() {
        let small = weigh(id("a").encoded_len());
        let large_id = id(&"v".repeat(512));
        let large = weigh(large_id.encoded_len());
        assert!(large >= small + 500, "{large} vs {small}");
        let budget = BucketBudget::new(MAX_BUCKETS, 2 * large);
        let mut first = StreamState::new(1, budget.clone());
        let mut second = StreamState::new(2, budget.clone());
        assert!(first.reported("l1", &large_id, 1_000).is_ok());
        assert!(second.reported("l2", &large_id, 1_000).is_ok());
        assert_eq!(budget.held(), (2, 2 * large));
        let refused = second.reported("s", &id("s"), 1_000).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().starts_with("rlqs.max_tracked_bytes:"),
            "{refused:?}"
        );
        // Refused, it holds nothing.
        assert_eq!(budget.held(), (2, 2 * large));
        drop(first);
        assert_eq!(budget.held(), (1, large));
        assert!(second.reported("s", &id("s"), 1_000).is_ok());
        assert_eq!(budget.held(), (2, large + small));
        // A lowered bound keeps what is kept, and refuses what is new.
        budget.set_most_bytes(small);
        assert!(second.reported("t", &id("t"), 1_000).is_err());
        assert_eq!(second.abandon(70_000, 60_000).len(), 2);
        assert_eq!(budget.held(), (0, 0));
    }

    /// A stream keeps at most the book's 10,000 buckets: the next new one
    /// is its client's fault, INVALID_ARGUMENT naming the field, while
    /// buckets it already keeps are still reported.
    #[test]
    fn a_stream_keeps_at_most_ten_thousand_buckets() {
        assert_eq!(MAX_BUCKETS_PER_STREAM, 10_000);
        let mut stream = StreamState::new(1, BucketBudget::new(20_000, PLENTY));
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
