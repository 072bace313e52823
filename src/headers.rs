//! The rate-limit headers of an answer (IETF httpapi RateLimit header
//! fields draft), the same for the HTTP service and the tower layer:
//! `RateLimit-Policy: "name";q=10;w=1`, `RateLimit: "name";r=7;t=42`, and
//! `Retry-After` (whole seconds, rounded up) on a refusal that can pass.

use std::fmt::Write as _;

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};

use crate::limiter::Decision;
use crate::policy::{DisplayMs, Policy};

/// What the rate-limit headers of a policy repeat on every answer: each
/// limit's name, and the whole `RateLimit-Policy` value.
#[derive(Clone)]
pub(crate) struct PolicyHeaders {
    names: Vec<String>,
    quota: HeaderValue,
}

impl PolicyHeaders {
    pub(crate) fn of(policy: &Policy) -> PolicyHeaders {
        let names: Vec<String> = (0..policy.limits().len())
            .map(|index| limit_name(policy, index))
            .collect();
        let mut quota = String::new();
        for (name, limit) in names.iter().zip(policy.limits()) {
            let window_secs = seconds_rounded_up(limit.window().window_ms()).max(1);
            if !quota.is_empty() {
                quota.push_str(", ");
            }
            let _ = write!(quota, "\"{name}\";q={};w={window_secs}", limit.limit());
        }
        PolicyHeaders {
            names,
            // Built from numbers and plain names only.
            quota: HeaderValue::from_str(&quota).unwrap_or(HeaderValue::from_static("")),
        }
    }
}

/// The name of a policy's limit in the rate-limit headers: the policy's
/// name alone when it has one limit, else suffixed with the window (and the
/// precision when above 1), which is unique within a policy.
fn limit_name(policy: &Policy, index: usize) -> String {
    let mut name = policy.scope().to_owned();
    if policy.limits().len() > 1 {
        let window = policy.limits()[index].window();
        let _ = write!(name, "-{}", DisplayMs(window.window_ms()));
        if window.precision() > 1 {
            let _ = write!(name, "-p{}", window.precision());
        }
    }
    name
}

fn seconds_rounded_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// `RateLimit-Policy` and `RateLimit` (IETF httpapi draft), and
/// `Retry-After` when the request was refused and can pass later.
pub(crate) fn rate_limit_headers(
    decision: &Decision,
    policy: &PolicyHeaders,
    headers: &mut HeaderMap,
) {
    // A shadow policy is invisible to clients: headers saying r=0 would
    // make well-behaved ones slow down before the limit is enforced.
    if decision.shadow {
        return;
    }
    let mut state = String::with_capacity(32 * decision.limits.len());
    for (name, limit) in policy.names.iter().zip(&decision.limits) {
        if !state.is_empty() {
            state.push_str(", ");
        }
        // Admitted: when the quota resets, the counts now in the window
        // having left it (the draft's `t`). Refused: when one more unit
        // passes, which is what a refused client waits for.
        let reset_ms = if decision.allowed {
            limit.empty_after_ms
        } else {
            limit.next_unit_ms
        };
        // Pushed piece by piece: `write!` and its formatter were most of
        // what this function cost, on every answer.
        let mut number = itoa::Buffer::new();
        state.push('"');
        state.push_str(name);
        state.push_str("\";r=");
        state.push_str(number.format(limit.remaining));
        state.push_str(";t=");
        state.push_str(number.format(seconds_rounded_up(reset_ms)));
    }
    headers.insert(RATELIMIT_POLICY, policy.quota.clone());
    // Every value here is built from numbers and plain names.
    if let Ok(value) = HeaderValue::from_str(&state) {
        headers.insert(RATELIMIT, value);
    }
    if !decision.allowed
        && let Some(wait) = decision.retry_after_ms
    {
        headers.insert(RETRY_AFTER, number_value(seconds_rounded_up(wait)));
    }
}

/// Every number below 1,000 in three digits, `000` to `999`, one after
/// the other.
const THREE_DIGITS: &str = {
    const TABLE: [u8; 3000] = {
        let mut table = [0; 3000];
        let mut n = 0;
        while n < 1000 {
            table[3 * n] = b'0' + (n / 100) as u8;
            table[3 * n + 1] = b'0' + (n / 10 % 10) as u8;
            table[3 * n + 2] = b'0' + (n % 10) as u8;
            n += 1;
        }
        table
    };
    match std::str::from_utf8(&TABLE) {
        Ok(digits) => digits,
        Err(_) => panic!("digits are ASCII"),
    }
};

/// `n` as a header value. Below 1,000 (a `Retry-After` of under 17
/// minutes, nearly every one) it is a slice of [`THREE_DIGITS`]: http's
/// own conversion allocates, and frees when the answer is sent.
fn number_value(n: u64) -> HeaderValue {
    let start = match n {
        0..10 => 2,
        10..100 => 1,
        100..1000 => 0,
        _ => return HeaderValue::from(n),
    };
    let at = 3 * n as usize;
    HeaderValue::from_static(&THREE_DIGITS[at + start..at + 3])
}

const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limit;
    use crate::source::Source;
    use crate::window::{self, Counting};

    /// What the limiter answers for `cost` at `now_ms` given the counters.
    fn decision(policy: &Policy, counts: &[Vec<u64>], now_ms: u64, cost: u64) -> Decision {
        let verdict = window::decide(policy.limits(), counts, now_ms, cost, Counting::IfAdmitted);
        Decision {
            allowed: verdict.allowed,
            counted: verdict.counted,
            retry_after_ms: verdict.retry_after_ms,
            limits: verdict.limits,
            source: Source::Store,
            shadow: false,
            would_allow: verdict.allowed,
            decided_at_ms: verdict.decided_at_ms,
        }
    }

    fn headers_of(policy: &Policy, decision: &Decision) -> Vec<(String, String)> {
        let mut headers = HeaderMap::new();
        rate_limit_headers(decision, &PolicyHeaders::of(policy), &mut headers);
        let mut pairs: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        pairs.sort();
        pairs
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    /// 10 per second, and 3000 per 10 minutes in 10 sub-buckets.
    fn two_limits() -> Policy {
        Policy::new(
            "api",
            vec![
                Limit::new(10, 1_000, 1).unwrap(),
                Limit::new(3000, 600_000, 10).unwrap(),
            ],
        )
        .unwrap()
    }

    /// An instant on a 10-minute boundary.
    const ALIGNED: u64 = 7 * 600_000;

    #[test]
    fn an_admitted_answer_says_each_limit_and_when_its_counts_leave() {
        let policy = two_limits();
        let admitted = decision(&policy, &[vec![0, 3], vec![0; 11]], ALIGNED, 1);
        assert!(admitted.allowed);
        // 4 counted this second leave when the next second ends (2 s); the
        // one in the 10 minutes, when the window after its sub-bucket ends.
        assert_eq!(
            headers_of(&policy, &admitted),
            pairs(&[
                (
                    "ratelimit",
                    r#""api-1s";r=6;t=2, "api-10m-p10";r=2999;t=660"#
                ),
                (
                    "ratelimit-policy",
                    r#""api-1s";q=10;w=1, "api-10m-p10";q=3000;w=600"#
                ),
            ])
        );
    }

    #[test]
    fn a_refusal_says_when_one_unit_passes_and_when_this_request_can() {
        let policy = two_limits();
        // The second is full, 250 ms into it: one more unit fits once the
        // 10 have decayed to 9 (850 ms from now, t=1, rounded up); this
        // request of 3 once they have decayed to 7 (1050 ms: 2 s).
        let refused = decision(&policy, &[vec![0, 10], vec![0; 11]], ALIGNED + 250, 3);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after_ms, Some(1_050));
        assert_eq!(
            headers_of(&policy, &refused),
            pairs(&[
                ("ratelimit", r#""api-1s";r=0;t=1, "api-10m-p10";r=3000;t=0"#),
                (
                    "ratelimit-policy",
                    r#""api-1s";q=10;w=1, "api-10m-p10";q=3000;w=600"#
                ),
                ("retry-after", "2"),
            ])
        );
    }

    #[test]
    fn a_request_that_can_never_pass_gets_no_retry_after() {
        let policy = Policy::new("api", vec![Limit::new(5, 60_000, 1).unwrap()]).unwrap();
        let refused = decision(&policy, &[vec![0, 0]], ALIGNED, 6);
        assert!(!refused.allowed && refused.retry_after_ms.is_none());
        // One limit: named by the policy alone.
        assert_eq!(
            headers_of(&policy, &refused),
            pairs(&[
                ("ratelimit", r#""api";r=5;t=0"#),
                ("ratelimit-policy", r#""api";q=5;w=60"#),
            ])
        );
    }

    #[test]
    fn a_shadow_policy_sends_no_headers() {
        let policy = two_limits();
        let mut refused = decision(&policy, &[vec![0, 10], vec![0; 11]], ALIGNED, 1);
        refused.shadow = true;
        refused.allowed = true;
        assert_eq!(headers_of(&policy, &refused), []);
    }

    #[test]
    fn numbers_are_written_as_http_writes_them() {
        let edges = (0..=19).flat_map(|power| {
            let at = 10u64.pow(power);
            [at - 1, at, at + 1]
        });
        for n in (0..2_000).chain(edges).chain([u64::MAX - 1, u64::MAX]) {
            assert_eq!(number_value(n), HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn header_names_are_unique_within_a_policy() {
        let policy = Policy::new(
            "api",
            vec![
                Limit::new(10, 1_000, 1).unwrap(),
                Limit::new(3000, 600_000, 10).unwrap(),
                Limit::new(3000, 600_000, 1).unwrap(),
            ],
        )
        .unwrap();
        let names: Vec<String> = (0..3).map(|index| limit_name(&policy, index)).collect();
        assert_eq!(names, ["api-1s", "api-10m-p10", "api-10m"]);
    }
}
