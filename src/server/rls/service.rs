//! `ShouldRateLimit`: a request's descriptors become rules (see [`rules`]),
//! the rules become limiter items, and the limiter decides them together.
//!
//! Which descriptors can refuse the request, and in which order they are
//! decided:
//! 1. descriptors with `hits_addend: 0` (check only) and rules of
//!    `requests_per_unit: 0` are read, never counted;
//! 2. the binding descriptors (not shadow, not quota mode) are decided as one
//!    [`Limiter::check_all`]: counted in all, or, if any is over its limit or
//!    a step-1 descriptor already refused the request, in none;
//! 3. shadow and quota-mode descriptors are then checked one by one, or only
//!    read when the request was refused.
//!
//! [`rules`]: super::rules

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Rls;
use super::metrics::{RuleMetrics, ServiceMetrics};
use super::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use super::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::rules::{Action, Rule, RuleSet, Unit};
use crate::join::join_all;
use crate::limiter::{CheckError, Decision, Item, Limiter};
use crate::policy::{MAX_AMOUNT, Policy};
use crate::server::App;
use crate::store::AnyStore;

// A descriptor's entries, checked, and the key of its counters.
mod descriptor;
// Whether quota-mode descriptors refuse a request, read first.
mod quota;
mod respond;

use self::descriptor::{counter_key, entries};
use self::respond::{log_refusals, respond};

/// The gRPC service over the shared limiter and the loaded rules.
#[derive(Clone)]
pub struct RlsService {
    pub(super) app: Arc<App>,
    pub(super) rls: Arc<Rls>,
}

/// One descriptor, resolved.
enum Plan<'a> {
    /// No rule (or an unknown domain, or a replaced rule): OK, no limit.
    NoLimit,
    Unlimited,
    Limited(Limited<'a>),
}

struct Limited<'a> {
    rule: RuleRef<'a>,
    /// The limiter key: a digest of the domain and the descriptor's entries.
    key: String,
    /// `hits_addend`; 0 checks without counting.
    hits: u64,
}

/// A configured rule, or a request's own limit override.
enum RuleRef<'a> {
    Config(&'a Rule),
    Override(Box<Rule>, &'a RuleMetrics),
}

impl RuleRef<'_> {
    fn rule(&self) -> &Rule {
        match self {
            RuleRef::Config(rule) => rule,
            RuleRef::Override(rule, _) => rule,
        }
    }

    fn metrics(&self) -> &RuleMetrics {
        match self {
            RuleRef::Config(rule) => &rule.metrics,
            RuleRef::Override(_, metrics) => metrics,
        }
    }
}

/// How one limited descriptor came out.
enum Answer {
    Decided(Decision),
    /// `requests_per_unit: 0`: refused without reading anything.
    Refused,
}

impl Answer {
    fn allowed(&self) -> bool {
        match self {
            Answer::Decided(decision) => decision.allowed,
            Answer::Refused => false,
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let metrics = &self.rls.metrics;
        crate::server::grpc::authorize(&self.app, request.metadata())?;
        match self.decide(request.get_ref()).await {
            Ok(response) => {
                ServiceMetrics::bump(&metrics.requests);
                Ok(Response::new(response))
            }
            Err(status) => {
                if status.code() == tonic::Code::InvalidArgument {
                    ServiceMetrics::bump(&metrics.invalid);
                } else {
                    ServiceMetrics::bump(&metrics.store_unavailable);
                }
                Err(status)
            }
        }
    }
}

impl RlsService {
    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("domain: must not be empty"));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument("descriptors: must not be empty"));
        }
        // Each descriptor is a key's batch and, when refused, its rollback:
        // bounded, as an HTTP body is.
        let max = self.app.envoy.rls_max_descriptors;
        if request.descriptors.len() > max {
            return Err(Status::invalid_argument(format!(
                "descriptors: at most {max} descriptors, got {} (rls.max_descriptors)",
                request.descriptors.len()
            )));
        }
        // Taken once: a reload in the meantime leaves this request decided
        // under the rules it started with, all of them.
        let rules = self.rls.rules();
        let plans = self.plan(&rules, request)?;
        let answers = self.answer(&plans).await?;
        let response = respond(&plans, &answers);
        log_refusals(&self.app, request, &plans, &answers, &response);
        Ok(response)
    }

    /// Resolve every descriptor to its rule, then drop the replaced rules.
    fn plan<'a>(
        &'a self,
        rules: &'a RuleSet,
        request: &RateLimitRequest,
    ) -> Result<Vec<Plan<'a>>, Status> {
        let metrics = &self.rls.metrics;
        let known_domain = rules.has_domain(&request.domain);
        let mut plans = Vec::with_capacity(request.descriptors.len());
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let entries = entries(index, descriptor)?;
            let hits = match descriptor.hits_addend {
                Some(hits) => hits,
                None => u64::from(request.hits_addend.max(1)),
            };
            if hits > MAX_AMOUNT {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{index}].hits_addend: must be at most {MAX_AMOUNT}, got {hits}"
                )));
            }
            if !known_domain {
                ServiceMetrics::bump(&metrics.unknown_domain);
                plans.push(Plan::NoLimit);
                continue;
            }
            let (rule, shared) = match &descriptor.limit {
                Some(limit) => {
                    let unit = Unit::from_wire(limit.unit).ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "descriptors[{index}].limit.unit: {} is not a known unit",
                            limit.unit
                        ))
                    })?;
                    let rule = Rule::override_of(&request.domain, limit.requests_per_unit, unit)
                        .map_err(|message| {
                            Status::invalid_argument(format!(
                                "descriptors[{index}].limit: {message}"
                            ))
                        })?;
                    let metrics = rules.override_metrics(&request.domain);
                    (RuleRef::Override(Box::new(rule), metrics), Vec::new())
                }
                None => match rules.find(&request.domain, &entries) {
                    Some(found) => (RuleRef::Config(found.rule), found.shared),
                    None => {
                        ServiceMetrics::bump(&metrics.no_rule);
                        plans.push(Plan::NoLimit);
                        continue;
                    }
                },
            };
            if matches!(rule.rule().action, Action::Unlimited) {
                plans.push(Plan::Unlimited);
                continue;
            }
            let key = counter_key(&request.domain, &entries, &shared);
            plans.push(Plan::Limited(Limited { rule, key, hits }));
        }
        // As envoyproxy/ratelimit: a named rule that any matched rule
        // replaces neither decides nor counts.
        let replaced: Vec<String> = plans
            .iter()
            .filter_map(|plan| match plan {
                Plan::Limited(limited) => Some(limited.rule.rule().replaces.iter()),
                _ => None,
            })
            .flatten()
            .cloned()
            .collect();
        if !replaced.is_empty() {
            for plan in &mut plans {
                if let Plan::Limited(limited) = plan
                    && let Some(name) = &limited.rule.rule().name
                    && replaced.contains(name)
                {
                    *plan = Plan::NoLimit;
                }
            }
        }
        Ok(plans)
    }

    /// Decide the limited descriptors, in the order the module doc gives.
    async fn answer(&self, plans: &[Plan<'_>]) -> Result<Vec<Option<Answer>>, Status> {
        let limiter = &self.app.limiter;
        let mut answers: Vec<Option<Answer>> = plans.iter().map(|_| None).collect();
        let limited = |index: usize| match &plans[index] {
            Plan::Limited(limited) => Some(limited),
            _ => None,
        };
        let advisory = |limited: &Limited| {
            let rule = limited.rule.rule();
            rule.shadow_mode || rule.quota_mode
        };

        // 1. Read-only descriptors.
        let mut refused = false;
        for (index, answer_slot) in answers.iter_mut().enumerate() {
            let Some(limited) = limited(index) else {
                continue;
            };
            let answer = match &limited.rule.rule().action {
                Action::Refuse => Answer::Refused,
                Action::Limit(policy) if limited.hits == 0 => {
                    Answer::Decided(peek(limiter, &limited.key, policy, 1).await?)
                }
                _ => continue,
            };
            refused |= !answer.allowed() && !advisory(limited);
            *answer_slot = Some(answer);
        }

        // 1b. Quota-mode descriptors refuse the request only when all of
        // them are over (envoyproxy/ratelimit): read before anything is
        // counted, so that a request they refuse counts in none of its
        // descriptors. Read-only: one admitted below is counted in step 3.
        // (A concurrent request that takes their last room between this
        // read and step 3 can still leave this one refused and counted
        // elsewhere; that errs towards refusing.)
        if !refused {
            refused = self.quota_refuses(plans, &mut answers).await?;
        }

        // 2. The binding descriptors, together.
        let binding: Vec<(usize, &Limited, &Policy)> = (0..plans.len())
            .filter(|&index| answers[index].is_none())
            .filter_map(|index| {
                let limited = limited(index)?;
                match &limited.rule.rule().action {
                    Action::Limit(policy) if !advisory(limited) => Some((index, limited, policy)),
                    _ => None,
                }
            })
            .collect();
        if refused {
            // Read together: one pipelined exchange, not a round trip (and
            // a timeout) per descriptor.
            let reads = binding
                .iter()
                .map(|&(_, limited, policy)| peek(limiter, &limited.key, policy, limited.hits))
                .collect();
            for (&(index, _, _), decision) in binding.iter().zip(join_all(reads).await) {
                answers[index] = Some(Answer::Decided(decision?));
            }
        } else if !binding.is_empty() {
            let items: Vec<Item> = binding
                .iter()
                .map(|&(_, limited, policy)| Item {
                    key: &limited.key,
                    policy,
                    cost: limited.hits,
                })
                .collect();
            let decisions = limiter.check_all(&items).await.map_err(check_error)?;
            for (&(index, _, _), decision) in binding.iter().zip(decisions) {
                refused |= !decision.allowed;
                answers[index] = Some(Answer::Decided(decision));
            }
        }

        // 3. Shadow and quota-mode descriptors, each on its own, all at
        // once (one pipelined exchange).
        let advisory: Vec<(usize, &Limited, &Policy)> = (0..plans.len())
            .filter(|&index| answers[index].is_none())
            .filter_map(|index| {
                let limited = limited(index)?;
                match &limited.rule.rule().action {
                    Action::Limit(policy) => Some((index, limited, policy)),
                    _ => None,
                }
            })
            .collect();
        let decisions = advisory
            .iter()
            .map(|&(_, limited, policy)| async move {
                if refused {
                    return peek(limiter, &limited.key, policy, limited.hits).await;
                }
                let item = Item {
                    key: &limited.key,
                    policy,
                    cost: limited.hits,
                };
                let mut decisions = limiter.check_all(&[item]).await.map_err(check_error)?;
                decisions
                    .pop()
                    .ok_or_else(|| Status::internal("no decision"))
            })
            .collect();
        for (&(index, _, _), decision) in advisory.iter().zip(join_all(decisions).await) {
            answers[index] = Some(Answer::Decided(decision?));
        }
        Ok(answers)
    }
}

pub(super) async fn peek(
    limiter: &Limiter<AnyStore>,
    key: &str,
    policy: &Policy,
    cost: u64,
) -> Result<Decision, Status> {
    limiter.peek(key, policy, cost).await.map_err(check_error)
}

fn check_error(error: CheckError) -> Status {
    match error {
        CheckError::StoreUnavailable(error) => {
            Status::unavailable(format!("rate-limit store unavailable: {error}"))
        }
        other => Status::invalid_argument(other.to_string()),
    }
}
