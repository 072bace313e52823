//! Envoy RLS end to end with tonic's client: the real gRPC server on a port-0
//! listener over the shared limiter, on the in-memory store and on a real
//! memcached. The semantics are envoyproxy/ratelimit's (src/service/ratelimit.go,
//! src/config/config_impl.go); where slidegate differs on purpose, the test
//! says so.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::in_process;
use slidegate::config::{ApiTokens, AuthConfig, ServerGuard};
use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse, rate_limit_response::Code,
    rate_limit_service_client::RateLimitServiceClient,
};
use slidegate::server::rls::{self, Rls, RuleSet};
use slidegate::server::{self, App};
use slidegate::{AnyStore, Limiter, ManualClock, MemoryStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domain: test
descriptors:
  # key + value before key alone
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 10, name: vip}
  # a value without rate_limit whitelists it
  - key: client
    value: trusted
  - key: path
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned_rule}
  - key: unban
    rate_limit:
      unit: minute
      requests_per_unit: 2
      replaces: [{name: banned_rule}]
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: five
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: prefix
    value: "files*"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: every
    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 30, precision: 3}
"#;

struct TestRls {
    addr: SocketAddr,
    app: Arc<App>,
    clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for TestRls {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl TestRls {
    async fn start(store: AnyStore, config: &str) -> TestRls {
        TestRls::start_guarded(store, config, ServerGuard::default()).await
    }

    async fn start_guarded(store: AnyStore, config: &str, guard: ServerGuard) -> TestRls {
        // Mid-minute, so no window boundary falls inside a test.
        let clock = ManualClock::new(common::today_ms() + 30_000);
        let limiter = Limiter::builder(store)
            .clock(clock.clone())
            .timeout(Duration::from_millis(500))
            .build();
        let mut rules = RuleSet::default();
        rules.add_file("test.yaml", config).unwrap();
        let app = Arc::new(
            App::new(limiter, [], AuthConfig::default())
                .with_guard(guard)
                .with_rls(Rls::new(rules)),
        );
        let served = in_process::serve(rls::serve, app.clone()).await;
        TestRls {
            addr: served.addr,
            app,
            clock,
            stop: Some(served.stop),
        }
    }

    async fn client(&self) -> RateLimitServiceClient<Channel> {
        client(self.addr).await
    }
}

/// A tonic client on its own HTTP/2 connection.
pub async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    RateLimitServiceClient::new(channel)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// The codes of one request: overall, then per descriptor.
async fn codes(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> (Code, Vec<Code>) {
    let response = ask(client, request).await;
    (
        response.overall_code(),
        response
            .statuses
            .iter()
            .map(|status| status.code())
            .collect(),
    )
}

fn memory() -> AnyStore {
    AnyStore::Memory(MemoryStore::new())
}

async fn memcached() -> AnyStore {
    AnyStore::Memcached(common::memcached_store().await)
}

#[tokio::test]
async fn key_value_is_tried_before_key_and_each_descriptor_counts_apart() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    for client_id in ["a", "b"] {
        for expected in [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit] {
            let response = ask(
                &mut client,
                request("test", vec![descriptor(&[("client", client_id)])]),
            )
            .await;
            assert_eq!(response.overall_code(), expected, "client {client_id}");
            let status = &response.statuses[0];
            let limit = status.current_limit.as_ref().unwrap();
            assert_eq!(
                (limit.requests_per_unit, limit.unit),
                (3, 2),
                "3 per MINUTE"
            );
        }
    }
    let vip = ask(
        &mut client,
        request("test", vec![descriptor(&[("client", "vip")])]),
    )
    .await;
    let status = &vip.statuses[0];
    assert_eq!(status.code(), Code::Ok);
    assert_eq!(status.limit_remaining, 9);
    assert_eq!(status.current_limit.as_ref().unwrap().name, "vip");
    assert!(status.duration_until_reset.is_some());

    // Whitelisted: a key + value entry without rate_limit.
    for _ in 0..5 {
        let response = ask(
            &mut client,
            request("test", vec![descriptor(&[("client", "trusted")])]),
        )
        .await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].current_limit, None);
    }
}

#[tokio::test]
async fn a_limit_applies_at_the_last_entry_only() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let nested = || {
        request(
            "test",
            vec![descriptor(&[("path", "/a"), ("method", "GET")])],
        )
    };
    assert_eq!(codes(&mut client, nested()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, nested()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, nested()).await.0, Code::OverLimit);
    // The path alone has no rule; a deeper descriptor than the config has none either.
    for entries in [
        vec![("path", "/a")],
        vec![("path", "/a"), ("method", "GET"), ("extra", "x")],
        vec![("nothing", "here")],
    ] {
        let response = ask(&mut client, request("test", vec![descriptor(&entries)])).await;
        assert_eq!(response.overall_code(), Code::Ok, "{entries:?}");
        assert_eq!(response.statuses[0].current_limit, None, "{entries:?}");
    }
    // An unknown domain is OK with no limit.
    let response = ask(
        &mut client,
        request("elsewhere", vec![descriptor(&[("client", "a")])]),
    )
    .await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(response.statuses[0].current_limit, None);
}

#[tokio::test]
async fn shadow_unlimited_refused_and_replaced_rules() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    // Shadow mode: over the limit, still OK, remaining 0.
    ask(
        &mut client,
        request("test", vec![descriptor(&[("shadowed", "x")])]),
    )
    .await;
    let response = ask(
        &mut client,
        request("test", vec![descriptor(&[("shadowed", "x")])]),
    )
    .await;
    assert_eq!(response.overall_code(), Code::Ok);
    assert_eq!(response.statuses[0].code(), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 0);

    let response = ask(
        &mut client,
        request("test", vec![descriptor(&[("free", "x")])]),
    )
    .await;
    assert_eq!(response.statuses[0].code(), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, u32::MAX);

    let banned = || descriptor(&[("banned", "x")]);
    assert_eq!(
        codes(&mut client, request("test", vec![banned()])).await,
        (Code::OverLimit, vec![Code::OverLimit])
    );
    // `unban` replaces banned_rule: it neither decides nor counts.
    let both = || request("test", vec![banned(), descriptor(&[("unban", "x")])]);
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok])
    );
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok])
    );
    assert_eq!(
        codes(&mut client, both()).await,
        (Code::OverLimit, vec![Code::Ok, Code::OverLimit])
    );
}

#[tokio::test]
async fn statuses_come_in_request_order_and_any_over_limit_refuses_the_request() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mixed = || {
        request(
            "test",
            vec![
                descriptor(&[("nothing", "x")]),
                descriptor(&[("one", "x")]),
                descriptor(&[("free", "x")]),
            ],
        )
    };
    assert_eq!(
        codes(&mut client, mixed()).await,
        (Code::Ok, vec![Code::Ok, Code::Ok, Code::Ok])
    );
    let response = ask(&mut client, mixed()).await;
    assert_eq!(response.overall_code(), Code::OverLimit);
    assert_eq!(
        response
            .statuses
            .iter()
            .map(|s| s.code())
            .collect::<Vec<_>>(),
        [Code::Ok, Code::OverLimit, Code::Ok]
    );
    assert_eq!(response.statuses[1].limit_remaining, 0);
    assert_eq!(response.statuses[2].limit_remaining, u32::MAX);
    // OVER_LIMIT's reset is the exact wait: the rest of this minute and the
    // next one's decay (mid-minute, 1 of 1 counted: 30 + 60 s).
    let reset = response.statuses[1].duration_until_reset.unwrap();
    assert_eq!(reset.seconds, 90);
}

/// slidegate decides a request's descriptors together: one that is over its
/// limit refuses the request, and then none of them is counted.
/// envoyproxy/ratelimit counts every descriptor of every request (rejected
/// ones included, unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is set, and
/// even then a descriptor under its limit is counted when another refuses the
/// request), so there the `five` counter below would stand at 4, not 1.
#[tokio::test]
async fn a_refused_request_is_counted_by_no_descriptor() {
    for (name, store) in [("memory", memory()), ("memcached", memcached().await)] {
        let rls = TestRls::start(store, CONFIG).await;
        let mut client = rls.client().await;
        let both = || {
            request(
                "test",
                vec![descriptor(&[("five", "k")]), descriptor(&[("one", "k")])],
            )
        };
        assert_eq!(codes(&mut client, both()).await.0, Code::Ok);
        for _ in 0..3 {
            let response = ask(&mut client, both()).await;
            assert_eq!(
                response.overall_code(),
                Code::OverLimit,
                "{name}: {response:?} {:?}",
                rls.app.limiter().metrics()
            );
            assert_eq!(
                response.statuses[0].code(),
                Code::Ok,
                "five alone would pass"
            );
            assert_eq!(
                response.statuses[0].limit_remaining, 4,
                "and was not counted"
            );
        }
        // `five` was counted once: four more pass alone.
        let five = || request("test", vec![descriptor(&[("five", "k")])]);
        for _ in 0..4 {
            assert_eq!(codes(&mut client, five()).await.0, Code::Ok);
        }
        assert_eq!(codes(&mut client, five()).await.0, Code::OverLimit);
    }
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_zero_per_descriptor_only_checks() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mut heavy = request("test", vec![descriptor(&[("five", "h")])]);
    heavy.hits_addend = 3;
    let response = ask(&mut client, heavy.clone()).await;
    assert_eq!(response.statuses[0].limit_remaining, 2);
    assert_eq!(
        codes(&mut client, heavy).await.0,
        Code::OverLimit,
        "3 + 3 > 5"
    );

    // Per descriptor, hits_addend overrides the request's; 0 counts nothing.
    let mut per_descriptor = descriptor(&[("five", "h")]);
    per_descriptor.hits_addend = Some(0);
    let mut check_only = request("test", vec![per_descriptor.clone()]);
    check_only.hits_addend = 5;
    for _ in 0..3 {
        let response = ask(&mut client, check_only.clone()).await;
        assert_eq!(response.overall_code(), Code::Ok);
        assert_eq!(response.statuses[0].limit_remaining, 2);
    }
    per_descriptor.hits_addend = Some(2);
    let response = ask(&mut client, request("test", vec![per_descriptor])).await;
    assert_eq!(response.statuses[0].limit_remaining, 0);
}

#[tokio::test]
async fn extensions_wildcards_and_overrides() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    // 2 per 30 s (unit_multiplier), in 3 sub-buckets of 10 s.
    let every = || request("test", vec![descriptor(&[("every", "x")])]);
    let response = ask(&mut client, every()).await;
    assert_eq!(response.statuses[0].limit_remaining, 1);
    assert_eq!(
        response.statuses[0].duration_until_reset.unwrap().seconds,
        40
    );
    assert_eq!(codes(&mut client, every()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, every()).await.0, Code::OverLimit);
    rls.clock.advance(Duration::from_secs(40));
    assert_eq!(
        codes(&mut client, every()).await.0,
        Code::Ok,
        "the window slid"
    );

    // A wildcard value: each matching value has its own counter.
    for value in ["files/a", "files/b"] {
        let one = || request("test", vec![descriptor(&[("prefix", value)])]);
        assert_eq!(codes(&mut client, one()).await.0, Code::Ok, "{value}");
        assert_eq!(
            codes(&mut client, one()).await.0,
            Code::OverLimit,
            "{value}"
        );
    }
    let other = request("test", vec![descriptor(&[("prefix", "other")])]);
    assert_eq!(
        ask(&mut client, other).await.statuses[0].current_limit,
        None
    );

    // A limit override sent by Envoy replaces the configured limit.
    let mut overridden = descriptor(&[("client", "o")]);
    overridden.limit = Some(
        slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 4,
        },
    );
    let response = ask(&mut client, request("test", vec![overridden.clone()])).await;
    assert_eq!(response.statuses[0].current_limit.as_ref().unwrap().unit, 4);
    assert_eq!(
        codes(&mut client, request("test", vec![overridden]))
            .await
            .0,
        Code::OverLimit
    );
}

#[tokio::test]
async fn bad_requests_are_invalid_argument_naming_the_field() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let mut too_many = descriptor(&[("five", "x")]);
    too_many.hits_addend = Some(u64::MAX);
    let mut bad_unit = descriptor(&[("five", "x")]);
    bad_unit.limit = Some(
        slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride {
            requests_per_unit: 1,
            unit: 99,
        },
    );
    let cases = [
        (request("", vec![descriptor(&[("a", "b")])]), "domain"),
        (request("test", vec![]), "descriptors"),
        (
            request("test", vec![descriptor(&[])]),
            "descriptors[0].entries",
        ),
        (
            request("test", vec![descriptor(&[("a", "b"), ("", "c")])]),
            "descriptors[0].entries[1].key",
        ),
        (
            request("test", vec![descriptor(&[("a", "b")]), too_many]),
            "descriptors[1].hits_addend",
        ),
        (request("test", vec![bad_unit]), "descriptors[0].limit.unit"),
    ];
    for (request, field) in cases {
        let status = client.should_rate_limit(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{field}");
        assert!(
            status.message().starts_with(&format!("{field}: ")),
            "{field}: {}",
            status.message()
        );
    }
    // Any bytes in keys and values are fine: they never reach the store.
    let odd = request(
        "test",
        vec![descriptor(&[
            ("client", "a b\n\u{0}\u{1F600}"),
            ("x", &"v".repeat(10_000)),
        ])],
    );
    assert_eq!(codes(&mut client, odd).await.0, Code::Ok);
}

/// With API tokens set, the gRPC face needs one as the HTTP API does, as
/// `authorization: Bearer <token>` metadata (Envoy: `initial_metadata` of
/// its `grpc_service`): UNAUTHENTICATED otherwise, counting nothing.
#[tokio::test]
async fn with_api_tokens_a_call_needs_one() {
    const TOKEN: &str = "rls-token-0123456789abcdef";
    let guard = ServerGuard {
        api_tokens: ApiTokens::new([TOKEN]).unwrap(),
        ..ServerGuard::default()
    };
    let rls = TestRls::start_guarded(memory(), CONFIG, guard).await;
    let mut client = rls.client().await;
    let one = || request("test", vec![descriptor(&[("five", "x")])]);
    let with = |authorization: &str| {
        let mut call = tonic::Request::new(one());
        call.metadata_mut()
            .insert("authorization", authorization.parse().unwrap());
        call
    };

    let missing = client.should_rate_limit(one()).await.unwrap_err();
    let wrong = client
        .should_rate_limit(with("Bearer not-the-token-0123456789"))
        .await
        .unwrap_err();
    for (status, says) in [(&missing, "required"), (&wrong, "not valid")] {
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
        assert!(
            status.message().starts_with("authorization: ") && status.message().contains(says),
            "{}",
            status.message()
        );
        assert!(!status.message().contains("not-the-token"), "never echoed");
    }
    // Refused calls counted nothing: the limit of 5 is all there.
    for call in 0..6 {
        let response = client
            .should_rate_limit(with(&format!("Bearer {TOKEN}")))
            .await
            .unwrap()
            .into_inner();
        let expected = if call < 5 { Code::Ok } else { Code::OverLimit };
        assert_eq!(response.overall_code(), expected, "call {call}");
    }
}

/// The RLS listener takes its connections under the server's cap: past
/// `max_connections`, a new connection is closed at once (counted), and the
/// ones held keep being answered; when one ends, its place is free again.
#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    let guard = ServerGuard {
        max_connections: 2,
        ..ServerGuard::default()
    };
    let rls = TestRls::start_guarded(memory(), CONFIG, guard).await;
    let one = || request("test", vec![descriptor(&[("five", "x")])]);
    let mut held = vec![rls.client().await, rls.client().await];
    for client in &mut held {
        assert_eq!(ask(client, one()).await.overall_code(), Code::Ok);
    }

    // A third connection: refused, whether at connect or at its first call.
    let third = Channel::from_shared(format!("http://{}", rls.addr))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    if let Ok(channel) = third {
        let mut client = RateLimitServiceClient::new(channel);
        let status = client.should_rate_limit(one()).await.unwrap_err();
        // The connection closed under the call: tonic says Cancelled or
        // Unavailable, depending on when it noticed.
        assert!(
            matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::Unavailable
            ),
            "{status}"
        );
    }
    assert!(rls.app.refused_connections() >= 1);
    // The held ones are still answered.
    assert_eq!(ask(&mut held[1], one()).await.overall_code(), Code::Ok);

    // One ends: a new connection gets its place (once the server has seen
    // the end, which takes a moment).
    held.remove(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let channel = Channel::from_shared(format!("http://{}", rls.addr))
            .unwrap()
            .timeout(Duration::from_secs(2))
            .connect()
            .await;
        if let Ok(channel) = channel
            && let Ok(response) = RateLimitServiceClient::new(channel)
                .should_rate_limit(one())
                .await
        {
            assert_eq!(response.into_inner().overall_code(), Code::Ok);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no place freed within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The HTTP and gRPC listeners of one app share one cap: places held on
/// the gRPC port are missing on the HTTP one, and come back to it.
#[tokio::test]
async fn the_http_and_grpc_listeners_share_one_cap() {
    let guard = ServerGuard {
        max_connections: 2,
        ..ServerGuard::default()
    };
    let rls = TestRls::start_guarded(memory(), CONFIG, guard).await;
    let http_addr = in_process::serve_forever(server::serve, rls.app.clone()).await;
    let healthz = || async {
        let mut stream = tokio::net::TcpStream::connect(http_addr).await.unwrap();
        let _ = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    let one = || request("test", vec![descriptor(&[("five", "x")])]);

    let mut held = vec![rls.client().await, rls.client().await];
    for client in &mut held {
        assert_eq!(ask(client, one()).await.overall_code(), Code::Ok);
    }
    assert_eq!(rls.app.open_connections(), 2);
    // Both places are taken on the gRPC port: HTTP is closed at accept.
    assert_eq!(healthz().await, "", "HTTP was answered past the cap");
    assert_eq!(rls.app.refused_connections(), 1);

    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rls.app.open_connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no place freed within 5 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(healthz().await.starts_with("HTTP/1.1 200"));
}

/// A connection to the gRPC port that sends nothing gives its place under
/// the cap back after the quiet timeout: idle TCP connections must not hold
/// the places the HTTP API shares with it. A live HTTP/2 client answers the
/// server's pings, so its idle connection stays, the same one.
#[tokio::test]
async fn a_silent_connection_gives_its_place_back_and_a_live_idle_one_keeps_it() {
    // Long enough that a ping (every third of it) is answered in time on a
    // loaded machine: this runtime has one thread for server and client.
    let quiet = Duration::from_secs(2);
    let guard = ServerGuard {
        max_connections: 2,
        quiet_timeout: quiet,
        ..ServerGuard::default()
    };
    let rls = TestRls::start_guarded(memory(), CONFIG, guard).await;
    let one = || request("test", vec![descriptor(&[("five", "x")])]);
    let mut live = rls.client().await;
    assert_eq!(ask(&mut live, one()).await.overall_code(), Code::Ok);

    // A connection that never speaks HTTP/2 takes the last place...
    let connected = std::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(rls.addr).await.unwrap();
    // ...until the server closes it (what it reads first is the server's
    // own HTTP/2 preface).
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut bytes = [0u8; 256];
        while let Ok(read) = silent.read(&mut bytes).await {
            if read == 0 {
                break;
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a silent connection still held its place after 10 s"
    );
    let held = connected.elapsed();
    assert!(
        held >= quiet,
        "closed after {held:?}, before the quiet timeout"
    );

    // The live connection has been idle as long, and twice that again: the
    // server's pings kept it, and it is still the one place taken.
    tokio::time::sleep(quiet * 2).await;
    assert_eq!(rls.app.open_connections(), 1);
    assert_eq!(ask(&mut live, one()).await.overall_code(), Code::Ok);
    assert_eq!(rls.app.open_connections(), 1);
    assert_eq!(rls.app.refused_connections(), 0);
}

/// 100 concurrent calls on one descriptor with a limit of 5, from 4 HTTP/2
/// connections, on a real memcached: exactly 5 pass. Then the near-cache
/// answers the hot key without the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_admit_exactly_the_limit() {
    let rls = TestRls::start(memcached().await, CONFIG).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rls.client().await);
    }
    let mut calls = tokio::task::JoinSet::new();
    for index in 0..100 {
        let mut client = clients[index % 4].clone();
        calls.spawn(async move {
            let request = request("test", vec![descriptor(&[("five", "hot")])]);
            client
                .should_rate_limit(request)
                .await
                .map(|r| r.into_inner().overall_code())
        });
    }
    let mut ok = 0;
    while let Some(result) = calls.join_next().await {
        if result.unwrap().unwrap() == Code::Ok {
            ok += 1;
        }
    }
    assert_eq!(ok, 5);

    let before = rls.app.limiter().metrics();
    for _ in 0..10 {
        let response = ask(
            &mut clients[0],
            request("test", vec![descriptor(&[("five", "hot")])]),
        )
        .await;
        assert_eq!(response.overall_code(), Code::OverLimit);
    }
    let after = rls.app.limiter().metrics();
    assert_eq!(
        after.store_calls, before.store_calls,
        "hot rejects cost no round trip"
    );
    assert_eq!(after.near_cache_hits() - before.near_cache_hits(), 10);
}

#[tokio::test]
async fn metrics_count_per_domain_and_rule() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    for value in ["a", "b", "c"] {
        ask(
            &mut client,
            request("test", vec![descriptor(&[("one", value)])]),
        )
        .await;
        ask(
            &mut client,
            request("test", vec![descriptor(&[("one", value)])]),
        )
        .await;
    }
    let addr = in_process::serve_forever(server::serve, rls.app.clone()).await;
    let metrics = common::metrics::scrape(addr).await;
    for (series, value) in [
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="total_hits"}"#,
            6.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="within_limit"}"#,
            3.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="test.one",result="over_limit"}"#,
            3.0,
        ),
        (
            r#"slidegate_rls_hits_total{domain="test",rule="vip",result="total_hits"}"#,
            0.0,
        ),
        (r#"slidegate_rls_requests_total{outcome="answered"}"#, 6.0),
    ] {
        assert_eq!(metrics.value(series), value, "{series}");
    }
    assert!(
        metrics
            .series()
            .all(|(series, _)| !series.contains("\"a\"")),
        "request values never become labels"
    );
}

/// A request is bounded like an HTTP body: more descriptors than
/// `rls.max_descriptors` (64 by default) is the caller's error, decided
/// before anything is read or counted.
#[tokio::test]
async fn more_descriptors_than_max_descriptors_are_invalid_argument() {
    let rls = TestRls::start(memory(), CONFIG).await;
    let mut client = rls.client().await;
    let many = |count: usize| {
        let descriptors = (0..count)
            .map(|index| descriptor(&[("five", &format!("many-{index}"))]))
            .collect();
        request("test", descriptors)
    };
    let status = client.should_rate_limit(many(65)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("descriptors: at most 64 descriptors, got 65"),
        "{}",
        status.message()
    );
    assert_eq!(codes(&mut client, many(64)).await.0, Code::Ok);
}

/// Bytes that are not a `RateLimitRequest` are the caller's error:
/// INVALID_ARGUMENT, not INTERNAL. Sent as a raw gRPC message through
/// tonic's client with a codec that writes the bytes as they are.
#[tokio::test]
async fn an_undecodable_request_is_invalid_argument() {
    use prost::bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    #[derive(Default)]
    struct Raw;
    impl Encoder for Raw {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
            dst.put_slice(&item);
            Ok(())
        }
    }
    impl Decoder for Raw {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Self::Error> {
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = Raw;
        type Decoder = Raw;
        fn encoder(&mut self) -> Raw {
            Raw
        }
        fn decoder(&mut self) -> Raw {
            Raw
        }
    }

    let rls = TestRls::start(memory(), CONFIG).await;
    let channel = Channel::from_shared(format!("http://{}", rls.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    // Field 1 (domain) as a string of bytes that are not UTF-8, then a
    // tag of wire type 7, which does not exist.
    for garbage in [vec![0x0a, 0x02, 0xff, 0xfe], vec![0xff; 16]] {
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(tonic::Request::new(garbage.clone()), path.clone(), Raw)
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{garbage:?}: {}",
            status.message()
        );
        assert!(
            status.message().starts_with("request: "),
            "{}",
            status.message()
        );
    }
    // The connection still serves well-formed calls.
    let mut client = rls.client().await;
    assert_eq!(
        codes(
            &mut client,
            request("test", vec![descriptor(&[("five", "raw")])])
        )
        .await
        .0,
        Code::Ok
    );
}

/// A refused request of many descriptors takes back all their additions
/// in one pipelined exchange (one round trip through a counting proxy on a
/// single connection), not one round trip per descriptor, and leaves every
/// counter as it was.
#[tokio::test]
async fn a_refused_request_takes_back_all_its_additions_in_one_exchange() {
    let memcached = common::shared_memcached();
    let proxy = common::proxy::CountingProxy::start(memcached.addr()).await;
    let options = slidegate::MemcachedOptions {
        connections: 1,
        ..common::memcached_options(vec![proxy.addr.clone()])
    };
    let store = slidegate::MemcachedStore::connect(&options).await.unwrap();
    let rls = TestRls::start(AnyStore::Memcached(store), CONFIG).await;
    let mut client = rls.client().await;
    let used = || descriptor(&[("one", "used")]);
    assert_eq!(
        codes(&mut client, request("test", vec![used()])).await.0,
        Code::Ok
    );

    let mut descriptors: Vec<RateLimitDescriptor> = (0..8)
        .map(|index| descriptor(&[("five", &format!("fresh-{index}"))]))
        .collect();
    descriptors.push(used());
    let before = proxy.round_trips();
    let (overall, statuses) = codes(&mut client, request("test", descriptors)).await;
    let round_trips = proxy.round_trips() - before;
    println!("refused request of 9 descriptors: {round_trips} round trips");
    assert_eq!(overall, Code::OverLimit);
    assert_eq!(statuses[..8], [Code::Ok; 8]);
    assert_eq!(round_trips, 2, "one to check, one to take back");

    // Nothing stayed counted: each fresh key still has its five.
    for index in [0, 7] {
        let fresh = || {
            request(
                "test",
                vec![descriptor(&[("five", &format!("fresh-{index}"))])],
            )
        };
        for _ in 0..5 {
            assert_eq!(codes(&mut client, fresh()).await.0, Code::Ok);
        }
        assert_eq!(codes(&mut client, fresh()).await.0, Code::OverLimit);
    }
}

/// The rules shipped in `examples/envoy/ratelimit/config.yaml` load as
/// they are, and decide as their comments say: 5 a minute per API key
/// under `/api`, 1000 per 5 minutes for the partner key, 100 a second per
/// client address, and loopback not limited.
#[tokio::test]
async fn the_shipped_envoy_example_rules_load_and_limit() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/envoy/ratelimit/config.yaml");
    let config = std::fs::read_to_string(&path).unwrap();
    let rls = TestRls::start(memory(), &config).await;
    let mut client = rls.client().await;
    let ask_as = |entries: &[(&str, &str)]| request("edge", vec![descriptor(entries)]);

    // (descriptor, admitted, then refused?)
    type Entries<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Entries, usize, bool); 4] = [
        // 5 a minute per API key.
        (&[("path", "/api"), ("api_key", "k1")], 5, true),
        // The partner key's own 1000 per 5 minutes.
        (&[("path", "/api"), ("api_key", "partner")], 6, false),
        // 100 a second per client address.
        (&[("remote_address", "203.0.113.9")], 100, true),
        // Loopback is not limited.
        (&[("remote_address", "127.0.0.1")], 150, false),
    ];
    for (entries, admitted, then_refused) in cases {
        for call in 0..admitted {
            let response = ask(&mut client, ask_as(entries)).await;
            assert_eq!(
                response.overall_code(),
                Code::Ok,
                "{entries:?}: call {call}"
            );
        }
        if then_refused {
            let response = ask(&mut client, ask_as(entries)).await;
            assert_eq!(response.overall_code(), Code::OverLimit, "{entries:?}");
        }
    }
}
