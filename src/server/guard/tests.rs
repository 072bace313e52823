use super::*;
use crate::MemoryStore;
use crate::config::AuthConfig;
use crate::limiter::Limiter;
use crate::server::routes::Access;

const TOKEN: &str = "a-token-of-at-least-16-bytes";
const OTHER_TOKEN: &str = "another-token-of-16-bytes";

fn settings(max_connections: usize, tokens: &[&str], metrics_need_token: bool) -> ServerGuard {
    ServerGuard {
        max_connections,
        api_tokens: ApiTokens::new(tokens.iter().copied()).unwrap(),
        metrics_need_token,
        quiet_timeout: Duration::from_secs(3),
        ..ServerGuard::default()
    }
}

fn guard(settings: ServerGuard) -> Guard {
    Guard::new(settings, Arc::new(WatchedClock::new(SystemClock)))
}

fn request(authorization: Option<&str>) -> Request<()> {
    let mut request = Request::builder();
    if let Some(value) = authorization {
        request = request.header(AUTHORIZATION, value);
    }
    request.body(()).unwrap()
}

#[test]
fn the_cap_counts_places_and_gives_them_back() {
    let guard = guard(settings(2, &[], false));
    let first = guard.admit().expect("a place under the cap");
    let second = guard.admit().expect("a place under the cap");
    assert_eq!(guard.open_connections(), 2);
    assert!(guard.admit().is_none(), "past the cap");
    assert!(guard.admit().is_none(), "past the cap");
    assert_eq!(guard.refused_connections(), 2);
    assert_eq!(guard.open_connections(), 2);
    drop(first);
    assert_eq!(guard.open_connections(), 1);
    let third = guard.admit().expect("a place given back");
    assert_eq!(guard.open_connections(), 2);
    drop((second, third));
    assert_eq!(guard.open_connections(), 0);
    assert_eq!(guard.refused_connections(), 2);
}

#[test]
fn a_reload_changes_the_cap_and_the_tokens_but_not_the_quiet_timeout() {
    let guard = guard(settings(1, &[TOKEN], false));
    let _held = guard.admit().unwrap();
    assert!(guard.admit().is_none());
    assert_eq!(
        guard.token_refusal(Some(b"Bearer another-token-of-16-bytes")),
        Some("authorization: the bearer token is not valid")
    );

    let mut reloaded = settings(2, &[OTHER_TOKEN], true);
    reloaded.quiet_timeout = Duration::from_secs(10);
    guard.apply(&reloaded);
    assert!(guard.admit().is_some(), "the raised cap is in force");
    assert_eq!(
        guard.token_refusal(Some(b"Bearer another-token-of-16-bytes")),
        None
    );
    assert!(
        guard
            .token_refusal(Some(b"Bearer a-token-of-at-least-16-bytes"))
            .is_some(),
        "revoked"
    );
    assert!(guard.metrics_need_token());
    assert_eq!(guard.quiet_timeout(), Duration::from_secs(3));
}

#[test]
fn a_call_without_a_valid_token_is_refused_and_counted() {
    let guard = guard(settings(10, &[TOKEN], false));
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(guard.token_refusal(Some(bearer.as_bytes())), None);
    assert_eq!(
        guard.token_refusal(None),
        Some("authorization: required: send Authorization: Bearer <token>")
    );
    assert_eq!(
        guard.token_refusal(Some(b"Basic dXNlcjpwYXNz")),
        Some("authorization: required: send Authorization: Bearer <token>")
    );
    assert_eq!(
        guard.token_refusal(Some(b"Bearer not-the-token-at-all")),
        Some("authorization: the bearer token is not valid")
    );
    assert_eq!(guard.unauthorized.load(Ordering::Relaxed), 3);

    // With no tokens set, every call passes, uncounted.
    let open = super::Guard::new(settings(10, &[], true), guard.local_clock.clone());
    assert_eq!(open.token_refusal(None), None);
    assert_eq!(open.unauthorized.load(Ordering::Relaxed), 0);
}

#[test]
fn a_route_needs_a_token_as_its_access_says() {
    let metrics_open = guard(settings(10, &[TOKEN], false));
    let metrics_closed = guard(settings(10, &[TOKEN], true));
    let bearer = format!("Bearer {TOKEN}");
    for guard in [&metrics_open, &metrics_closed] {
        assert!(guard.refuse(&request(None), Access::Open).is_none());
        assert!(
            guard
                .refuse(&request(Some(&bearer)), Access::Token)
                .is_none()
        );
        let refused = guard
            .refuse(&request(None), Access::Token)
            .expect("a call without a token is refused");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            refused.headers()[WWW_AUTHENTICATE],
            "Bearer realm=\"slidegate\""
        );
    }
    assert!(!metrics_open.metrics_need_token());
    assert!(metrics_closed.metrics_need_token());
    let metrics = Access::TokenIfMetricsNeedIt;
    assert!(metrics_open.refuse(&request(None), metrics).is_none());
    assert!(metrics_closed.refuse(&request(None), metrics).is_some());
    assert!(
        metrics_closed
            .refuse(&request(Some(&bearer)), metrics)
            .is_none()
    );
}

#[test]
fn the_guards_figures_are_read_into_metrics() {
    let limiter = Limiter::builder(AnyStore::Memory(MemoryStore::with_capacity(512))).build();
    let app = App::new(limiter, [], AuthConfig::default()).with_guard(settings(1, &[TOKEN], false));
    let _held = app.guard.admit().unwrap();
    assert!(app.guard.admit().is_none());
    assert!(app.guard.token_refusal(None).is_some());
    let figures: Vec<(&str, bool, i64)> = snapshot(&app)
        .iter()
        .map(|figure| (figure.name, figure.counter, figure.value))
        .collect();
    assert_eq!(
        figures,
        [
            ("slidegate_connections_open", false, 1),
            ("slidegate_connections_refused", true, 1),
            ("slidegate_unauthorized", true, 1),
            ("slidegate_clock_backward_jumps", true, 0),
            ("slidegate_memory_evictions", true, 0),
            ("slidegate_memory_capacity", false, 512),
        ]
    );
}

#[test]
fn the_bearer_scheme_is_case_insensitive_and_needs_a_token() {
    assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
    assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
    assert_eq!(bearer_token(b"Bearer "), None);
    assert_eq!(bearer_token(b"Basic abc"), None);
    assert_eq!(bearer_token(b"Bear"), None);
}
