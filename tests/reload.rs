//! Hot reload, on the real binary: a Kubernetes ConfigMap update (the
//! `..data` symlink swap) and SIGHUP put new policies in force without a
//! restart or a dropped request, counters are kept, a bad file keeps the
//! running configuration, and restart-only settings are reported.

mod common;

use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use common::http;
use common::metrics;
use common::process;
use common::service::Slidegate;
use common::wait::{PATIENCE, wait_for};

const POLICIES_V1: &str = r#"
[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 2, window = "1h" }]
"#;

/// api raised to 3 (its counters kept), a new policy, and a new failure
/// mode, which needs a restart.
const POLICIES_V2: &str = r#"
[failure]
mode = "deny"

[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 3, window = "1h" }]

[policies.extra]
limits = [{ limit = 1, window = "1h" }]
"#;

const BAD: &str = r#"
[reload]
watch_ms = 100

[policies.api]
limits = [{ limit = 0, window = "1h" }]
"#;

/// What a kubelet does to a mounted ConfigMap: the new content in a fresh
/// directory, then `..data` switched to it by an atomic rename.
fn configmap_update(dir: &Path, version: &str, text: &str) {
    let data = dir.join(version);
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("slidegate.toml"), text).unwrap();
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(version, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
}

fn start(config: &Path, dir: &Path) -> (Slidegate, SocketAddr) {
    let addr = process::free_addr();
    let service = start_listening(config, dir, Some(addr), &[addr]);
    (service, addr)
}

/// The binary on `config`, with `--listen` when given (else the file's
/// `listen`), once every address of `ready` accepts connections.
fn start_listening(
    config: &Path,
    dir: &Path,
    listen: Option<SocketAddr>,
    ready: &[SocketAddr],
) -> Slidegate {
    let mut command = Slidegate::command();
    command.arg("--config").arg(config);
    if let Some(addr) = listen {
        command.args(["--listen", &addr.to_string()]);
    }
    Slidegate::start_in(dir.to_owned(), command, ready[0], &ready[1..])
}

fn hang_up(service: &Slidegate) {
    service.signal(libc::SIGHUP);
}

/// Wait until the binary has finished `count` successful reloads.
async fn reloaded(addr: SocketAddr, count: f64) {
    eventually("the reload", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"ok\"}").await == Some(count)
    })
    .await;
}

async fn check(addr: SocketAddr, policy: &str) -> http::Response {
    http::post(
        addr,
        "/v1/check",
        &format!(r#"{{"key": "k", "policy": "{policy}"}}"#),
    )
    .await
}

/// Poll until `ready` holds.
async fn eventually<F: Future<Output = bool>>(what: &str, ready: impl FnMut() -> F) {
    wait_for(what, PATIENCE, ready).await;
}

/// One series of the binary's `/metrics`, parsed.
async fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    metrics::scrape(addr).await.get(series)
}

#[tokio::test]
async fn a_configmap_swap_reloads_policies_and_keeps_counters() {
    let dir = process::temp_dir("slidegate-reload");
    configmap_update(&dir, "..v1", POLICIES_V1);
    symlink("..data/slidegate.toml", dir.join("slidegate.toml")).unwrap();
    let (daemon, addr) = start(&dir.join("slidegate.toml"), &dir);

    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 429);
    assert_eq!(check(addr, "extra").await.status, 400, "not configured yet");

    // Requests keep flowing through the reload; every one is answered.
    let load = tokio::spawn(async move {
        let mut answered = Vec::new();
        for _ in 0..150 {
            let response = http::post(
                addr,
                "/v1/check",
                r#"{"key": "load", "limits": [{"limit": 1000000, "window": "1h"}]}"#,
            )
            .await;
            answered.push(response.status);
        }
        answered
    });
    configmap_update(&dir, "..v2", POLICIES_V2);
    eventually("the new policy", || async {
        check(addr, "extra").await.status == 200
    })
    .await;
    let answered = load.await.unwrap();
    assert!(answered.iter().all(|status| *status == 200), "{answered:?}");

    // api's 2 counted requests are still there: one more fits under 3.
    assert_eq!(check(addr, "api").await.status, 200);
    assert_eq!(check(addr, "api").await.status, 429);
    let log = daemon.log();
    assert!(log.contains("configuration reloaded"), "{log}");
    assert!(
        log.contains("only change on a restart") && log.contains("\"failure.mode\""),
        "the new failure mode is reported as needing a restart:\n{log}"
    );
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(1.0)
    );
    assert_eq!(
        metric(addr, "slidegate_config_reloads_total{result=\"ok\"}").await,
        Some(1.0)
    );

    // A bad file: refused, named, counted; the running policies stay.
    configmap_update(&dir, "..v3", BAD);
    eventually("the failed reload", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await == Some(1.0)
    })
    .await;
    let log = daemon.log();
    assert!(
        log.contains("configuration NOT reloaded")
            && log.contains("slidegate.toml")
            && log.contains("policies.api.limits[0].limit"),
        "the error names the file and the field:\n{log}"
    );
    assert_eq!(
        check(addr, "extra").await.status,
        429,
        "extra (limit 1) is still in force and still counting"
    );
    assert_eq!(check(addr, "api").await.status, 429);
}

#[tokio::test]
async fn sighup_reloads() {
    let dir = process::temp_dir("slidegate-sighup");
    let config = dir.join("slidegate.toml");
    // File watching off: only the signal can reload.
    let off = POLICIES_V1.replace("watch_ms = 100", "watch_ms = 0");
    std::fs::write(&config, &off).unwrap();
    let (daemon, addr) = start(&config, &dir);
    assert_eq!(check(addr, "extra").await.status, 400);

    let with_extra =
        format!("{off}\n[policies.extra]\nlimits = [{{ limit = 1, window = \"1h\" }}]\n");
    std::fs::write(&config, with_extra).unwrap();
    hang_up(&daemon);
    eventually("the reload on SIGHUP", || async {
        check(addr, "extra").await.status != 400
    })
    .await;
    assert!(
        daemon.log().contains("reason=\"SIGHUP\""),
        "{}",
        daemon.log()
    );
}

const TOKEN_A: &str = "token-a-leaked-0123456789";
const TOKEN_B: &str = "token-b-kept-0123456789";

const RLS_RULES: &str = "domain: test\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

async fn check_with(addr: SocketAddr, token: &str) -> u16 {
    let authorization = format!("Bearer {token}");
    http::send(
        addr,
        "POST",
        "/v1/check",
        &[("authorization", &authorization)],
        r#"{"key": "k", "limits": [{"limit": 1000, "window": "1h"}]}"#,
    )
    .await
    .status
}

/// The gRPC code of one ShouldRateLimit call carrying `token`.
#[cfg(feature = "grpc")]
async fn rls_call_with(rls: SocketAddr, token: &str) -> tonic::Code {
    use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor::Entry,
    };
    use slidegate::server::rls::pb::envoy::service::ratelimit::v3::{
        RateLimitRequest, rate_limit_service_client::RateLimitServiceClient,
    };
    let channel = tonic::transport::Channel::from_shared(format!("http://{rls}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut call = tonic::Request::new(RateLimitRequest {
        domain: "test".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: "c".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    });
    call.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    match RateLimitServiceClient::new(channel)
        .should_rate_limit(call)
        .await
    {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

/// Where the tokens are written: in the file's `server.api_tokens`, or in
/// the file that `server.api_tokens_file` names; and what reloads them:
/// SIGHUP, or (`FileWatched`) only the tokens file's change, seen by the
/// watch.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TokensIn {
    List,
    File,
    FileWatched,
}

/// A leaked token taken out of the configuration and a SIGHUP: the very
/// next HTTP request with it gets 401, the next RLS call UNAUTHENTICATED,
/// and the token that stays keeps working on both faces.
async fn a_revoked_token_is_refused_on_the_next_call(tokens_in: TokensIn) {
    let dir = process::temp_dir("slidegate-revoke");
    let config = dir.join("slidegate.toml");
    let tokens_file = dir.join("tokens");
    std::fs::write(dir.join("rules.yaml"), RLS_RULES).unwrap();
    let addr = process::free_addr();
    let rls = process::free_addr();
    let watch_ms = if tokens_in == TokensIn::FileWatched {
        100
    } else {
        0
    };
    let write = |tokens: &[&str]| {
        let quoted: Vec<String> = tokens.iter().map(|t| format!("{t:?}")).collect();
        let server = match tokens_in {
            TokensIn::List => format!("api_tokens = [{}]", quoted.join(", ")),
            TokensIn::File | TokensIn::FileWatched => {
                std::fs::write(&tokens_file, tokens.join("\n")).unwrap();
                "api_tokens_file = \"tokens\"".to_owned()
            }
        };
        let rls_section = if cfg!(feature = "grpc") {
            format!("[rls]\nlisten = \"{rls}\"\nconfig = \"rules.yaml\"\n")
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!("[reload]\nwatch_ms = {watch_ms}\n[server]\n{server}\n{rls_section}"),
        )
        .unwrap();
    };
    write(&[TOKEN_A, TOKEN_B]);
    let ready: &[SocketAddr] = if cfg!(feature = "grpc") {
        &[addr, rls]
    } else {
        &[addr]
    };
    let daemon = start_listening(&config, &dir, Some(addr), ready);
    assert_eq!(check_with(addr, TOKEN_A).await, 200);
    assert_eq!(check_with(addr, TOKEN_B).await, 200);
    #[cfg(feature = "grpc")]
    assert_eq!(rls_call_with(rls, TOKEN_A).await, tonic::Code::Ok);

    write(&[TOKEN_B]);
    if tokens_in != TokensIn::FileWatched {
        hang_up(&daemon);
    }
    reloaded(addr, 1.0).await;
    assert_eq!(
        check_with(addr, TOKEN_A).await,
        401,
        "{tokens_in:?}: the revoked token still opens the HTTP API:\n{}",
        daemon.log()
    );
    assert_eq!(check_with(addr, TOKEN_B).await, 200, "{tokens_in:?}");
    #[cfg(feature = "grpc")]
    {
        assert_eq!(
            rls_call_with(rls, TOKEN_A).await,
            tonic::Code::Unauthenticated,
            "{tokens_in:?}: the revoked token still opens RLS"
        );
        assert_eq!(rls_call_with(rls, TOKEN_B).await, tonic::Code::Ok);
    }
}

#[tokio::test]
async fn a_token_removed_from_api_tokens_is_refused_after_a_reload() {
    a_revoked_token_is_refused_on_the_next_call(TokensIn::List).await;
}

#[tokio::test]
async fn a_token_removed_from_api_tokens_file_is_refused_after_a_reload() {
    a_revoked_token_is_refused_on_the_next_call(TokensIn::File).await;
}

/// A Kubernetes Secret mounted as the tokens file changes without a signal:
/// the watch reads the tokens file as it reads the configuration file.
#[tokio::test]
async fn a_token_removed_from_a_watched_tokens_file_is_refused_without_a_signal() {
    a_revoked_token_is_refused_on_the_next_call(TokensIn::FileWatched).await;
}

/// Every restart-only key changed at once: the reload applies what it can
/// and names each of the others in its "restart needed" line, and
/// `slidegate_config_restart_pending` is 1 until the file agrees with the
/// running process again.
#[cfg(all(feature = "memcached", feature = "tls", feature = "grpc"))]
#[tokio::test]
async fn a_reload_names_every_restart_only_key_it_cannot_apply() {
    let dir = process::temp_dir("slidegate-restart-keys");
    let config = dir.join("slidegate.toml");
    let addr = process::free_addr();
    let running = format!("listen = \"{addr}\"\n[reload]\nwatch_ms = 0\n");
    std::fs::write(&config, &running).unwrap();
    std::fs::write(dir.join("ca.pem"), "read only when connecting").unwrap();
    let daemon = start_listening(&config, &dir, None, &[addr]);
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(0.0)
    );

    let ca = dir.join("ca.pem");
    let every_key_changed = format!(
        r#"{running}
[memcached]
servers = ["127.0.0.1:9"]
timeout_ms = 75
namespace = "elsewhere"
connections = 3
coalesce = false
discovery = "127.0.0.1:10"
discovery_interval_ms = 2000
tls = true
tls_ca_file = "{ca}"
tls_server_name = "cache.internal"
[near_cache]
capacity = 10
max_bytes = 2000000
revalidate_ms = 250
[failure]
mode = "local"
[rls]
listen = "127.0.0.1:11"
config = "rules.yaml"
max_descriptors = 16
[rlqs]
listen = "127.0.0.1:13"
[memory]
capacity = 100
[clock]
source = "memcached"
[policies.new]
limits = [{{ limit = 1, window = "1h" }}]
"#,
        ca = ca.display()
    )
    .replace(&format!("listen = \"{addr}\""), "listen = \"127.0.0.1:12\"");
    std::fs::write(&config, every_key_changed).unwrap();
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    let log = daemon.log();
    let line = log
        .lines()
        .find(|line| line.contains("restart needed"))
        .unwrap_or_else(|| panic!("no restart-needed line:\n{log}"));
    let missing: Vec<&str> = slidegate::config::reload::RESTART_ONLY
        .iter()
        .copied()
        .filter(|key| !line.contains(&format!("\"{key}\"")))
        .collect();
    assert!(missing.is_empty(), "not named: {missing:?} in\n{line}");
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(1.0)
    );
    // What could apply did, on the old listener and store.
    assert_eq!(check(addr, "new").await.status, 200);

    std::fs::write(&config, &running).unwrap();
    hang_up(&daemon);
    reloaded(addr, 2.0).await;
    assert_eq!(
        metric(addr, "slidegate_config_restart_pending").await,
        Some(0.0),
        "the file agrees with the running process again"
    );
}

/// `server.metrics_need_token` and `server.max_connections` apply live too.
#[tokio::test]
async fn the_server_section_applies_live() {
    let dir = process::temp_dir("slidegate-server-live");
    let config = dir.join("slidegate.toml");
    let tokens = format!("[reload]\nwatch_ms = 0\n[server]\napi_tokens = [\"{TOKEN_B}\"]\n");
    std::fs::write(&config, &tokens).unwrap();
    let (daemon, addr) = start(&config, &dir);
    assert_eq!(http::get(addr, "/metrics").await.status, 200);

    let guarded = format!("{tokens}metrics_need_token = true\n");
    std::fs::write(&config, &guarded).unwrap();
    hang_up(&daemon);
    eventually("/metrics guarded", || async {
        http::get(addr, "/metrics").await.status == 401
    })
    .await;

    std::fs::write(&config, format!("{guarded}max_connections = 1\n")).unwrap();
    hang_up(&daemon);
    // One connection held open takes the only place: the next is closed.
    // (Held anew each try: the place may still be taken, for an instant,
    // by a connection the server has not yet seen close.)
    eventually("the cap of 1 applied", || async {
        let _held = tokio::net::TcpStream::connect(addr).await.unwrap();
        closed_at_once(addr).await
    })
    .await;
    assert!(!daemon.log().contains("restart needed"), "{}", daemon.log());
}

/// Whether a new connection to `addr` is closed without an answer.
async fn closed_at_once(addr: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return true;
    };
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n")
        .await;
    let mut answer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer)).await;
    matches!(read, Ok(Ok(0) | Err(_)))
}

/// A request in flight when a reload lands finishes under the policies it
/// started with: here its store call is held on the wire (a proxy between
/// the binary and memcached) while `api` changes from 1 an hour to 5 a
/// minute, and its answer still carries the old policy. The next request
/// is decided under the new one.
// Multi-threaded: the proxy must relay while this thread waits for the
// binary to start (a blocking wait).
#[cfg(feature = "memcached")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_finishes_under_the_policies_it_started_with() {
    let memcached = common::shared_memcached();
    let proxy = common::proxy::CountingProxy::start(memcached.addr()).await;
    let dir = process::temp_dir("slidegate-reload-in-flight");
    let config = dir.join("slidegate.toml");
    let policies = |limit: &str| {
        format!(
            "[reload]\nwatch_ms = 0\n[memcached]\nservers = [\"{}\"]\nnamespace = \"{}\"\n\
             timeout_ms = 30000\n[policies.api]\nlimits = [{limit}]\n",
            proxy.addr,
            common::unique_namespace()
        )
    };
    std::fs::write(&config, policies("{ limit = 1, window = \"1h\" }")).unwrap();
    let (service, addr) = start(&config, &dir);
    eventually("the store ready", || async {
        http::get(addr, "/readyz").await.status == 200
    })
    .await;

    proxy.hold();
    let in_flight = tokio::spawn(check(addr, "api"));
    proxy.holding_a_request().await;
    std::fs::write(&config, policies("{ limit = 5, window = \"1m\" }")).unwrap();
    hang_up(&service);
    reloaded(addr, 1.0).await;
    proxy.release();

    let answered = in_flight.await.unwrap();
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(
        answered.header("ratelimit-policy"),
        Some("\"api\";q=1;w=3600"),
        "the request in flight was decided under the new policy"
    );
    assert_eq!(answered.json()["limits"][0]["window_ms"], 3_600_000);
    let after = check(addr, "api").await;
    assert_eq!(after.header("ratelimit-policy"), Some("\"api\";q=5;w=60"));
}

/// `limits.max_counters` raised in a reload, with a policy that needs the
/// new bound: the policy serves at once. Before, the file was checked
/// against the new bound but the limiter kept the old one, so the reload
/// succeeded and every check of the new policy was a 400.
#[tokio::test]
async fn a_raised_max_counters_applies_with_the_policies_that_need_it() {
    let dir = process::temp_dir("slidegate-max-counters");
    let config = dir.join("slidegate.toml");
    let off = POLICIES_V1.replace("watch_ms = 100", "watch_ms = 0");
    std::fs::write(&config, format!("{off}\n[limits]\nmax_counters = 16\n")).unwrap();
    let (daemon, addr) = start(&config, &dir);
    // 1 limit at precision 100: 101 counters.
    let wide = "[policies.wide]\nlimits = [{ limit = 5, window = \"100s\", precision = 100 }]\n";
    std::fs::write(
        &config,
        format!("{off}\n[limits]\nmax_counters = 128\n{wide}"),
    )
    .unwrap();
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    let answer = check(addr, "wide").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(!daemon.log().contains("restart needed"), "{}", daemon.log());
}

/// RLS rules are held to `limits.max_counters` as policies are: a rule past
/// it stops the start, naming the rule, and a reload that would lower the
/// bound under a loaded rule is refused, the running bound kept (else every
/// request the rule matches would get INVALID_ARGUMENT).
#[cfg(feature = "grpc")]
#[tokio::test]
async fn rls_rules_are_held_to_max_counters_at_start_and_on_reload() {
    let dir = process::temp_dir("slidegate-rls-counters");
    let config = dir.join("slidegate.toml");
    // Precision 200: 201 counters a check.
    std::fs::write(
        dir.join("rules.yaml"),
        "domain: test\ndescriptors:\n  - key: client\n    \
         rate_limit: {unit: hour, requests_per_unit: 1000, precision: 200}\n",
    )
    .unwrap();
    let (addr, rls) = (process::free_addr(), process::free_addr());
    let write = |max_counters: u32| {
        std::fs::write(
            &config,
            format!(
                "[reload]\nwatch_ms = 0\n[limits]\nmax_counters = {max_counters}\n\
                 [rls]\nlisten = \"{rls}\"\nconfig = \"rules.yaml\"\n"
            ),
        )
        .unwrap();
    };

    write(128);
    let mut command = Slidegate::command();
    command
        .arg("--config")
        .arg(&config)
        .args(["--listen", &addr.to_string()]);
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success(), "started with a rule past the bound");
    assert!(
        output.contains("rule test.client: 201 counters")
            && output.contains("limits.max_counters = 128"),
        "{output}"
    );

    write(256);
    let daemon = start_listening(&config, &dir, Some(addr), &[addr, rls]);
    assert_eq!(rls_call_with(rls, "any").await, tonic::Code::Ok);
    write(128);
    hang_up(&daemon);
    eventually("the reload to be refused", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await == Some(1.0)
    })
    .await;
    assert!(
        daemon.log().contains("rule test.client"),
        "{}",
        daemon.log()
    );
    assert_eq!(
        rls_call_with(rls, "any").await,
        tonic::Code::Ok,
        "the running bound was kept"
    );
}
