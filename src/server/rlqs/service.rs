//! `StreamRateLimitQuotas`: each stream runs in its own task, answering
//! every usage report with an assignment for each bucket it names, and
//! sending an abandon action for a bucket it has stopped reporting.
//!
//! A report of one bucket, in steps:
//! 1. its rule (`rules`); no rule: the `unmatched` blanket rule;
//! 2. its allowed requests counted into the bucket's window, and its demand
//!    (allowed + denied) into the shared demand window, through the limiter;
//! 3. the assignment (`shares`) from what is free and the client's part of
//!    the demand; a failing store gives what the failure mode says.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Rlqs;
use super::metrics::Strategy;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as WireAction, QuotaAssignmentAction,
};
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use super::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use super::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy as WireStrategy};
use super::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use super::report::Usage;
use super::rules::{DEMAND_WINDOW, Settings, counter_key};
use super::shares::{self, Assignment, Figures};
use super::stream::StreamState;
use crate::config::Unmatched;
use crate::limiter::{CheckError, Decision, FailureMode, Source};
use crate::policy::Policy;
use crate::server::App;
use crate::server::grpc::{authorize, authorize_value};

/// The most RLQS streams an instance serves at once: each keeps what its
/// client reports (at most `MAX_BUCKETS_PER_STREAM` bucket ids of bounded
/// size), so their number is what bounds the memory they take.
const MAX_STREAMS: usize = 1_024;
/// The most buckets one report may carry.
const MAX_USAGES_PER_REPORT: usize = 1_000;
/// How often a stream looks for buckets to abandon when it hears nothing.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Responses a stream may have waiting to be sent.
const OUTBOUND_QUEUE: usize = 16;

static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);

#[derive(Clone)]
pub struct RlqsService {
    pub(super) app: Arc<App>,
    pub(super) rlqs: Arc<Rlqs>,
}

type Outbound = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

#[tonic::async_trait]
impl RateLimitQuotaService for RlqsService {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        authorize(&self.app, request.metadata())?;
        // Kept, and checked again at each report: a token revoked by a
        // reload ends the streams opened with it, not only the next ones.
        let authorization = request.metadata().get("authorization").cloned();
        let (outbound, receiver) = mpsc::channel(OUTBOUND_QUEUE);
        tokio::spawn(
            self.clone()
                .run(request.into_inner(), authorization, outbound),
        );
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

impl RlqsService {
    /// Answer one stream until the client ends it, sends what cannot be
    /// answered (the stream ends with that error; others go on), goes, or
    /// sends nothing, or takes no answer, for the quiet timeout (Envoy
    /// reports every interval, and opens a new stream with its next
    /// report).
    async fn run(
        self,
        mut inbound: Streaming<RateLimitQuotaUsageReports>,
        authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
        outbound: Outbound,
    ) {
        let Some(_open) = self.rlqs.metrics.try_open(MAX_STREAMS) else {
            let refused = Status::resource_exhausted(format!(
                "this instance serves at most {MAX_STREAMS} RLQS streams at once"
            ));
            let _ = outbound.send(Err(refused)).await;
            return;
        };
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let mut stream = StreamState::new(id, self.rlqs.buckets.clone());
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let quiet_timeout = self.app.guard.quiet_timeout();
        let mut heard_at = tokio::time::Instant::now();
        loop {
            let answer = tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(reports)) => {
                        heard_at = tokio::time::Instant::now();
                        let authorized = authorize_value(&self.app, authorization.as_ref());
                        match authorized {
                            Ok(()) => self.answer(&mut stream, &reports).await,
                            Err(refused) => Err(refused),
                        }
                    }
                    // The client closed its side, or the connection went.
                    Ok(None) | Err(_) => break,
                },
                _ = sweep.tick() => {
                    if heard_at.elapsed() >= quiet_timeout {
                        Err(Status::unavailable(format!(
                            "no usage report for {quiet_timeout:?}: stream closed"
                        )))
                    } else {
                        Ok(self.abandon(&mut stream))
                    }
                }
                () = outbound.closed() => break,
            };
            let failed = answer.is_err();
            let send = match answer {
                Ok(actions) if actions.is_empty() => continue,
                Ok(bucket_action) => Ok(RateLimitQuotaResponse { bucket_action }),
                Err(status) => Err(status),
            };
            // A client that takes no answer for the quiet timeout is gone
            // as much as one that sends nothing: waiting for room to answer
            // it held its stream, and its buckets' places, for good (past
            // the quiet timeout, and past a revoked token).
            let sent = tokio::time::timeout(quiet_timeout, outbound.send(send)).await;
            if !matches!(sent, Ok(Ok(()))) || failed {
                break;
            }
        }
        for key in stream.keys() {
            self.rlqs.demands.forget(key, stream.id);
        }
    }

    /// The actions answering one report: an assignment for each bucket it
    /// names, and an abandon for each bucket gone unreported too long.
    async fn answer(
        &self,
        stream: &mut StreamState,
        reports: &RateLimitQuotaUsageReports,
    ) -> Result<Vec<BucketAction>, Status> {
        let domain = stream.domain(&reports.domain)?;
        let usages = &reports.bucket_quota_usages;
        if usages.is_empty() {
            return Err(Status::invalid_argument(
                "bucket_quota_usages: must not be empty",
            ));
        }
        if usages.len() > MAX_USAGES_PER_REPORT {
            return Err(Status::invalid_argument(format!(
                "bucket_quota_usages: at most {MAX_USAGES_PER_REPORT} buckets a report, got {}",
                usages.len()
            )));
        }
        // All checked before anything is counted: a bad report counts nothing.
        let checked: Vec<Usage> = usages
            .iter()
            .enumerate()
            .map(|(index, usage)| Usage::check(index, usage))
            .collect::<Result<_, _>>()?;
        self.rlqs.metrics.report();
        let settings = self.rlqs.settings();
        let mut actions = Vec::with_capacity(checked.len());
        for usage in &checked {
            let assignment = self.assign(stream, &settings, &domain, usage).await?;
            self.rlqs.metrics.assigned(assignment.strategy());
            actions.push(assignment.action(usage.bucket_id.clone()));
        }
        actions.extend(self.abandon(stream));
        Ok(actions)
    }

    /// Abandon actions for the buckets `stream` has stopped reporting.
    fn abandon(&self, stream: &mut StreamState) -> Vec<BucketAction> {
        let now_ms = self.app.limiter().now_ms();
        let after_ms = self.rlqs.settings().abandon_after_ms;
        let abandoned = stream.abandon(now_ms, after_ms);
        self.rlqs.metrics.abandoned(abandoned.len());
        abandoned
            .into_iter()
            .map(|(key, bucket_id)| {
                self.rlqs.demands.forget(&key, stream.id);
                BucketAction {
                    bucket_id: Some(bucket_id),
                    bucket_action: Some(WireAction::AbandonAction(AbandonAction {})),
                }
            })
            .collect()
    }

    /// One bucket's assignment for one report.
    async fn assign(
        &self,
        stream: &mut StreamState,
        settings: &Settings,
        domain: &str,
        usage: &Usage<'_>,
    ) -> Result<Sent, Status> {
        let ttl_s = settings.assignment_ttl_s;
        let labels = &usage.bucket_id.bucket;
        let Some(policy) = settings.find(domain, labels) else {
            // A bucket a reload left unmatched is no longer tracked: its
            // report would never move again, and it would be abandoned
            // though its Envoy still reports it.
            if stream.tracks_any() {
                let key = counter_key(domain, labels);
                if stream.forget(&key) {
                    self.rlqs.demands.forget(&key, stream.id);
                }
            }
            let rule = match settings.unmatched {
                Unmatched::Allow => BlanketRule::AllowAll,
                Unmatched::Deny => BlanketRule::DenyAll,
            };
            return Ok(Sent::Blanket(rule, ttl_s));
        };
        let key = counter_key(domain, labels);
        let now_ms = self.app.limiter().now_ms();
        let since_ms = stream.reported(&key, usage.bucket_id, now_ms)?;
        // Envoy truncates `time_elapsed` to whole seconds (a first report
        // says 0): the time this server saw pass counts too. A first report
        // tells nothing of the next: what it is given lasts the whole TTL.
        let elapsed_s = match since_ms {
            Some(ms) => usage.elapsed_s.max(ms as f64 / 1000.0).max(1.0),
            None => (ttl_s as f64).max(usage.elapsed_s),
        };
        // Each is at most MAX_AMOUNT, their sum up to twice that: held to
        // what the demand counter takes, or its report would be refused
        // and the fleet's demand miss this one.
        let demanded = (usage.allowed + usage.denied).min(crate::policy::MAX_AMOUNT);
        let own_demand = demanded as f64 / elapsed_s.max(1.0);
        let local = self.rlqs.demands.set(&key, stream.id, own_demand, now_ms);

        let limiter = self.app.limiter();
        let (counted, fleet) = tokio::join!(
            count(limiter, &key, policy, usage.allowed),
            count(limiter, &key, &settings.demand, demanded),
        );
        let decision = match counted {
            Ok(decision) => decision,
            Err(CheckError::StoreUnavailable(_)) => {
                return Ok(Sent::Blanket(
                    BlanketRule::DenyAll,
                    short_ttl(elapsed_s, ttl_s),
                ));
            }
            Err(other) => return Err(Status::invalid_argument(other.to_string())),
        };
        if decision.source == Source::Fallback && limiter.failure_mode() == FailureMode::Allow {
            return Ok(Sent::Blanket(
                BlanketRule::AllowAll,
                short_ttl(elapsed_s, ttl_s),
            ));
        }
        // The fleet's demand, per second, when the shared counter answers:
        // over the part of the window that can hold the bucket's history,
        // or a new bucket's demand would read as a fraction of itself (and
        // each instance would hand its clients shares of too small a whole).
        let history_s = (local.known_ms as f64 / 1000.0).clamp(1.0, DEMAND_WINDOW.as_secs_f64());
        let fleet_demand = match fleet {
            Ok(fleet) if fleet.source != Source::Fallback => {
                fleet
                    .limits
                    .first()
                    .map_or(0.0, |state| state.estimate.as_f64())
                    / history_s
            }
            _ => 0.0,
        };
        let Some(state) = decision.limits.first() else {
            return Err(Status::internal("a bucket policy without a limit"));
        };
        let figures = Figures {
            limit: state.limit.limit(),
            window_s: state.limit.window().window_ms() as f64 / 1000.0,
            estimate: state.estimate.as_f64(),
            next_unit_ms: state.next_unit_ms,
            own_demand,
            total_demand: local.total.max(fleet_demand),
            clients: local.streams,
            horizon_s: elapsed_s,
        };
        Ok(match shares::assign(&figures) {
            Assignment::DenyAll { ttl_s: deny_s } => {
                Sent::Blanket(BlanketRule::DenyAll, deny_s.clamp(1, ttl_s))
            }
            bucket @ Assignment::TokenBucket { .. } => Sent::Assigned(bucket, ttl_s),
        })
    }
}

/// Count `amount` into `key`'s window whatever it says (what Envoys let
/// through happened): the decision has the window's estimate. Nothing to
/// count reads it.
async fn count(
    limiter: &crate::Limiter<crate::AnyStore>,
    key: &str,
    policy: &Policy,
    amount: u64,
) -> Result<Decision, CheckError> {
    if amount == 0 {
        limiter.peek(key, policy, 1).await
    } else {
        limiter.report(key, policy, amount).await
    }
}

/// The TTL of what a failing store makes us send: until just after the
/// client's next report, so the store's return is seen at once.
fn short_ttl(elapsed_s: f64, ttl_s: u64) -> u64 {
    (elapsed_s.ceil() as u64 + 1).clamp(1, ttl_s)
}

/// What is sent for one bucket, with its TTL in seconds.
enum Sent {
    Blanket(BlanketRule, u64),
    Assigned(Assignment, u64),
}

impl Sent {
    fn strategy(&self) -> Strategy {
        match self {
            Sent::Blanket(BlanketRule::AllowAll, _) => Strategy::AllowAll,
            Sent::Blanket(BlanketRule::DenyAll, _) => Strategy::DenyAll,
            Sent::Assigned(..) => Strategy::TokenBucket,
        }
    }

    fn action(&self, bucket_id: BucketId) -> BucketAction {
        let (strategy, ttl_s) = match *self {
            Sent::Blanket(rule, ttl_s) => (WireStrategy::BlanketRule(rule as i32), ttl_s),
            Sent::Assigned(Assignment::DenyAll { .. }, ttl_s) => (
                WireStrategy::BlanketRule(BlanketRule::DenyAll as i32),
                ttl_s,
            ),
            Sent::Assigned(
                Assignment::TokenBucket {
                    max_tokens,
                    tokens_per_fill,
                    fill_interval_s,
                },
                ttl_s,
            ) => (
                WireStrategy::TokenBucket(TokenBucket {
                    max_tokens,
                    // Always sent: Envoy reads an unset one as 0, not 1.
                    tokens_per_fill: Some(tokens_per_fill),
                    fill_interval: Some(seconds(u64::from(fill_interval_s))),
                }),
                ttl_s,
            ),
        };
        BucketAction {
            bucket_id: Some(bucket_id),
            bucket_action: Some(WireAction::QuotaAssignmentAction(QuotaAssignmentAction {
                // Always sent, at least 1 s: Envoy expires an unset or
                // sub-second TTL at once.
                assignment_time_to_live: Some(seconds(ttl_s.max(1))),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            })),
        }
    }
}

fn seconds(seconds: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}
