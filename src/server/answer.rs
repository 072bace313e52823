//! A decision's JSON body, written straight into its buffer.
//!
//! Every answer of `/v1/check`, `/v1/peek`, `/v1/report` and forward-auth
//! has this one shape, of numbers, booleans and fixed names only (no
//! client string is echoed), so nothing needs escaping. serde's pass over
//! it (a map serializer per object, a formatter call per token) was a
//! visible share of a hot reject's instructions
//! (`bench/http_instructions.sh`); this writes the same bytes for a
//! fraction of that. The test below holds it to serde's output.

use hyper::body::Bytes;

use crate::limiter::Decision;

/// `{"allowed":..,"remaining":..,"retry_after_ms":..,"limits":[..],"source":..}`,
/// and `"shadow":true,"would_allow":..` for a shadow policy.
pub(crate) fn decision_json(decision: &Decision) -> Bytes {
    // One limit's answer takes about 100 bytes: one allocation, no regrowth.
    let mut out = Vec::with_capacity(128 + 112 * decision.limits.len());
    out.extend_from_slice(b"{\"allowed\":");
    push_bool(&mut out, decision.allowed);
    out.extend_from_slice(b",\"remaining\":");
    push_u64(&mut out, decision.remaining());
    out.extend_from_slice(b",\"retry_after_ms\":");
    match decision.retry_after_ms {
        Some(wait) => push_u64(&mut out, wait),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"limits\":[");
    for (index, state) in decision.limits.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        let window = state.limit.window();
        out.extend_from_slice(b"{\"limit\":");
        push_u64(&mut out, state.limit.limit());
        out.extend_from_slice(b",\"window_ms\":");
        push_u64(&mut out, window.window_ms());
        out.extend_from_slice(b",\"precision\":");
        push_u64(&mut out, u64::from(window.precision()));
        out.extend_from_slice(b",\"estimate\":");
        // JSON's own number form for a float (`1.0`, `0.5`, `1e21`), as
        // serde writes it; a float that is not finite is `null`.
        let _ = serde_json::to_writer(&mut out, &state.estimate.as_f64());
        out.extend_from_slice(b",\"remaining\":");
        push_u64(&mut out, state.remaining);
        out.push(b'}');
    }
    out.extend_from_slice(b"],\"source\":\"");
    // Source names are plain lowercase words.
    out.extend_from_slice(decision.source.as_str().as_bytes());
    out.push(b'"');
    if decision.shadow {
        out.extend_from_slice(b",\"shadow\":true,\"would_allow\":");
        push_bool(&mut out, decision.would_allow);
    }
    out.push(b'}');
    Bytes::from(out)
}

fn push_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::policy::{Limit, Policy};
    use crate::source::Source;
    use crate::window::{self, Counting, LimitState};

    /// The body as serde writes it: what the API answered before the
    /// writer above, and what it must go on answering byte for byte.
    #[derive(Serialize)]
    struct Reference {
        allowed: bool,
        remaining: u64,
        retry_after_ms: Option<u64>,
        limits: Vec<ReferenceLimit>,
        source: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        shadow: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        would_allow: Option<bool>,
    }

    #[derive(Serialize)]
    struct ReferenceLimit {
        limit: u64,
        window_ms: u64,
        precision: u32,
        estimate: f64,
        remaining: u64,
    }

    fn reference(decision: &Decision) -> String {
        let limits = decision
            .limits
            .iter()
            .map(|state: &LimitState| ReferenceLimit {
                limit: state.limit.limit(),
                window_ms: state.limit.window().window_ms(),
                precision: state.limit.window().precision(),
                estimate: state.estimate.as_f64(),
                remaining: state.remaining,
            })
            .collect();
        serde_json::to_string(&Reference {
            allowed: decision.allowed,
            remaining: decision.remaining(),
            retry_after_ms: decision.retry_after_ms,
            limits,
            source: decision.source.as_str(),
            shadow: decision.shadow.then_some(true),
            would_allow: decision.shadow.then_some(decision.would_allow),
        })
        .unwrap()
    }

    #[test]
    fn a_decision_is_written_as_serde_writes_it() {
        let one = Policy::new("one", vec![Limit::new(10, 60_000, 1).unwrap()]).unwrap();
        let two = Policy::new(
            "two",
            vec![
                Limit::new(3, 1_000, 1).unwrap(),
                Limit::new(crate::policy::MAX_AMOUNT, 3_600_000, 60).unwrap(),
            ],
        )
        .unwrap();
        let mut written = 0;
        for policy in [&one, &two] {
            let buckets = policy.limits().len();
            for counts in [0u64, 1, 3, 7, 10, 11, 1_000_000] {
                for now_ms in [0u64, 1, 333, 999, 59_999, 1_700_000_123_457] {
                    for cost in [1u64, 2, 100] {
                        let counts: Vec<Vec<u64>> = policy
                            .limits()
                            .iter()
                            .map(|limit| {
                                let mut bucket =
                                    vec![counts / 3; limit.window().precision() as usize];
                                bucket.push(counts);
                                bucket
                            })
                            .collect();
                        assert_eq!(counts.len(), buckets);
                        let verdict = window::decide(
                            policy.limits(),
                            &counts,
                            now_ms,
                            cost,
                            Counting::IfAdmitted,
                        );
                        for (source, shadow) in [
                            (Source::Store, false),
                            (Source::NearCache, false),
                            (Source::Fallback, true),
                        ] {
                            let decision = Decision {
                                allowed: verdict.allowed || shadow,
                                counted: verdict.counted,
                                retry_after_ms: verdict.retry_after_ms,
                                limits: verdict.limits.clone(),
                                source,
                                shadow,
                                would_allow: verdict.allowed,
                                decided_at_ms: verdict.decided_at_ms,
                            };
                            let body = decision_json(&decision);
                            assert_eq!(std::str::from_utf8(&body).unwrap(), reference(&decision));
                            written += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(written, 2 * 7 * 6 * 3 * 3);
    }
}
