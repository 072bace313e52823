//! One bucket's assignment for one report, in steps:
//! 1. its rule (`rules`); no rule: the `unmatched` blanket rule;
//! 2. its allowed requests counted into the bucket's window, and its demand
//!    (allowed + denied) into the shared demand window, through the limiter;
//! 3. the assignment (`shares`) from what is free and the client's part of
//!    the demand; a failing store gives what the failure mode says.

use tonic::Status;

use super::metrics::Strategy;
use super::pb::envoy::service::rate_limit_quota::v3::BucketId;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use super::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    BucketAction as WireAction, QuotaAssignmentAction,
};
use super::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy as WireStrategy};
use super::pb::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use super::report::Usage;
use super::rules::{DEMAND_WINDOW, Settings, counter_key};
use super::service::RlqsService;
use super::shares::{self, Assignment, Figures};
use super::stream::StreamState;
use super::withdraw::withdraw;
use crate::config::Unmatched;
use crate::limiter::{CheckError, Decision, FailureMode, Source};
use crate::policy::Policy;

impl RlqsService {
    /// One bucket's assignment for one report.
    pub(super) async fn assign(
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
                if let Some(added) = stream.forget(&key) {
                    self.rlqs.demands.forget(&key, stream.id);
                    withdraw(
                        self.app.limiter(),
                        &settings.demand,
                        [(key.as_str(), added)],
                    )
                    .await;
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
        // What this stream takes back from the fleet's demand when it
        // stops reporting the bucket.
        if let (Ok(fleet), Some(added)) = (&fleet, stream.demand_of(&key)) {
            added.record(&settings.demand, fleet, demanded);
        }
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
pub(super) enum Sent {
    Blanket(BlanketRule, u64),
    Assigned(Assignment, u64),
}

impl Sent {
    pub(super) fn strategy(&self) -> Strategy {
        match self {
            Sent::Blanket(BlanketRule::AllowAll, _) => Strategy::AllowAll,
            Sent::Blanket(BlanketRule::DenyAll, _) => Strategy::DenyAll,
            Sent::Assigned(..) => Strategy::TokenBucket,
        }
    }

    pub(super) fn action(&self, bucket_id: BucketId) -> BucketAction {
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
