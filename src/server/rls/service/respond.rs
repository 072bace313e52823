//! The `ShouldRateLimit` response: each descriptor's status in request
//! order, its rule's metrics recorded, and the overall code (quota-mode
//! descriptors refuse only when all of them are over, as in
//! envoyproxy/ratelimit); and the descriptors that refused it, logged.

use super::super::metrics::Outcome;
use super::super::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use super::super::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use super::super::rules::Rule;
use super::{Answer, Plan};
use crate::limiter::Source;
use crate::server::App;
use crate::server::ops::Face;

/// The response, statuses in request order.
pub(super) fn respond(plans: &[Plan<'_>], answers: &[Option<Answer>]) -> RateLimitResponse {
    let mut over_limit = false;
    let mut quota_descriptors = 0;
    let mut quota_over = 0;
    let statuses = plans
        .iter()
        .zip(answers)
        .map(|(plan, answer)| match (plan, answer) {
            (Plan::Limited(limited), Some(answer)) => {
                let rule = limited.rule.rule();
                let allowed = answer.allowed();
                let near_cache =
                    matches!(answer, Answer::Decided(d) if d.source == Source::NearCache);
                let outcome = match (allowed, rule.shadow_mode) {
                    (true, _) => Outcome::WithinLimit,
                    (false, true) => Outcome::Shadow,
                    (false, false) => Outcome::OverLimit { near_cache },
                };
                limited.rule.metrics().record(limited.hits, outcome);
                if rule.quota_mode {
                    quota_descriptors += 1;
                    quota_over += usize::from(!allowed);
                } else if !allowed && !rule.shadow_mode {
                    over_limit = true;
                }
                status(rule, answer)
            }
            (Plan::Unlimited, _) => DescriptorStatus {
                code: Code::Ok.into(),
                limit_remaining: u32::MAX,
                ..DescriptorStatus::default()
            },
            _ => DescriptorStatus {
                code: Code::Ok.into(),
                ..DescriptorStatus::default()
            },
        })
        .collect();
    // As envoyproxy/ratelimit: quota-mode descriptors refuse the request
    // only when all of them are over their limit.
    if quota_descriptors > 0 && quota_over == quota_descriptors {
        over_limit = true;
    }
    RateLimitResponse {
        overall_code: if over_limit {
            Code::OverLimit
        } else {
            Code::Ok
        }
        .into(),
        statuses,
        ..RateLimitResponse::default()
    }
}

/// Each descriptor that refused the request into the refusal log
/// (`log.refusals_per_s`): the rule that refused (its path, domain first),
/// the descriptor's entries as `key=value,...`, and the decision, so that
/// "which limit refused this client" has an answer on this face too. Not
/// into `/v1/limited`, which lists the HTTP faces only.
pub(super) fn log_refusals(
    app: &App,
    request: &RateLimitRequest,
    plans: &[Plan<'_>],
    answers: &[Option<Answer>],
    response: &RateLimitResponse,
) {
    if response.overall_code() != Code::OverLimit {
        return;
    }
    let refused = plans
        .iter()
        .zip(answers)
        .zip(&response.statuses)
        .zip(&request.descriptors);
    for (((plan, answer), status), descriptor) in refused {
        let (Plan::Limited(limited), Some(answer)) = (plan, answer) else {
            continue;
        };
        if status.code() != Code::OverLimit {
            continue;
        }
        let entries: Vec<String> = descriptor
            .entries
            .iter()
            .map(|entry| format!("{}={}", entry.key, entry.value))
            .collect();
        let decision = match answer {
            Answer::Decided(decision) => Some(decision),
            Answer::Refused => None,
        };
        app.refused_logged(
            Face::Rls,
            &limited.rule.rule().path,
            &entries.join(","),
            decision,
        );
    }
}

fn status(rule: &Rule, answer: &Answer) -> DescriptorStatus {
    let current_limit = Some(RateLimit {
        name: rule.name.clone().unwrap_or_default(),
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit as i32,
    });
    let window_ms = rule.unit.ms();
    let (allowed, remaining, reset_ms) = match answer {
        Answer::Refused => (false, 0, window_ms),
        Answer::Decided(decision) => {
            let reset_ms = if decision.allowed {
                // Sliding windows never reset at once: the counts present
                // now have all left the window after one window and one
                // sub-bucket.
                decision.limits.first().map_or(window_ms, |state| {
                    let window = state.limit.window();
                    window.window_ms() + window.bucket_ms()
                })
            } else {
                // The exact wait until the same request would be admitted.
                decision.retry_after_ms.unwrap_or(window_ms)
            };
            let remaining = if decision.allowed {
                u32::try_from(decision.remaining()).unwrap_or(u32::MAX)
            } else {
                0
            };
            (decision.allowed, remaining, reset_ms)
        }
    };
    let code = if allowed || rule.shadow_mode {
        Code::Ok
    } else {
        Code::OverLimit
    };
    DescriptorStatus {
        code: code.into(),
        current_limit,
        limit_remaining: remaining,
        duration_until_reset: Some(prost_types::Duration {
            seconds: (reset_ms / 1000) as i64,
            nanos: ((reset_ms % 1000) * 1_000_000) as i32,
        }),
        quota: None,
    }
}
