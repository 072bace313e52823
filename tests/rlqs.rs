//! Envoy RLQS end to end: the real gRPC server on port-0 listeners over the
//! shared limiter on a real memcached, played against by clients that
//! behave as Envoy's rate-limit-quota filter does (tests/rlqs/envoy.rs).
//!
//! Time: the fleet runs on a manual clock shared by the servers' limiters
//! and the clients, moved in 50 ms steps, so a minute of traffic at the
//! issue's figures (4 clients demanding 2.7 x a limit of 600 per 10 s,
//! reports every second) takes a second or two in a debug build on a busy
//! machine, and the windows are the issue's real 10 s. Figures are printed
//! as `FIGURE ...` lines (`cargo test --test rlqs -- --nocapture`).

mod common;
#[path = "rlqs/envoy.rs"]
mod envoy;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::in_process;
use envoy::{Enforced, FakeEnvoy, Labels, Poisson, labels};
use slidegate::config::{AuthConfig, Config, Overrides, RlqsConfig, ServerGuard};
use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use slidegate::server::{self, App, rlqs};
use slidegate::{AnyStore, Clock, FailureMode, Limiter, ManualClock, MemcachedStore};
use tokio::sync::oneshot;

const LIMIT: usize = 600;
const WINDOW_MS: u64 = 10_000;
const INTERVAL_MS: u64 = 1_000;
const STEP_MS: u64 = 50;

const RLQS: &str = r#"
[rlqs]
assignment_ttl = "10s"
abandon_after = "5s"
unmatched = "allow"

[[rlqs.buckets]]
domain = "envoy"
match = { name = "api", tenant = "*" }
limit = 600
window = "10s"
precision = 10

[[rlqs.buckets]]
match = { name = "closed" }
limit = 1
window = "1m"
"#;

fn rlqs_config(text: &str) -> RlqsConfig {
    Config::resolve(
        Some((Path::new("slidegate.toml"), text)),
        &Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"))
    .rlqs
}

struct Instance {
    addr: SocketAddr,
    app: Arc<App>,
    _stop: oneshot::Sender<()>,
}

async fn instance(
    store: AnyStore,
    clock: &ManualClock,
    mode: FailureMode,
    guard: ServerGuard,
) -> Instance {
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        // Generous: the machine is shared; the failure tests kill memcached.
        .timeout(Duration::from_secs(2))
        .failure_mode(mode)
        .build();
    let app = Arc::new(
        App::new(limiter, [], AuthConfig::default())
            .with_guard(guard)
            .with_rlqs(&rlqs_config(RLQS)),
    );
    let served = in_process::serve(rlqs::serve, app.clone()).await;
    Instance {
        addr: served.addr,
        app,
        _stop: served.stop,
    }
}

/// An instance on the shared memcached, failing open, no token.
async fn plain_instance(clock: &ManualClock) -> Instance {
    instance(
        memcached().await,
        clock,
        FailureMode::Allow,
        ServerGuard::default(),
    )
    .await
}

async fn memcached() -> AnyStore {
    AnyStore::Memcached(common::memcached_store().await)
}

/// A clock mid-day, on a window boundary: runs start where they expect.
fn clock() -> ManualClock {
    ManualClock::new(common::today_ms() + 3_600_000)
}

/// One simulated Envoy: its stream, its demand, what it admitted.
struct Client {
    envoy: FakeEnvoy,
    demand: Poisson,
    /// When in each interval it reports (Envoys' timers are not aligned).
    offset_ms: u64,
    admitted: Vec<u64>,
}

impl Client {
    async fn new(addr: SocketAddr, rate: f64, seed: u64, offset_ms: u64, start_ms: u64) -> Client {
        Client {
            envoy: FakeEnvoy::connect(addr, "envoy").await,
            demand: Poisson::new(rate, seed, start_ms),
            offset_ms,
            admitted: Vec::new(),
        }
    }
}

fn api() -> Labels {
    labels(&[("name", "api"), ("tenant", "t1")])
}

/// Run `clients` from `from_ms` to `to_ms` on the shared clock: each
/// step, every client's requests, then the reports due.
async fn run(clients: &mut [Client], clock: &ManualClock, from_ms: u64, to_ms: u64) {
    let bucket = api();
    let mut now = from_ms;
    while now < to_ms {
        now += STEP_MS;
        for client in clients.iter_mut() {
            for at in client.demand.until(now) {
                clock.set(at);
                if client.envoy.request(&bucket, at).await {
                    client.admitted.push(at);
                }
            }
            if now % INTERVAL_MS == client.offset_ms {
                clock.set(now);
                client.envoy.report_all(now).await;
            }
        }
    }
}

/// The most requests admitted in any window of `window_ms`, over times
/// from `from_ms` on.
fn most_in_any_window(clients: &[Client], from_ms: u64, window_ms: u64) -> usize {
    let mut times: Vec<u64> = clients
        .iter()
        .flat_map(|client| client.admitted.iter().copied())
        .filter(|&at| at >= from_ms)
        .collect();
    times.sort_unstable();
    let mut most = 0;
    let mut first = 0;
    for last in 0..times.len() {
        while times[last] - times[first] >= window_ms {
            first += 1;
        }
        most = most.max(last - first + 1);
    }
    most
}

fn admitted_between(client: &Client, from_ms: u64, to_ms: u64) -> usize {
    client
        .admitted
        .iter()
        .filter(|&&at| at >= from_ms && at < to_ms)
        .count()
}

/// Four clients, each a quarter of 2.7 x the limit.
async fn fleet(addrs: &[SocketAddr], start: u64) -> Vec<Client> {
    let rate = 2.7 * LIMIT as f64 / (WINDOW_MS / 1000) as f64 / 4.0;
    let mut clients = Vec::new();
    for index in 0..4u64 {
        let addr = addrs[index as usize % addrs.len()];
        clients.push(Client::new(addr, rate, index + 1, index * 250, start).await);
    }
    clients
}

#[tokio::test]
async fn a_fleet_at_2_7_times_the_limit_admits_the_limit_in_equal_shares() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    let mut clients = fleet(&[server.addr], start).await;
    run(&mut clients, &clock, start, start + 60_000).await;

    let most = most_in_any_window(&clients, start, WINDOW_MS);
    let ratio = most as f64 / LIMIT as f64;
    eprintln!(
        "FIGURE fleet: most admitted in any 10 s window {most} (limit {LIMIT}, {ratio:.3} x)"
    );
    assert!((0.8..=1.1).contains(&ratio), "most in a window: {most}");

    let shares: Vec<usize> = clients
        .iter()
        .map(|client| admitted_between(client, start + 10_000, start + 60_000))
        .collect();
    let (low, high) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
    eprintln!(
        "FIGURE fleet: admitted per client over 10-60 s {shares:?} (max/min {:.3})",
        *high as f64 / *low as f64
    );
    assert!(
        *high as f64 <= *low as f64 * 1.25,
        "equal demand, shares {shares:?}"
    );
}

#[tokio::test]
async fn one_busy_client_takes_what_three_idle_ones_leave() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    let mut clients = fleet(&[server.addr], start).await;
    run(&mut clients, &clock, start, start + 30_000).await;

    // Three go idle (they still report, with nothing); one alone asks 2.7 x.
    let switch = start + 30_000;
    let busy_rate = 2.7 * LIMIT as f64 / (WINDOW_MS / 1000) as f64;
    clients[0].demand.set_rate(busy_rate, switch);
    for client in &mut clients[1..] {
        client.demand.set_rate(0.0, switch);
    }
    let mut moved_after_ms = None;
    let mut now = switch;
    while now < start + 60_000 {
        run(&mut clients, &clock, now, now + INTERVAL_MS).await;
        now += INTERVAL_MS;
        let rate = match clients[0].envoy.enforced(&api()) {
            Some(Enforced::TokenBucket(_, per_fill, _)) => f64::from(per_fill),
            _ => 0.0,
        };
        // 75 % of the whole limit's rate: the idle ones' shares have moved.
        if moved_after_ms.is_none() && rate >= 0.75 * LIMIT as f64 / 10.0 {
            moved_after_ms = Some(now - switch);
        }
    }
    let idle: usize = clients[1..]
        .iter()
        .map(|client| admitted_between(client, start + 40_000, start + 60_000))
        .sum();
    let busy = admitted_between(&clients[0], start + 40_000, start + 60_000);
    let left = 2 * LIMIT - idle;
    eprintln!(
        "FIGURE idle: over 40-60 s the busy client admitted {busy} of the {left} the idle ones left ({:.3}); its rate reached 75 % of the limit {moved_after_ms:?} ms after the switch",
        busy as f64 / left as f64
    );
    assert!(
        busy as f64 >= 0.75 * left as f64,
        "busy {busy}, left {left}"
    );
    let moved = moved_after_ms.expect("the idle shares moved");
    assert!(
        moved <= WINDOW_MS + 2 * INTERVAL_MS,
        "moved after {moved} ms"
    );
}

#[tokio::test]
async fn two_instances_on_one_memcached_share_one_count() {
    let clock = clock();
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = MemcachedStore::connect(&options).await.unwrap();
        instances.push(
            instance(
                AnyStore::Memcached(store),
                &clock,
                FailureMode::Allow,
                ServerGuard::default(),
            )
            .await,
        );
    }
    let start = clock.now_ms();
    let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
    let mut clients = fleet(&addrs, start).await;
    run(&mut clients, &clock, start, start + 40_000).await;
    let most = most_in_any_window(&clients, start, WINDOW_MS);
    eprintln!("FIGURE two instances: most admitted in any 10 s window {most} (limit {LIMIT})");
    assert!(
        (0.8..=1.1).contains(&(most as f64 / LIMIT as f64)),
        "most {most}"
    );
}

#[tokio::test]
async fn a_full_window_denies_then_allows_again_and_a_reconnected_client_is_served() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    // Envoys that admitted a whole window before their first assignment
    // (their no-assignment behaviour allows) report it: the window is full.
    let (reports, mut answers) = envoy::open(server.addr, None).await.unwrap();
    let usages = vec![envoy::usage(&api(), LIMIT as u64, 0, 0)];
    let full = RateLimitQuotaUsageReports {
        domain: "envoy".into(),
        bucket_quota_usages: usages,
    };
    reports.send(full).await.unwrap();
    envoy::next(&mut answers).await.unwrap().unwrap();
    // One client asking 5 x the limit.
    let mut clients = vec![Client::new(server.addr, 300.0, 7, 0, start).await];
    let (mut denied_at, mut allowed_again_at) = (None, None);
    let mut now = start;
    while now < start + 30_000 && allowed_again_at.is_none() {
        run(&mut clients, &clock, now, now + INTERVAL_MS).await;
        now += INTERVAL_MS;
        match clients[0].envoy.enforced(&api()) {
            Some(Enforced::DenyAll) if denied_at.is_none() => denied_at = Some(now),
            Some(Enforced::TokenBucket(..)) if denied_at.is_some() => allowed_again_at = Some(now),
            _ => {}
        }
    }
    let denied_at = denied_at.expect("a full window denies");
    let reopened = allowed_again_at.expect("the window frees up") - denied_at;
    eprintln!(
        "FIGURE full window: denied {} ms after it filled, allowed again {reopened} ms later",
        denied_at - start
    );
    assert!(
        reopened <= WINDOW_MS + 2 * INTERVAL_MS,
        "allowed again after {reopened} ms"
    );

    // Reconnect: a new stream gets an assignment in its first answer, and
    // the count the old stream made still holds.
    clients[0].envoy = FakeEnvoy::connect(server.addr, "envoy").await;
    let resumed = now;
    run(&mut clients, &clock, now, now + 20_000).await;
    assert!(
        matches!(
            clients[0].envoy.enforced(&api()),
            Some(Enforced::TokenBucket(..) | Enforced::DenyAll)
        ),
        "assigned again after reconnecting"
    );
    let most = most_in_any_window(&clients, start, WINDOW_MS);
    eprintln!(
        "FIGURE reconnect: most in any 10 s window {most}, reconnected at {} ms",
        resumed - start
    );
    assert!(most as f64 <= 1.1 * LIMIT as f64, "most {most}");
}

#[tokio::test]
async fn a_bucket_left_unreported_is_abandoned() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let now = clock.now_ms();
    let other = labels(&[("name", "api"), ("tenant", "t2")]);
    // Both reported first; then only `api`: `other` goes quiet on the stream.
    let (reports, mut answers) = envoy::open(server.addr, None).await.unwrap();
    let mut abandoned = false;
    for second in 0..8u64 {
        let at = now + second * 1_000;
        clock.set(at);
        let usages = vec![envoy::usage(&api(), 1, 0, 1)];
        let usages = if second == 0 {
            vec![envoy::usage(&api(), 1, 0, 0), envoy::usage(&other, 1, 0, 0)]
        } else {
            usages
        };
        reports
            .send(RateLimitQuotaUsageReports {
                domain: "envoy".into(),
                bucket_quota_usages: usages,
            })
            .await
            .unwrap();
        let answer = envoy::next(&mut answers).await.unwrap().unwrap();
        abandoned |= answer.bucket_action.iter().any(|action| {
            let is_other = action
                .bucket_id
                .as_ref()
                .map(|id| id.bucket.get("tenant").map(String::as_str))
                == Some(Some("t2"));
            is_other && matches!(action.bucket_action, Some(envoy::Action::AbandonAction(_)))
        });
        if abandoned {
            assert!(
                second >= 5,
                "abandoned after {second} s, before abandon_after (5 s)"
            );
            break;
        }
    }
    assert!(abandoned, "the unreported bucket is abandoned");
    let page = metrics_page(&server.app).await;
    assert!(page.contains("slidegate_rlqs_abandons_total 1"), "{page}");
    assert!(page.contains("slidegate_rlqs_streams 1"), "{page}");
    assert!(
        page.contains("slidegate_rlqs_assignments_total{strategy=\"token_bucket\"}"),
        "{page}"
    );
}

async fn metrics_page(app: &Arc<App>) -> String {
    let addr = in_process::serve_forever(server::serve, app.clone()).await;
    common::http::get(addr, "/metrics").await.body
}

fn reports(domain: &str, usages: Vec<envoy::Usage>) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.into(),
        bucket_quota_usages: usages,
    }
}

/// The error a stream ends with after `sent`.
async fn error_after(addr: SocketAddr, sent: Vec<RateLimitQuotaUsageReports>) -> tonic::Status {
    let (sender, mut answers) = envoy::open(addr, None).await.unwrap();
    for message in sent {
        sender.send(message).await.unwrap();
    }
    loop {
        match envoy::next(&mut answers).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => return status,
        }
    }
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field_and_other_streams_go_on() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let mut good = FakeEnvoy::connect(server.addr, "envoy").await;
    let now = clock.now_ms();
    assert!(good.request(&api(), now).await);

    let mut no_elapsed = envoy::usage(&api(), 1, 0, 0);
    no_elapsed.time_elapsed = None;
    let mut no_id = envoy::usage(&api(), 1, 0, 0);
    no_id.bucket_id = None;
    let cases = [
        (
            vec![reports("", vec![envoy::usage(&api(), 1, 0, 0)])],
            "domain:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&Labels::new(), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports(
                "envoy",
                vec![envoy::usage(&labels(&[("name", "")]), 1, 0, 0)],
            )],
            "bucket_quota_usages[0].bucket_id.bucket:",
        ),
        (
            vec![reports("envoy", vec![no_elapsed])],
            "bucket_quota_usages[0].time_elapsed:",
        ),
        (
            vec![reports("envoy", vec![no_id])],
            "bucket_quota_usages[0].bucket_id:",
        ),
        (vec![reports("envoy", vec![])], "bucket_quota_usages:"),
        (
            vec![
                reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]),
                reports("other", vec![envoy::usage(&api(), 1, 0, 0)]),
            ],
            "domain:",
        ),
    ];
    for (sent, field) in cases {
        let status = error_after(server.addr, sent).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().starts_with(field), "{field}: {status:?}");
    }
    // The good stream is still served, and a later message may leave the
    // domain empty.
    clock.set(now + 1_000);
    good.report_all(now + 1_000).await;
    assert!(matches!(
        good.enforced(&api()),
        Some(Enforced::TokenBucket(..))
    ));
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    sender
        .send(reports("", vec![envoy::usage(&api(), 1, 0, 1)]))
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(envoy::next(&mut answers).await.unwrap().is_some());
    }
}

#[tokio::test]
async fn unmatched_buckets_get_the_blanket_rule_and_first_answers_always_carry_a_ttl() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let mut envoy = FakeEnvoy::connect(server.addr, "envoy").await;
    let now = clock.now_ms();
    let web = labels(&[("name", "web")]);
    assert!(envoy.request(&web, now).await);
    assert_eq!(envoy.enforced(&web), Some(Enforced::AllowAll));
    // A first report (time_elapsed 0) of a matched bucket: a token bucket
    // with tokens_per_fill and a TTL of whole seconds, at least 1.
    let (sender, mut answers) = envoy::open(server.addr, None).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    let answer = envoy::next(&mut answers).await.unwrap().unwrap();
    let Some(envoy::Action::QuotaAssignmentAction(assignment)) =
        &answer.bucket_action[0].bucket_action
    else {
        panic!("{answer:?}");
    };
    let ttl = assignment.assignment_time_to_live.unwrap();
    assert!(ttl.seconds >= 1 && ttl.nanos == 0, "{ttl:?}");
    let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
    let Some(envoy::Strategy::TokenBucket(bucket)) = strategy else {
        panic!("{answer:?}");
    };
    assert!(
        bucket.tokens_per_fill.unwrap_or(0) >= 1 && bucket.max_tokens >= 1,
        "{bucket:?}"
    );
    assert_eq!(bucket.fill_interval.unwrap().seconds, 1);
}

#[tokio::test]
async fn a_stream_needs_a_token_when_tokens_are_set_and_a_quiet_one_is_closed() {
    let clock = clock();
    let token = "rlqs-test-token-0123456789";
    let guard = ServerGuard {
        api_tokens: slidegate::config::ApiTokens::new([token]).unwrap(),
        quiet_timeout: Duration::from_secs(1),
        ..ServerGuard::default()
    };
    let server = instance(memcached().await, &clock, FailureMode::Allow, guard).await;
    let refused = match envoy::open(server.addr, None).await {
        Ok((_sender, mut answers)) => envoy::next(&mut answers).await.unwrap_err(),
        Err(status) => status,
    };
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    let (sender, mut answers) = envoy::open(server.addr, Some(token)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
    // Nothing more: closed after the quiet timeout (1 s here), within 10 s.
    let closed = envoy::next(&mut answers).await.unwrap_err();
    assert_eq!(closed.code(), tonic::Code::Unavailable, "{closed:?}");
    assert!(closed.message().contains("no usage report"), "{closed:?}");
}

/// A token revoked by a reload is refused on a stream opened with it, at
/// its next report: the reload reaches streams already open, not only the
/// next ones, as it reaches RLS and HTTP calls.
#[tokio::test]
async fn a_revoked_token_ends_an_open_stream_at_its_next_report() {
    let clock = clock();
    let (kept, revoked) = ("rlqs-kept-token-0123456789", "rlqs-revoked-token-0123456");
    let guard = ServerGuard {
        api_tokens: slidegate::config::ApiTokens::new([kept, revoked]).unwrap(),
        ..ServerGuard::default()
    };
    let server = instance(memcached().await, &clock, FailureMode::Allow, guard).await;
    let (sender, mut answers) = envoy::open(server.addr, Some(revoked)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());

    let reloaded = Config::resolve(
        Some((
            Path::new("slidegate.toml"),
            &format!("[server]\napi_tokens = [\"{kept}\"]\n{RLQS}"),
        )),
        &Overrides::default(),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    server.app.apply_live(&reloaded);
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 1)]))
        .await
        .unwrap();
    let refused = envoy::next(&mut answers).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");

    // The kept token still opens and is answered.
    let (sender, mut answers) = envoy::open(server.addr, Some(kept)).await.unwrap();
    sender
        .send(reports("envoy", vec![envoy::usage(&api(), 1, 0, 0)]))
        .await
        .unwrap();
    assert!(envoy::next(&mut answers).await.unwrap().is_some());
}

#[tokio::test]
async fn a_failing_store_gives_what_the_failure_mode_says() {
    let mut memcached = common::Memcached::start();
    let options = slidegate::MemcachedOptions {
        timeout: Duration::from_millis(300),
        ..common::memcached_options(vec![memcached.addr()])
    };
    let clock = clock();
    let mut instances = Vec::new();
    for mode in [FailureMode::Allow, FailureMode::Deny, FailureMode::Local] {
        let store = AnyStore::Memcached(MemcachedStore::connect(&options).await.unwrap());
        instances.push((
            mode,
            instance(store, &clock, mode, ServerGuard::default()).await,
        ));
    }
    memcached.kill();
    for (mode, server) in &instances {
        let mut envoy = FakeEnvoy::connect(server.addr, "envoy").await;
        envoy.request(&api(), clock.now_ms()).await;
        let enforced = envoy.enforced(&api()).unwrap();
        let as_the_mode_says = match mode {
            FailureMode::Allow => enforced == Enforced::AllowAll,
            FailureMode::Deny => enforced == Enforced::DenyAll,
            // This instance's own counts decide.
            FailureMode::Local => matches!(enforced, Enforced::TokenBucket(..)),
        };
        assert!(as_the_mode_says, "{mode:?}: {enforced:?}");
    }
}

#[test]
fn the_example_envoy_configuration_and_its_slidegate_side_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy");
    let toml = std::fs::read_to_string(root.join("rlqs.toml")).unwrap();
    let config = rlqs_config(&toml);
    let yaml = std::fs::read_to_string(root.join("rlqs.yaml")).unwrap();
    let envoy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let text = serde_yaml_ng::to_string(&envoy).unwrap();
    let rule = &config.buckets[0];
    assert!(text.contains(&format!("domain: {}", rule.domain.as_deref().unwrap())));
    assert!(text.contains("envoy.filters.http.rate_limit_quota"));
    assert!(text.contains(&format!("port_value: {}", config.listen.unwrap().port())));
    for label in rule.matches.keys() {
        assert!(text.contains(&format!("{label}:")), "{label}");
    }
}
