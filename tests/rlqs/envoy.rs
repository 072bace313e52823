//! A client that behaves as Envoy's rate-limit-quota filter does
//! (source/extensions/filters/http/rate_limit_quota/, global_client_impl.cc):
//! a new bucket is reported at once with its first request and a
//! `time_elapsed` of 0 s; every bucket is then reported every interval, in
//! whole seconds; a token bucket refills continuously, is kept when a new
//! assignment has the same max_tokens, tokens_per_fill and fill_interval
//! nanos, and otherwise starts at the old one's fill ratio; an assignment
//! expires after its TTL (whole seconds) and the bucket falls back to the
//! no-assignment behaviour (here: allow); an abandon action drops the
//! bucket; assignments for unknown buckets are skipped.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Duration;

use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
    rate_limit_quota_service_client::RateLimitQuotaServiceClient,
};
use slidegate::server::rlqs::pb::envoy::r#type::v3::rate_limit_strategy::BlanketRule;
pub use slidegate::server::rlqs::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::Channel;

pub use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;

pub use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage as Usage;

pub type Labels = BTreeMap<String, String>;

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What a bucket enforces now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Enforced {
    NoAssignment,
    AllowAll,
    DenyAll,
    /// max_tokens, tokens_per_fill, fill interval (s).
    TokenBucket(u32, u32, i64),
}

struct Bucket {
    allowed: u64,
    denied: u64,
    last_report_ms: u64,
    enforced: Enforced,
    expires_at_ms: u64,
    tokens: f64,
    filled_at_ms: u64,
}

pub struct FakeEnvoy {
    domain: String,
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    answers: Streaming<RateLimitQuotaResponse>,
    buckets: HashMap<Labels, Bucket>,
    /// Abandon actions received.
    pub abandoned: Vec<Labels>,
}

pub async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

/// Open a stream; `first` is sent at once (Envoy opens its stream with
/// its first report). Errors are the server's answer to opening.
pub async fn open(
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<
    (
        mpsc::Sender<RateLimitQuotaUsageReports>,
        Streaming<RateLimitQuotaResponse>,
    ),
    tonic::Status,
> {
    let mut client = RateLimitQuotaServiceClient::new(channel(addr).await);
    let (sender, receiver) = mpsc::channel(16);
    let mut request = tonic::Request::new(ReceiverStream::new(receiver));
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
    }
    let answers = client.stream_rate_limit_quotas(request).await?.into_inner();
    Ok((sender, answers))
}

/// Open a stream on `client`'s connection (shared with its clones), with
/// `first` sent at once; `None` if it is not open within `within`.
pub async fn open_on(
    client: &RateLimitQuotaServiceClient<Channel>,
    first: RateLimitQuotaUsageReports,
    within: Duration,
) -> Option<(
    mpsc::Sender<RateLimitQuotaUsageReports>,
    Streaming<RateLimitQuotaResponse>,
)> {
    let mut client = client.clone();
    let (sender, receiver) = mpsc::channel(16);
    sender.send(first).await.unwrap();
    let opened = tokio::time::timeout(within, async move {
        let mut answers = client
            .stream_rate_limit_quotas(tonic::Request::new(ReceiverStream::new(receiver)))
            .await
            .unwrap()
            .into_inner();
        answers.message().await.unwrap().expect("a first answer");
        answers
    })
    .await
    .ok()?;
    Some((sender, opened))
}

pub fn usage(labels: &Labels, allowed: u64, denied: u64, elapsed_s: i64) -> Usage {
    Usage {
        bucket_id: Some(BucketId {
            bucket: labels.clone().into_iter().collect(),
        }),
        time_elapsed: Some(prost_types::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

/// The next message of a stream, within a generous bound.
pub async fn next(
    answers: &mut Streaming<RateLimitQuotaResponse>,
) -> Result<Option<RateLimitQuotaResponse>, tonic::Status> {
    tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("an answer within 10 s")
}

impl FakeEnvoy {
    pub async fn connect(addr: SocketAddr, domain: &str) -> FakeEnvoy {
        let (reports, answers) = open(addr, None).await.expect("stream opens");
        FakeEnvoy {
            domain: domain.to_owned(),
            reports,
            answers,
            buckets: HashMap::new(),
            abandoned: Vec::new(),
        }
    }

    /// One request on `bucket` at `now_ms`: admitted or not. A new bucket
    /// is reported at once, and its answer awaited (the filter answers the
    /// request first, then the report goes; our clock waits for it).
    pub async fn request(&mut self, bucket: &Labels, now_ms: u64) -> bool {
        if !self.buckets.contains_key(bucket) {
            self.buckets.insert(
                bucket.clone(),
                Bucket {
                    allowed: 1,
                    denied: 0,
                    last_report_ms: now_ms,
                    enforced: Enforced::NoAssignment,
                    expires_at_ms: u64::MAX,
                    tokens: 0.0,
                    filled_at_ms: now_ms,
                },
            );
            self.report(std::slice::from_ref(bucket), now_ms).await;
            return true;
        }
        let Some(state) = self.buckets.get_mut(bucket) else {
            return true;
        };
        if now_ms >= state.expires_at_ms {
            state.enforced = Enforced::NoAssignment;
            state.expires_at_ms = u64::MAX;
        }
        let admitted = match state.enforced {
            Enforced::NoAssignment | Enforced::AllowAll => true,
            Enforced::DenyAll => false,
            Enforced::TokenBucket(max, per_fill, interval_s) => {
                let rate = f64::from(per_fill) / interval_s as f64;
                let elapsed_s = now_ms.saturating_sub(state.filled_at_ms) as f64 / 1000.0;
                state.tokens = (state.tokens + rate * elapsed_s).min(f64::from(max));
                state.filled_at_ms = now_ms;
                if state.tokens >= 1.0 {
                    state.tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
        };
        if admitted {
            state.allowed += 1;
        } else {
            state.denied += 1;
        }
        admitted
    }

    /// The interval report of every bucket, answered.
    pub async fn report_all(&mut self, now_ms: u64) {
        let all: Vec<Labels> = self.buckets.keys().cloned().collect();
        if !all.is_empty() {
            self.report(&all, now_ms).await;
        }
    }

    async fn report(&mut self, buckets: &[Labels], now_ms: u64) {
        let usages = buckets
            .iter()
            .filter_map(|labels| {
                let state = self.buckets.get_mut(labels)?;
                // Whole seconds, truncated, as the filter sends them.
                let elapsed_s = (now_ms.saturating_sub(state.last_report_ms) / 1000) as i64;
                let usage = usage(labels, state.allowed, state.denied, elapsed_s);
                (state.allowed, state.denied, state.last_report_ms) = (0, 0, now_ms);
                Some(usage)
            })
            .collect();
        let reports = RateLimitQuotaUsageReports {
            domain: self.domain.clone(),
            bucket_quota_usages: usages,
        };
        self.reports
            .send(reports)
            .await
            .expect("the stream is open");
        let mut waiting: Vec<Labels> = buckets.to_vec();
        while !waiting.is_empty() {
            let answer = next(&mut self.answers)
                .await
                .expect("no error on the stream")
                .expect("the stream stays open");
            for action in answer.bucket_action {
                let labels: Labels = action
                    .bucket_id
                    .map(|id| id.bucket.into_iter().collect())
                    .unwrap_or_default();
                waiting.retain(|waited| *waited != labels);
                self.apply(labels, action.bucket_action, now_ms);
            }
        }
    }

    fn apply(&mut self, labels: Labels, action: Option<Action>, now_ms: u64) {
        if matches!(action, Some(Action::AbandonAction(_))) {
            self.buckets.remove(&labels);
            self.abandoned.push(labels);
            return;
        }
        // The filter skips assignments for buckets it does not know.
        let Some(state) = self.buckets.get_mut(&labels) else {
            return;
        };
        let Some(Action::QuotaAssignmentAction(assignment)) = action else {
            return;
        };
        let ttl_s = assignment
            .assignment_time_to_live
            .map_or(0, |ttl| ttl.seconds);
        let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
        let enforced = match strategy {
            Some(Strategy::BlanketRule(rule)) if rule == BlanketRule::AllowAll as i32 => {
                Enforced::AllowAll
            }
            Some(Strategy::BlanketRule(_)) => Enforced::DenyAll,
            Some(Strategy::TokenBucket(bucket)) => {
                let interval = bucket.fill_interval.unwrap_or_default();
                Enforced::TokenBucket(
                    bucket.max_tokens,
                    bucket.tokens_per_fill.unwrap_or(0),
                    interval.seconds,
                )
            }
            _ => return,
        };
        if let Enforced::TokenBucket(max, per_fill, _) = enforced {
            let kept = matches!(state.enforced,
                Enforced::TokenBucket(old_max, old_fill, _) if old_max == max && old_fill == per_fill);
            if !kept {
                let ratio = match state.enforced {
                    Enforced::TokenBucket(old_max, ..) => state.tokens / f64::from(old_max.max(1)),
                    _ => 1.0,
                };
                state.tokens = f64::from(max) * ratio;
                state.filled_at_ms = now_ms;
            }
        }
        state.enforced = enforced;
        state.expires_at_ms = now_ms + ttl_s.max(0) as u64 * 1000;
    }

    pub fn enforced(&self, bucket: &Labels) -> Option<Enforced> {
        self.buckets.get(bucket).map(|state| state.enforced)
    }
}

/// Poisson arrivals at `rate` a second, from a fixed seed.
pub struct Poisson {
    pub rate: f64,
    state: u64,
    next_ms: f64,
}

impl Poisson {
    pub fn new(rate: f64, seed: u64, start_ms: u64) -> Poisson {
        let mut poisson = Poisson {
            rate,
            state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            next_ms: start_ms as f64,
        };
        poisson.next_ms += poisson.gap_ms();
        poisson
    }

    fn gap_ms(&mut self) -> f64 {
        // xorshift64*: enough for test traffic, no dependency.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let bits = self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64;
        -uniform.ln() / self.rate * 1000.0
    }

    /// The arrival times up to `until_ms`.
    pub fn until(&mut self, until_ms: u64) -> Vec<u64> {
        let mut arrivals = Vec::new();
        if self.rate <= 0.0 {
            self.next_ms = until_ms as f64;
            return arrivals;
        }
        while self.next_ms <= until_ms as f64 {
            arrivals.push(self.next_ms as u64);
            self.next_ms += self.gap_ms();
        }
        arrivals
    }

    /// Change the rate from `now_ms` on.
    pub fn set_rate(&mut self, rate: f64, now_ms: u64) {
        self.rate = rate;
        self.next_ms = now_ms as f64;
        if rate > 0.0 {
            self.next_ms += self.gap_ms();
        }
    }
}
