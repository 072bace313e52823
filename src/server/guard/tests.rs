use super::*;
use crate::MemoryStore;
use crate::config::AuthConfig;
use crate::limiter::Limiter;
use crate::server::App;
use crate::server::routes::Access;
use crate::store::AnyStore;

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

/// A guard, and the tokens of the configuration it is built from.
fn guard_of(settings: ServerGuard) -> (Guard, TokenSettings) {
    let tokens = TokenSettings::of(&settings);
    (Guard::new(&settings), tokens)
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
    let (guard, _) = guard_of(settings(2, &[], false));
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

/// The cap changes on a reload, the quiet timeout does not. (The tokens
/// are swapped with the policies, in `Live`: `tests/reload`.)
#[test]
fn a_reload_changes_the_cap_but_not_the_quiet_timeout() {
    let (guard, _) = guard_of(settings(1, &[TOKEN], false));
    let _held = guard.admit().unwrap();
    assert!(guard.admit().is_none());

    let mut reloaded = settings(2, &[OTHER_TOKEN], true);
    reloaded.quiet_timeout = Duration::from_secs(10);
    guard.apply(&reloaded);
    assert!(guard.admit().is_some(), "the raised cap is in force");
    assert_eq!(guard.quiet_timeout(), Duration::from_secs(3));
}

/// An app's tokens are those of its live configuration: a reload's new
/// tokens are in force from the next call, and a call holding the
/// configuration it started under keeps its tokens and its policies.
#[test]
fn the_tokens_are_swapped_with_the_policies() {
    let limiter = Limiter::builder(AnyStore::Memory(MemoryStore::with_capacity(512))).build();
    let app = App::new(limiter, [], AuthConfig::default()).with_guard(settings(1, &[TOKEN], false));
    let bearer = format!("Bearer {TOKEN}");
    let before = app.live();
    let config = crate::config::Config::resolve(
        Some((
            std::path::Path::new("slidegate.toml"),
            &format!(
                "[server]\napi_tokens = [\"{OTHER_TOKEN}\"]\n\
                 [policies.api]\nlimits = [{{ limit = 5, window = \"1s\" }}]\n"
            ),
        )),
        &crate::config::Overrides::default(),
    )
    .unwrap();
    app.apply_live(&config);
    let after = app.live();
    assert!(
        app.guard
            .token_refusal(&after.tokens, Some(bearer.as_bytes()))
            .is_some(),
        "revoked"
    );
    assert!(after.policies.contains_key("api"));
    assert_eq!(
        app.guard
            .token_refusal(&before.tokens, Some(bearer.as_bytes())),
        None
    );
    assert!(before.policies.is_empty());
}

#[test]
fn a_call_without_a_valid_token_is_refused_and_counted() {
    let (guard, tokens) = guard_of(settings(10, &[TOKEN], false));
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(guard.token_refusal(&tokens, Some(bearer.as_bytes())), None);
    assert_eq!(
        guard.token_refusal(&tokens, None),
        Some("authorization: required: send Authorization: Bearer <token>")
    );
    assert_eq!(
        guard.token_refusal(&tokens, Some(b"Basic dXNlcjpwYXNz")),
        Some("authorization: required: send Authorization: Bearer <token>")
    );
    assert_eq!(
        guard.token_refusal(&tokens, Some(b"Bearer not-the-token-at-all")),
        Some("authorization: the bearer token is not valid")
    );
    assert_eq!(guard.unauthorized.get(), 3);

    // With no tokens set, every call passes, uncounted.
    let (open, no_tokens) = guard_of(settings(10, &[], true));
    assert_eq!(open.token_refusal(&no_tokens, None), None);
    assert_eq!(open.unauthorized.get(), 0);
}

#[test]
fn a_route_needs_a_token_as_its_access_says() {
    let metrics_open = guard_of(settings(10, &[TOKEN], false));
    let metrics_closed = guard_of(settings(10, &[TOKEN], true));
    let bearer = format!("Bearer {TOKEN}");
    for (guard, tokens) in [&metrics_open, &metrics_closed] {
        assert!(guard.refuse(tokens, &request(None), Access::Open).is_none());
        assert!(
            guard
                .refuse(tokens, &request(Some(&bearer)), Access::Token)
                .is_none()
        );
        let refused = guard
            .refuse(tokens, &request(None), Access::Token)
            .expect("a call without a token is refused");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            refused.headers()[WWW_AUTHENTICATE],
            "Bearer realm=\"slidegate\""
        );
    }
    let metrics = Access::TokenIfMetricsNeedIt;
    let refuse = |(guard, tokens): &(Guard, TokenSettings), request| {
        guard.refuse(tokens, &request, metrics).is_some()
    };
    assert!(!refuse(&metrics_open, request(None)));
    assert!(refuse(&metrics_closed, request(None)));
    assert!(!refuse(&metrics_closed, request(Some(&bearer))));
}

#[test]
fn the_guards_figures_are_read_into_metrics() {
    let limiter = Limiter::builder(AnyStore::Memory(MemoryStore::with_capacity(512))).build();
    let app = App::new(limiter, [], AuthConfig::default()).with_guard(settings(1, &[TOKEN], false));
    let _held = app.guard.admit().unwrap();
    assert!(app.guard.admit().is_none());
    assert!(app.guard.token_refusal(&app.live().tokens, None).is_some());
    let text = crate::server::metrics::exposition(&app).unwrap();
    let mut figures: Vec<&str> = text
        .lines()
        .filter(|line| {
            [
                "slidegate_connections_",
                "slidegate_unauthorized",
                "slidegate_clock_",
                "slidegate_memory_",
            ]
            .iter()
            .any(|prefix| line.starts_with(prefix))
        })
        .collect();
    figures.sort_unstable();
    assert_eq!(
        figures,
        [
            "slidegate_clock_backward_jumps_total 0",
            "slidegate_connections_open 1",
            "slidegate_connections_refused_total 1",
            "slidegate_memory_capacity 512",
            "slidegate_memory_evictions_total 0",
            "slidegate_unauthorized_total 1",
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
