//! The JSON API's shapes: requests in (validated, with errors that name the
//! field), and the JSON answers other than a decision's (see `answer`).

use std::borrow::Cow;
use std::collections::HashMap;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{HeaderMap, Response, StatusCode};
use serde::Deserialize;

use super::flat_call;
use crate::headers::PolicyHeaders;
use crate::policy::{LimitSpec, MAX_LIMITS, Policy};

pub(crate) type Body = Full<Bytes>;

/// A string of a request body: borrowed from the body unless it has
/// escapes, so the common key costs no allocation.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A request body of check, peek and report, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a JSON object")]
struct CallBody<'a> {
    #[serde(borrow)]
    key: Option<Text<'a>>,
    #[serde(borrow)]
    policy: Option<Text<'a>>,
    cost: Option<u64>,
    limits: Option<Vec<LimitSpec>>,
}

/// A policy with what its answers repeat: named policies compute this once,
/// at start; inline limits, per request.
#[derive(Clone)]
pub(crate) struct Served {
    pub policy: Policy,
    pub headers: PolicyHeaders,
}

impl Served {
    pub fn new(policy: Policy) -> Served {
        Served {
            headers: PolicyHeaders::of(&policy),
            policy,
        }
    }
}

/// The named policies in force, by name. Every request looks its policy up
/// here: hashed with foldhash, not SipHash (the names are the
/// configuration's, so a client cannot fill the map with colliding ones).
pub(crate) type NamedPolicies = HashMap<String, Served, foldhash::fast::RandomState>;

/// A call: whose key, which limits, what cost. The key and cost are checked
/// by the limiter, which every caller goes through.
pub(crate) struct Call<'a> {
    pub key: Cow<'a, str>,
    pub served: Cow<'a, Served>,
    pub cost: u64,
}

/// Parse and validate a body; the error is the 400 message, naming the
/// field. Inline limits are held to `max_counters`, the bound of the
/// configuration `policies` came from.
pub(crate) fn parse_call<'a>(
    body: &'a [u8],
    policies: &'a NamedPolicies,
    max_counters: usize,
) -> Result<Call<'a>, String> {
    // serde would also read a struct from an array, by position: refuse
    // anything but an object before it gets the chance.
    match body.iter().find(|byte| !byte.is_ascii_whitespace()) {
        None => return Err("body: is empty; send a JSON object".to_owned()),
        Some(b'{') => {}
        Some(_) => return Err("body: must be a JSON object".to_owned()),
    }
    let call = fields(body)?;
    let key = call.key.ok_or_else(|| "key: is required".to_owned())?.0;
    let cost = call.cost.unwrap_or(1);
    let served = match (call.policy, call.limits) {
        (Some(_), Some(_)) => {
            return Err("policy: give a policy or inline limits, not both".to_owned());
        }
        (None, None) => return Err("policy: is required (or inline limits)".to_owned()),
        (Some(name), None) => Cow::Borrowed(named_policy(&name.0, policies)?),
        (None, Some(specs)) => Cow::Owned(Served::new(inline_policy(&specs, max_counters)?)),
    };
    Ok(Call { key, served, cost })
}

/// The fields of a call body: read flat when it has the common shape
/// (see `flat_call`), else by serde.
fn fields(body: &[u8]) -> Result<CallBody<'_>, String> {
    if let Some(flat) = flat_call::read(body) {
        return Ok(CallBody {
            key: flat.key.map(|key| Text(Cow::Borrowed(key))),
            policy: flat.policy.map(|name| Text(Cow::Borrowed(name))),
            cost: flat.cost,
            limits: None,
        });
    }
    // The plain parse is the fast path; tracking the path of the field at
    // fault costs on every call, so it runs only to explain a failure.
    // (`from_slice` also refuses anything after the object.)
    serde_json::from_slice(body).map_err(|error| explain(body, error))
}

/// Whether the flat reading of `body`, when there is one, is what serde
/// reads: the tests and the request-body fuzz target hold it to this.
#[cfg(any(test, feature = "memcached"))]
pub(crate) fn flat_reading_agrees(body: &[u8]) -> bool {
    let Some(flat) = flat_call::read(body) else {
        return true;
    };
    let text = |field: &Option<Text>| field.as_ref().map(|text| text.0.to_string());
    match serde_json::from_slice::<CallBody>(body) {
        Ok(call) => {
            call.limits.is_none()
                && call.cost == flat.cost
                && text(&call.key).as_deref() == flat.key
                && text(&call.policy).as_deref() == flat.policy
        }
        Err(_) => false,
    }
}

/// The 400 message for a body the plain parse refused, naming the field.
fn explain(body: &[u8], plain: serde_json::Error) -> String {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let traced: Result<CallBody, _> = serde_path_to_error::deserialize(&mut deserializer);
    let error = match traced {
        Err(error) => error,
        // Only trailing bytes can fail the plain parse and not this one.
        Ok(_) => return format!("body: malformed JSON: {plain}"),
    };
    let path = error.path().to_string();
    let inner = error.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        format!("body: malformed JSON: {inner}")
    } else if path == "." {
        format!("body: {inner}")
    } else {
        format!("{path}: {inner}")
    }
}

pub(crate) fn named_policy<'a>(
    name: &str,
    policies: &'a NamedPolicies,
) -> Result<&'a Served, String> {
    policies.get(name).ok_or_else(|| {
        let mut known: Vec<&str> = policies.keys().map(String::as_str).collect();
        known.sort_unstable();
        format!(
            "policy: no policy named {name:?} is configured (known: {})",
            known.join(", ")
        )
    })
}

fn inline_policy(specs: &[LimitSpec], max_counters: usize) -> Result<Policy, String> {
    if specs.is_empty() {
        return Err("limits: must not be empty".to_owned());
    }
    if specs.len() > MAX_LIMITS {
        return Err(format!(
            "limits: at most {MAX_LIMITS} limits, got {}",
            specs.len()
        ));
    }
    let limits = specs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            spec.to_limit()
                .map_err(|error| format!("limits[{index}].{}: {}", error.field, error.message))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let policy = Policy::inline(limits).map_err(|error| format!("limits: {error}"))?;
    policy
        .within(max_counters)
        .map_err(|error| format!("limits: {error}"))?;
    Ok(policy)
}

/// A JSON answer (an empty body has no content type: there is no JSON in
/// it); `headers` adds what else it carries.
pub(crate) fn respond(
    status: StatusCode,
    body: Bytes,
    headers: impl FnOnce(&mut HeaderMap),
) -> Response<Body> {
    let has_body = !body.is_empty();
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let map = response.headers_mut();
    if has_body {
        map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    headers(map);
    response
}

pub(crate) fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    respond(status, Bytes::from(value.to_string()), |_| {})
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    json(status, serde_json::json!({ "error": message.into() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DEFAULT_MAX_COUNTERS, Limit};

    fn policies() -> NamedPolicies {
        let api = Policy::new("api", vec![Limit::new(10, 1_000, 1).unwrap()]).unwrap();
        [("api".to_owned(), Served::new(api))].into_iter().collect()
    }

    fn error_of(body: &str) -> String {
        match parse_call(body.as_bytes(), &policies(), DEFAULT_MAX_COUNTERS) {
            Ok(_) => panic!("{body} was accepted"),
            Err(message) => message,
        }
    }

    #[test]
    fn good_calls_parse() {
        let policies = policies();
        let call = parse_call(
            br#"{"key": "client-42", "policy": "api", "cost": 2}"#,
            &policies,
            DEFAULT_MAX_COUNTERS,
        )
        .unwrap();
        assert_eq!(
            (call.key.as_ref(), call.served.policy.scope(), call.cost),
            ("client-42", "api", 2)
        );
        let call = parse_call(
            br#"{"key": "k", "limits": [{"limit": 10, "window": "1s"}, {"limit": 3000, "window_ms": 600000, "precision": 10}]}"#,
            &policies,
            DEFAULT_MAX_COUNTERS,
        )
        .unwrap();
        assert_eq!(
            (
                call.served.policy.scope(),
                call.served.policy.limits().len(),
                call.cost
            ),
            ("inline", 2, 1)
        );
    }

    #[test]
    fn every_bad_input_names_its_field() {
        let cases = [
            ("{", "body: malformed JSON"),
            (
                r#"{"key": "k", "policy": "api"} trailing"#,
                "body: malformed JSON",
            ),
            ("", "body: is empty"),
            (" \n", "body: is empty"),
            ("[1]", "body: must be a JSON object"),
            ("null", "body: must be a JSON object"),
            ("\"k\"", "body: must be a JSON object"),
            (r#"{"policy": "api"}"#, "key: is required"),
            (
                r#"{"key": 5, "policy": "api"}"#,
                "key: invalid type: integer",
            ),
            (r#"{"key": "k"}"#, "policy: is required"),
            (
                r#"{"key": "k", "policy": "nope"}"#,
                "policy: no policy named \"nope\"",
            ),
            (
                r#"{"key": "k", "policy": "api", "cost": -1}"#,
                "cost: invalid value: integer `-1`",
            ),
            (
                r#"{"key": "k", "policy": "api", "cost": 1.5}"#,
                "cost: invalid type: floating point",
            ),
            (
                r#"{"key": "k", "policy": "api", "cost": "1"}"#,
                "cost: invalid type: string",
            ),
            (
                r#"{"key": "k", "policy": "api", "costs": 1}"#,
                "costs: unknown field `costs`",
            ),
            (
                r#"{"key": "k", "policy": "api", "limits": []}"#,
                "policy: give a policy or inline limits, not both",
            ),
            (r#"{"key": "k", "limits": []}"#, "limits: must not be empty"),
            (
                r#"{"key": "k", "limits": [{"limit": 0, "window": "1s"}]}"#,
                "limits[0].limit: must be an integer",
            ),
            (
                r#"{"key": "k", "limits": [{"window": "1s"}]}"#,
                "limits[0].limit: is required",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1}]}"#,
                "limits[0].window: is required",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "fast"}]}"#,
                "limits[0].window: \"fast\" is not a duration",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "1s", "window_ms": 1000}]}"#,
                "limits[0].window: give window or window_ms",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window_ms": 0}]}"#,
                "limits[0].window_ms: must be from 1ms",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "1s", "precision": 7}]}"#,
                "limits[0].precision: 7 does not divide",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "1s", "precision": 0}]}"#,
                "limits[0].precision: must be from 1",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "1s", "burst": 2}]}"#,
                "limits[0].burst: unknown field `burst`",
            ),
            (
                r#"{"key": "k", "limits": [{"limit": 1, "window": "1s"}, {"limit": 2, "window": "1s"}]}"#,
                "limits: limits 0 and 1 have the same window",
            ),
        ];
        for (body, expected) in cases {
            let message = error_of(body);
            assert!(
                message.starts_with(expected) || message.contains(expected),
                "{body}: {message}"
            );
        }
        let too_many = format!(
            r#"{{"key": "k", "limits": [{}]}}"#,
            vec![r#"{"limit": 1, "window": "1s"}"#; 17].join(",")
        );
        assert_eq!(error_of(&too_many), "limits: at most 16 limits, got 17");
    }
}
