//! `StreamRateLimitQuotas`: each stream runs in its own task, answering
//! every usage report with an assignment for each bucket it names
//! (`assign`), and sending an abandon action for a bucket it has stopped
//! reporting. A stream that stops reporting a bucket, or ends, takes what
//! it added to the bucket's shared demand back (`withdraw`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tonic::Status;
use tonic::metadata::MetadataMap;

use super::Rlqs;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as WireAction,
};
use super::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use super::report::Usage;
use super::stream::StreamState;
use super::withdraw::withdraw;
use crate::server::App;
use crate::server::grpc::frames::{self, Inbound, Outbound, Unread};
use crate::server::grpc::{authorize, authorize_value};

/// The most RLQS streams an instance serves at once: each keeps what its
/// client reports (at most `MAX_BUCKETS_PER_STREAM` bucket ids of bounded
/// size), so their number is what bounds the memory they take.
const MAX_STREAMS: usize = 1_024;
/// The most buckets one report may carry.
const MAX_USAGES_PER_REPORT: usize = 1_000;
/// How often a stream looks for buckets to abandon when it hears nothing.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Answers a stream may have waiting to be sent, each encoded: an answer
/// is about the size of the report it answers, and Envoy reads each one
/// before its next report.
const OUTBOUND_QUEUE: usize = 4;

static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);

#[derive(Clone)]
pub struct RlqsService {
    pub(super) app: Arc<App>,
    pub(super) rlqs: Arc<Rlqs>,
}

/// Encoded answers, or the status a stream ends with.
type Answers = mpsc::Sender<Result<hyper::body::Bytes, Status>>;

impl RlqsService {
    /// Open a stream whose reports come from `inbound`: its answers, or the
    /// refusal it ends with at once.
    pub(super) fn open(
        &self,
        metadata: &MetadataMap,
        inbound: Inbound,
    ) -> Result<Outbound, Status> {
        authorize(&self.app, metadata)?;
        // Kept, and checked again at each report: a token revoked by a
        // reload ends the streams opened with it, not only the next ones.
        let authorization = metadata.get("authorization").cloned();
        let (answers, receiver) = mpsc::channel(OUTBOUND_QUEUE);
        tokio::spawn(self.clone().run(inbound, authorization, answers));
        Ok(Outbound::new(receiver))
    }

    /// Answer one stream until the client ends it, sends what cannot be
    /// answered (the stream ends with that error; others go on), goes, or
    /// sends nothing, or takes no answer, for the quiet timeout (Envoy
    /// reports every interval, and opens a new stream with its next
    /// report).
    async fn run(
        self,
        mut inbound: Inbound,
        authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
        answers: Answers,
    ) {
        let Some(_open) = self.rlqs.metrics.try_open(MAX_STREAMS) else {
            let refused = Status::resource_exhausted(format!(
                "this instance serves at most {MAX_STREAMS} RLQS streams at once"
            ));
            let _ = answers.send(Err(refused)).await;
            return;
        };
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let mut stream = StreamState::new(id, self.rlqs.buckets.clone());
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let quiet_timeout = self.app.guard.quiet_timeout();
        let mut heard_at = tokio::time::Instant::now();
        // Read under the bound in force when a report arrives: a reload
        // reaches the next report of every stream.
        let max_bytes = || self.rlqs.settings().bounds.report_bytes;
        loop {
            let answer = tokio::select! {
                message = inbound.next::<RateLimitQuotaUsageReports>(max_bytes) => match message {
                    Ok(Some(reports)) => {
                        heard_at = tokio::time::Instant::now();
                        let authorized = authorize_value(&self.app, authorization.as_ref());
                        match authorized {
                            Ok(()) => self.answer(&mut stream, &reports).await,
                            Err(refused) => Err(refused),
                        }
                    }
                    // The client closed its side, or the connection went:
                    // nobody is left to tell.
                    Ok(None) | Err(Unread::Gone(_)) => break,
                    Err(unread) => Err(refused(unread)),
                },
                _ = sweep.tick() => {
                    if heard_at.elapsed() >= quiet_timeout {
                        Err(Status::unavailable(format!(
                            "no usage report for {quiet_timeout:?}: stream closed"
                        )))
                    } else {
                        Ok(self.abandon(&mut stream).await)
                    }
                }
                () = answers.closed() => break,
            };
            let failed = answer.is_err();
            let send = match answer {
                Ok(actions) if actions.is_empty() => continue,
                Ok(bucket_action) => Ok(frames::encode(&RateLimitQuotaResponse { bucket_action })),
                Err(status) => Err(status),
            };
            // A client that takes no answer for the quiet timeout is gone
            // as much as one that sends nothing: waiting for room to answer
            // it held its stream, and its buckets' places, for good (past
            // the quiet timeout, and past a revoked token).
            let sent = tokio::time::timeout(quiet_timeout, answers.send(send)).await;
            if !matches!(sent, Ok(Ok(()))) || failed {
                break;
            }
        }
        // Its demand leaves every instance's shares now, not a demand
        // window later; the stream holds its place until it has.
        let ended = stream.forget_all();
        for (key, _) in &ended {
            self.rlqs.demands.forget(key, stream.id);
        }
        let demand = &self.rlqs.settings().demand;
        withdraw(
            self.app.limiter(),
            demand,
            ended.iter().map(|(key, added)| (key.as_str(), *added)),
        )
        .await;
    }

    /// The actions answering one report: an assignment for each bucket it
    /// names, and an abandon for each bucket gone unreported too long.
    async fn answer(
        &self,
        stream: &mut StreamState,
        reports: &RateLimitQuotaUsageReports,
    ) -> Result<Vec<BucketAction>, Status> {
        let settings = self.rlqs.settings();
        let domain = stream.domain(&reports.domain, settings.bounds.domain_bytes)?;
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
            .map(|(index, usage)| Usage::check(index, usage, &settings.bounds))
            .collect::<Result<_, _>>()?;
        self.rlqs.metrics.report();
        let mut actions = Vec::with_capacity(checked.len());
        for usage in &checked {
            let assignment = self.assign(stream, &settings, &domain, usage).await?;
            self.rlqs.metrics.assigned(assignment.strategy());
            actions.push(assignment.action(usage.bucket_id.clone()));
        }
        actions.extend(self.abandon(stream).await);
        Ok(actions)
    }

    /// Abandon actions for the buckets `stream` has stopped reporting.
    async fn abandon(&self, stream: &mut StreamState) -> Vec<BucketAction> {
        let now_ms = self.app.limiter().now_ms();
        let settings = self.rlqs.settings();
        let abandoned = stream.abandon(now_ms, settings.abandon_after_ms);
        if abandoned.is_empty() {
            return Vec::new();
        }
        self.rlqs.metrics.abandoned(abandoned.len());
        for (key, ..) in &abandoned {
            self.rlqs.demands.forget(key, stream.id);
        }
        let added = abandoned
            .iter()
            .map(|(key, _, added)| (key.as_str(), *added));
        withdraw(self.app.limiter(), &settings.demand, added).await;
        abandoned
            .into_iter()
            .map(|(_, bucket_id, _)| BucketAction {
                bucket_id: Some(bucket_id),
                bucket_action: Some(WireAction::AbandonAction(AbandonAction {})),
            })
            .collect()
    }
}

/// The status a stream ends with when its next report could not be read,
/// naming the bound or what was wrong.
fn refused(unread: Unread) -> Status {
    match unread {
        Unread::TooLarge { bytes, most } => Status::resource_exhausted(format!(
            "report: {bytes} bytes, more than rlqs.max_report_bytes ({most})"
        )),
        Unread::Compressed => {
            Status::invalid_argument("report: compressed, but this server accepts no compression")
        }
        Unread::Truncated => Status::invalid_argument("report: the stream ended inside a report"),
        Unread::Undecodable(error) => Status::invalid_argument(format!(
            "report: not a valid RateLimitQuotaUsageReports: {error}"
        )),
        Unread::Gone(status) => status,
    }
}
