//! Operating the service (issue 22), end to end on real servers: a reset
//! reaching a second instance on one memcached through its near-cache, the
//! store reads hot rejects cost, the most limited keys and the sketch's
//! memory under a flood, exemptions (live on reload), the OpenAPI document
//! checked by a real validator against live answers, and the status page
//! rendered by headless Chromium.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http::{self, Response};
use common::in_process;
use common::tools;
use slidegate::config::reload::Reloader;
use slidegate::config::{Config, Overrides};
use slidegate::server::ops::TopRefused;
use slidegate::server::{self, App};
use slidegate::{Limit, Limiter, ManualClock, MemcachedStore, Policy, Source};
use tokio::sync::oneshot;

/// Counts the bytes this thread holds, so the sketch's memory is measured,
/// not estimated, and other tests' threads do not blur it.
struct CountingAllocator;

thread_local! {
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + layout.size() as isize));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn live_bytes() -> isize {
    LIVE_BYTES.with(Cell::get)
}

const TOKEN: &str = "ops-test-token-0123456789";

/// A service built from a configuration file's text, as the binary builds
/// it, serving on a free loopback port.
struct Service {
    addr: SocketAddr,
    app: Arc<App>,
    file: PathBuf,
    _stop: oneshot::Sender<()>,
}

impl Service {
    async fn start(text: &str) -> Service {
        let dir = common::process::temp_dir("slidegate-ops");
        let file = dir.join("slidegate.toml");
        std::fs::write(&file, text).unwrap();
        let config = Config::load(&overrides(&file)).unwrap_or_else(|error| panic!("{error}"));
        let app = Arc::new(App::from_config(&config).await.expect("the store"));
        let served = in_process::serve(server::serve, app.clone()).await;
        Service {
            addr: served.addr,
            app,
            file,
            _stop: served.stop,
        }
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> Response {
        let auth = format!("Bearer {TOKEN}");
        let headers = [
            ("content-type", "application/json"),
            ("authorization", auth.as_str()),
        ];
        http::send(self.addr, "POST", path, &headers, body.to_string()).await
    }

    async fn get(&self, path: &str) -> Response {
        let auth = format!("Bearer {TOKEN}");
        http::send(self.addr, "GET", path, &[("authorization", &auth)], "").await
    }
}

fn overrides(file: &Path) -> Overrides {
    Overrides {
        config: Some(file.to_owned()),
        ..Overrides::default()
    }
}

/// A configuration on the shared memcached, in a namespace of its own
/// unless given one.
fn on_memcached(namespace: &str, rest: &str) -> String {
    format!(
        "[memcached]\nservers = [\"{}\"]\nnamespace = \"{namespace}\"\ntimeout_ms = 2000\n\
         [server]\napi_tokens = [\"{TOKEN}\"]\n{rest}",
        common::shared_memcached().addr()
    )
}

fn check(key: &str, policy: &str) -> serde_json::Value {
    serde_json::json!({ "key": key, "policy": policy })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_a_second_instance_through_its_near_cache() {
    let namespace = common::unique_namespace();
    let text = on_memcached(
        &namespace,
        "[near_cache]\nrevalidate_ms = 1000\n\
         [policies.api]\nlimits = [{ limit = 3, window = \"1h\" }]\n",
    );
    let first = Service::start(&text).await;
    let second = Service::start(&text).await;
    for _ in 0..3 {
        assert_eq!(first.post("/v1/check", check("k", "api")).await.status, 200);
    }
    // The second instance is refused by the store, then by its near-cache.
    let refused = second.post("/v1/check", check("k", "api")).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    let hot = second.post("/v1/check", check("k", "api")).await;
    assert_eq!(hot.json()["source"], "near_cache", "{}", hot.body);

    let reset = first.post("/v1/reset", check("k", "api")).await;
    assert_eq!(reset.status, 200, "{}", reset.body);
    assert_eq!(reset.json()["reset"], true);
    assert_eq!(reset.json()["counters_removed"], 1);
    let reset_at = Instant::now();

    // Bounded poll: the second instance admits once it reads the store again.
    let mut admitted = None;
    while reset_at.elapsed() < Duration::from_secs(15) {
        let answer = second.post("/v1/check", check("k", "api")).await;
        if answer.status == 200 {
            admitted = Some((reset_at.elapsed(), answer));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (took, answer) = admitted.expect("the second instance never admitted after the reset");
    assert_eq!(answer.json()["source"], "store");
    assert_eq!(answer.json()["remaining"], 2, "counted from zero");
    println!(
        "FIGURE reset reached the second instance in {} ms (near_cache.revalidate_ms = 1000)",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");

    // Bad input names its field.
    let unknown = first.post("/v1/reset", check("k", "nope")).await;
    assert_eq!(unknown.status, 400);
    assert!(unknown.error().starts_with("policy: "), "{}", unknown.body);
    let no_key = first
        .post("/v1/reset", serde_json::json!({ "policy": "api" }))
        .await;
    assert!(no_key.error().starts_with("key: "), "{}", no_key.body);
    let inline = first
        .post(
            "/v1/reset",
            serde_json::json!({ "key": "k", "limits": [{ "limit": 1, "window": "1m" }] }),
        )
        .await;
    assert_eq!(inline.json()["policy"], "inline", "{}", inline.body);
}

#[tokio::test]
async fn hot_rejects_cost_one_store_read_per_key_per_interval() {
    let clock = ManualClock::new(common::today_ms() + 1_000);
    let store = MemcachedStore::connect(&common::memcached_options(vec![
        common::shared_memcached().addr(),
    ]))
    .await
    .unwrap();
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .near_cache_revalidate(Duration::from_millis(1000))
        .build();
    let policy = Policy::new(
        "api",
        vec![Limit::per(2, Duration::from_secs(3600)).unwrap()],
    )
    .unwrap();
    for _ in 0..2 {
        assert!(limiter.check("hot", &policy, 1).await.unwrap().allowed);
    }
    assert!(!limiter.check("hot", &policy, 1).await.unwrap().allowed);
    let before = limiter.metrics().store_calls;
    // 10 seconds of a hot key refused 200 times a second.
    let (seconds, per_second) = (10u64, 200u64);
    let mut from_store = 0;
    for _ in 0..seconds * per_second {
        clock.advance(Duration::from_millis(1000 / per_second));
        let decision = limiter.check("hot", &policy, 1).await.unwrap();
        assert!(!decision.allowed);
        from_store += u64::from(decision.source == Source::Store);
    }
    let calls = limiter.metrics().store_calls - before;
    println!(
        "FIGURE hot rejects: {calls} store calls for {} refusals over {seconds} s: {:.1} store reads per hot key per second",
        seconds * per_second,
        calls as f64 / seconds as f64
    );
    // One read per interval: not none (a reset must be seen), not more.
    assert_eq!(calls, seconds, "one store read per second");
    assert_eq!(from_store, seconds);
}

#[tokio::test]
async fn the_most_limited_keys_come_first() {
    let text = on_memcached(
        &common::unique_namespace(),
        "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n\
         [policies.login]\nlimits = [{ limit = 1, window = \"1h\" }]\n",
    );
    let service = Service::start(&text).await;
    for (key, policy, refusals) in [
        ("heavy", "api", 6),
        ("medium", "login", 4),
        ("light", "api", 2),
    ] {
        for _ in 0..=refusals {
            service.post("/v1/check", check(key, policy)).await;
        }
    }
    let limited = service.get("/v1/limited?top=2").await;
    assert_eq!(limited.status, 200, "{}", limited.body);
    let keys = limited.json()["keys"].as_array().unwrap().clone();
    let found: Vec<(String, String, u64)> = keys
        .iter()
        .map(|entry| {
            (
                entry["key"].as_str().unwrap().to_owned(),
                entry["policy"].as_str().unwrap().to_owned(),
                entry["refused"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("heavy".to_owned(), "api".to_owned(), 6),
            ("medium".to_owned(), "login".to_owned(), 4)
        ]
    );
    assert!(keys[0]["last_refused_ms_ago"].as_u64().unwrap() < 60_000);
    assert_eq!(
        service.get("/v1/limited").await.json()["keys"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    for bad in ["top=0", "top=1001", "top=x", "count=3"] {
        let answer = service.get(&format!("/v1/limited?{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}");
        let field = bad.split('=').next().unwrap();
        assert!(
            answer.error().starts_with(&format!("{field}: ")),
            "{}",
            answer.body
        );
    }
    let no_token = http::get(service.addr, "/v1/limited").await;
    assert_eq!(no_token.status, 401);
}

#[test]
fn the_sketch_keeps_the_heavy_hitters_in_bounded_memory_under_a_flood() {
    let now = 1_700_000_000_000u64;
    let flood = |distinct: u64| {
        let before = live_bytes();
        let mut top = TopRefused::new(1024);
        // Over 50 s: heavy hitters among `distinct` one-shot keys.
        for index in 0..distinct {
            let at = now + index * 50_000 / distinct;
            top.record("api", &format!("flood-{index}"), at);
            if index % 100 == 0 {
                top.record("api", "heavy-1", at);
                top.record("api", "heavy-1", at);
                top.record("login", "heavy-2", at);
            }
        }
        let bytes = live_bytes() - before;
        (top, bytes)
    };
    let (top, bytes) = flood(100_000);
    let (_, bytes_10k) = flood(10_000);
    let found = top.top(2, now + 50_000);
    assert_eq!(
        (found[0].key.as_str(), found[1].key.as_str()),
        ("heavy-1", "heavy-2"),
        "{found:?}"
    );
    // Every refusal of the heavy hitters is counted (over-estimates only).
    assert!(
        found[0].refused >= 2_000 && found[1].refused >= 1_000,
        "{found:?}"
    );
    assert!(top.held() <= 6 * 1024);
    println!(
        "FIGURE top-k memory: {:.2} MiB after 100,000 distinct refused keys ({:.2} MiB after 10,000); {} keys held",
        bytes as f64 / 1048576.0,
        bytes_10k as f64 / 1048576.0,
        top.held()
    );
    assert!(bytes < 4 * 1024 * 1024, "{bytes} bytes");
    assert!(
        (bytes as f64) < 1.5 * bytes_10k as f64,
        "memory grows with the keys: {bytes} vs {bytes_10k}"
    );
}

#[tokio::test]
async fn exempt_keys_and_addresses_pass_uncounted_and_follow_reloads() {
    let exempting = "[auth]\ntrusted_proxies = [\"127.0.0.1\"]\nexempt_addresses = [\"127.0.0.2\"]\n\
         [policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n\
         exempt_keys = [\"health-checker\", \"internal-*\"]\n";
    let namespace = common::unique_namespace();
    let service = Service::start(&on_memcached(&namespace, exempting)).await;
    for key in ["health-checker", "internal-batch", "health-checker"] {
        let answer = service.post("/v1/check", check(key, "api")).await;
        assert_eq!(answer.status, 200, "{key}: {}", answer.body);
        assert_eq!(answer.json()["allowed"], true);
        assert_eq!(answer.json()["source"], "exempt");
        assert!(answer.header("ratelimit").is_none());
    }
    assert_eq!(
        service
            .post("/v1/check", check("client", "api"))
            .await
            .status,
        200
    );
    assert_eq!(
        service
            .post("/v1/check", check("client", "api"))
            .await
            .status,
        429
    );

    let auth = format!("Bearer {TOKEN}");
    let through = |from: &'static str, forwarded: Option<&'static str>| {
        let auth = auth.clone();
        let addr = service.addr;
        async move {
            let mut headers = vec![("authorization", auth.as_str())];
            if let Some(forwarded) = forwarded {
                headers.push(("x-forwarded-for", forwarded));
            }
            http::get_from(from.parse().unwrap(), addr, "/v1/auth?policy=api", &headers)
                .await
                .status
        }
    };
    for _ in 0..3 {
        assert_eq!(through("127.0.0.2", None).await, 200, "an exempt client");
        assert_eq!(
            through("127.0.0.1", Some("127.0.0.2")).await,
            200,
            "behind a proxy"
        );
    }
    assert_eq!(through("127.0.0.3", None).await, 200);
    assert_eq!(through("127.0.0.3", None).await, 429);
    // A client cannot claim an exempt address: 127.0.0.3 is no proxy.
    assert_eq!(through("127.0.0.3", Some("127.0.0.2")).await, 429);

    let metrics = http::get(service.addr, "/metrics").await.body;
    let exempt = metrics
        .lines()
        .find(|line| {
            line.starts_with("slidegate_decisions_total{")
                && line.contains("policy=\"api\"")
                && line.contains("outcome=\"exempt\"")
        })
        .unwrap_or_else(|| panic!("no exempt series in {metrics}"));
    assert!(exempt.ends_with(" 9"), "{exempt}");

    // Live on reload: without the exemptions, the same key is limited.
    let mut reloader = Reloader::new(
        overrides(&service.file),
        Config::load(&overrides(&service.file)).unwrap(),
    );
    let plain = exempting.replace("exempt_keys = [\"health-checker\", \"internal-*\"]\n", "");
    let plain = plain.replace("exempt_addresses = [\"127.0.0.2\"]\n", "");
    std::fs::write(&service.file, on_memcached(&namespace, &plain)).unwrap();
    server::reload::reload_once(&service.app, &mut reloader, "test");
    assert_eq!(
        service
            .post("/v1/check", check("health-checker", "api"))
            .await
            .status,
        200
    );
    assert_eq!(
        service
            .post("/v1/check", check("health-checker", "api"))
            .await
            .status,
        429
    );
    assert_eq!(through("127.0.0.2", None).await, 200);
    assert_eq!(through("127.0.0.2", None).await, 429);

    // A bad pattern names its field.
    let bad = Config::resolve(
        Some((
            Path::new("s.toml"),
            "[policies.api]\nlimits = [{ limit = 1, window = \"1s\" }]\nexempt_keys = [\"a*b\"]",
        )),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.starts_with("s.toml: policies.api.exempt_keys[0]: "),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_validates_and_so_do_live_answers() {
    let document = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.json");
    let text = on_memcached(
        &common::unique_namespace(),
        "[policies.api]\nlimits = [{ limit = 1, window = \"1h\" }]\n",
    );
    let service = Service::start(&text).await;

    let served = http::get(service.addr, "/openapi.json").await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, std::fs::read_to_string(&document).unwrap());

    let mut answers = Vec::new();
    let mut keep = |method: &str, path: &str, template: &str, answer: Response| {
        answers.push(serde_json::json!({
            "method": method,
            "path": path,
            "template": template,
            "status": answer.status,
            "content_type": answer.header("content-type").unwrap_or_default().split(';').next().unwrap_or_default(),
            "body": answer.body,
        }));
    };
    let statuses = |answers: &Vec<serde_json::Value>| -> Vec<(String, u64)> {
        answers
            .iter()
            .map(|a| {
                (
                    a["template"].as_str().unwrap().to_owned(),
                    a["status"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        service.post("/v1/check", check("k", "nope")).await,
    );
    keep(
        "POST",
        "/v1/check",
        "/v1/check",
        http::post(service.addr, "/v1/check", "{}").await,
    );
    keep(
        "POST",
        "/v1/peek",
        "/v1/peek",
        service.post("/v1/peek", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/report",
        "/v1/report",
        service.post("/v1/report", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/reset",
        "/v1/reset",
        service.post("/v1/reset", check("k", "api")).await,
    );
    keep(
        "POST",
        "/v1/reset",
        "/v1/reset",
        service.post("/v1/reset", check("k", "nope")).await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        service.get("/v1/limited").await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        service.get("/v1/limited?top=0").await,
    );
    keep(
        "GET",
        "/v1/limited",
        "/v1/limited",
        http::get(service.addr, "/v1/limited").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=api").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=api").await,
    );
    keep(
        "GET",
        "/v1/auth",
        "/v1/auth",
        service.get("/v1/auth?policy=nope").await,
    );
    keep(
        "GET",
        "/v1/auth/api",
        "/v1/auth/{policy}",
        service.get("/v1/auth/api/x").await,
    );
    keep(
        "GET",
        "/v1/status",
        "/v1/status",
        service.get("/v1/status").await,
    );
    keep(
        "GET",
        "/healthz",
        "/healthz",
        http::get(service.addr, "/healthz").await,
    );
    keep(
        "GET",
        "/readyz",
        "/readyz",
        http::get(service.addr, "/readyz").await,
    );
    let seen = statuses(&answers);
    for expected in [
        ("/v1/check", 200),
        ("/v1/check", 429),
        ("/v1/check", 400),
        ("/v1/check", 401),
        ("/v1/reset", 200),
        ("/v1/reset", 400),
        ("/v1/limited", 200),
        ("/v1/limited", 400),
        ("/v1/limited", 401),
        ("/v1/auth", 200),
        ("/v1/auth", 429),
        ("/v1/auth", 400),
    ] {
        assert!(
            seen.contains(&(expected.0.to_owned(), expected.1)),
            "{expected:?} not among {seen:?}"
        );
    }

    let found = tools::python_with(
        &[
            "openapi-spec-validator==0.7.1",
            "jsonschema==4.23.0",
            "openapi-python-client==0.29.1",
        ],
        "openapi_spec_validator, jsonschema, openapi_python_client",
    );
    let Some(python) = tools::require(
        "the_openapi_document_validates_and_so_do_live_answers",
        "python openapi-spec-validator, jsonschema, openapi-python-client (pip)",
        found,
    ) else {
        return;
    };
    let answers_file = common::process::temp_dir("slidegate-openapi").join("answers.json");
    std::fs::write(&answers_file, serde_json::to_string(&answers).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ops/openapi_check.py");
    let output = Command::new(&python)
        .arg(script)
        .arg(&document)
        .arg(&answers_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{report}");
    assert!(
        report.contains("the document is valid OpenAPI 3.1.0"),
        "{report}"
    );

    // A client generated from the document, used as generated.
    let generated = common::process::temp_dir("slidegate-client");
    let generator = python.with_file_name("openapi-python-client");
    let made = Command::new(generator)
        .args(["generate", "--meta", "none", "--path"])
        .arg(&document)
        .current_dir(&generated)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}{}",
        String::from_utf8_lossy(&made.stdout),
        String::from_utf8_lossy(&made.stderr)
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ops/generated_client.py");
    let used = Command::new(&python)
        .arg(script)
        .arg(&generated)
        .arg(format!("http://{}", service.addr))
        .arg(TOKEN)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&used.stdout),
        String::from_utf8_lossy(&used.stderr)
    );
    println!("{said}");
    assert!(used.status.success(), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_in_headless_chromium() {
    // The embedded store, tokens required: the page gets its token from
    // its address.
    let text = format!(
        "[server]\napi_tokens = [\"{TOKEN}\"]\n[policies.api]\n\
         limits = [{{ limit = 1, window = \"1m\" }}, {{ limit = 100, window = \"1h\", precision = 6 }}]\n"
    );
    let service = Service::start(&text).await;
    service.post("/v1/check", check("page-client", "api")).await;
    service.post("/v1/check", check("page-client", "api")).await;
    service
        .post("/v1/check", check("<b>not-html</b>", "api"))
        .await;
    service
        .post("/v1/check", check("<b>not-html</b>", "api"))
        .await;

    let page = http::get(service.addr, "/").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        !page.body.contains("http://") && !page.body.contains("https://"),
        "no external assets"
    );

    let found = tokio::task::spawn_blocking(|| tools::debian("chromium", "chromium"))
        .await
        .unwrap();
    let Some(chromium) = tools::require(
        "the_status_page_renders_in_headless_chromium",
        "chromium",
        found,
    ) else {
        return;
    };
    let profile = common::process::temp_dir("slidegate-chromium");
    let url = format!("http://{}/#token={TOKEN}", service.addr);
    // --virtual-time-budget lets the page's fetch and script finish before
    // the DOM is dumped; the poll below bounds the whole attempt.
    let started = Instant::now();
    let mut dom = String::new();
    while started.elapsed() < Duration::from_secs(90) {
        let output = tokio::process::Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--virtual-time-budget=5000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--dump-dom")
            .arg(&url)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(60), output)
            .await
            .expect("chromium finished within 60 s")
            .expect("chromium ran");
        dom = String::from_utf8_lossy(&output.stdout).into_owned();
        if dom.contains("page-client") {
            break;
        }
        eprintln!(
            "chromium's DOM has no data yet: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Text only the page's script writes, from /v1/status.
    for expected in [
        "embedded (in memory)",
        "1 per 1m, 100 per 1h (precision 6)",
        "page-client",
        "&lt;b&gt;not-html&lt;/b&gt;",
    ] {
        assert!(dom.contains(expected), "{expected:?} not in {dom}");
    }
    assert!(!dom.contains("<b>not-html"), "a key was written as HTML");
    assert!(
        dom.contains("<p id=\"problem\"></p>"),
        "the page reports a problem: {dom}"
    );
    assert!(!dom.contains("Updated <span id=\"updated\">never"), "{dom}");
}
