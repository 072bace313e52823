//! What the engineer on call reads with the store down, on a real
//! memcached killed under a running instance: `/v1/status` names the
//! failure mode, what this instance does now in words, and the last store
//! error; and names the instance, its version and uptime. The page shows
//! the same, rendered by headless Chromium.

use super::status_page::rendered;
use super::{Service, TOKEN, check};
use crate::common::{self, wait};

/// An instance on a memcached of its own, with `failure.mode = mode`.
pub(super) async fn on_own_memcached(mode: &str) -> (common::Memcached, Service) {
    let memcached = common::Memcached::start();
    let text = format!(
        "[memcached]\nservers = [\"{}\"]\nnamespace = \"{}\"\ntimeout_ms = 500\n\
         [server]\napi_tokens = [\"{TOKEN}\"]\n[failure]\nmode = \"{mode}\"\n\
         [policies.api]\nlimits = [{{ limit = 5, window = \"1m\" }}]\n",
        memcached.addr(),
        common::unique_namespace(),
    );
    let service = Service::start(&text).await;
    (memcached, service)
}

async fn status(service: &Service) -> serde_json::Value {
    let answer = service.get("/v1/status").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    serde_json::from_str(&answer.body).unwrap()
}

/// `/v1/status` once this instance has seen the store fail.
pub(super) async fn status_with_the_store_down(
    memcached: &mut common::Memcached,
    service: &Service,
) -> serde_json::Value {
    memcached.kill();
    // A check meets the outage too, as a client's would.
    service.post("/v1/check", check("on-call", "api")).await;
    wait::until(
        "/v1/status to say the store is down",
        wait::PATIENCE,
        || async {
            let status = status(service).await;
            (status["store"]["ready"] == false).then_some(status)
        },
    )
    .await
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// The figures every answer carries, store up or down.
fn assert_names_the_instance(status: &serde_json::Value) {
    assert_eq!(status["instance"], this_host().as_str(), "{status:#}");
    assert_eq!(
        status["version"],
        env!("SLIDEGATE_VERSION"),
        "the version --version prints: {status:#}"
    );
    let uptime = status["uptime_s"].as_u64().expect("uptime_s");
    assert!(
        uptime < 600,
        "uptime counts from this instance's start: {uptime}"
    );
}

async fn assert_store_down_says(mode: &str, sentence: &str) {
    let (mut memcached, service) = on_own_memcached(mode).await;
    let up = status(&service).await;
    assert_eq!(up["failure_mode"], mode, "{up:#}");
    assert_eq!(up["store"]["ready"], true, "{up:#}");
    assert!(up["failing"].is_null(), "the store answers: {up:#}");
    assert!(up["store"]["last_error"].is_null(), "no error yet: {up:#}");
    assert_names_the_instance(&up);

    let down = status_with_the_store_down(&mut memcached, &service).await;
    assert_eq!(down["failure_mode"], mode, "{down:#}");
    assert_eq!(down["failing"], sentence, "{down:#}");
    let error = &down["store"]["last_error"];
    let message = error["message"].as_str().expect("the error's text");
    assert!(!message.is_empty(), "{down:#}");
    let ago = error["ms_ago"].as_u64().expect("how long ago");
    assert!(ago < 60_000, "{down:#}");
    assert_names_the_instance(&down);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_under_allow_says_limits_are_not_enforced() {
    assert_store_down_says("allow", "failing open: limits are not enforced").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_under_deny_says_every_check_is_refused() {
    assert_store_down_says("deny", "failing closed: every check refused").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_down_under_local_says_this_instance_decides() {
    assert_store_down_says("local", "deciding locally on this instance").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_names_the_failure_mode_and_the_instance() {
    let (mut memcached, service) = on_own_memcached("allow").await;
    status_with_the_store_down(&mut memcached, &service).await;
    let url = format!("http://{}/#token={TOKEN}", service.addr);
    let sentence = "failing open: limits are not enforced";
    let Some(dom) = rendered(
        "the_status_page_names_the_failure_mode_and_the_instance",
        &url,
        sentence,
    )
    .await
    else {
        return;
    };
    let version = env!("SLIDEGATE_VERSION");
    let host = this_host();
    // The page asks the store again, so its error may be a newer one
    // (a refused connect after a dropped one): its text is the store's.
    let address = memcached.addr();
    let last_error = format!("ago: unreachable: cannot connect to {address}");
    for expected in [
        sentence,
        "NOT ready",
        "failure mode: allow",
        "Last store error, ",
        last_error.as_str(),
        host.as_str(),
        version,
        "this instance",
    ] {
        assert!(dom.contains(expected), "{expected:?} not in {dom}");
    }
    let uptime = dom
        .split_once("<span id=\"uptime\">")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    assert!(
        uptime.starts_with(|c: char| c.is_ascii_digit()),
        "the uptime, in figures: {dom}"
    );
}

/// An outage that only clients' checks met, between two looks at the page,
/// is still told once the store is back: the last error is every error
/// this instance met, not only what the page itself ran into.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_only_checks_met_is_told_once_the_store_is_back() {
    let (mut memcached, service) = on_own_memcached("allow").await;
    let up = status(&service).await;
    assert!(up["store"]["last_error"].is_null(), "no error yet: {up:#}");

    memcached.kill();
    let answer = service
        .post("/v1/check", check("between-looks", "api"))
        .await;
    assert!(
        answer.body.contains("\"source\":\"fallback\""),
        "the check met the outage: {}",
        answer.body
    );
    memcached.restart();
    // /readyz, not the page: the page would meet the outage itself.
    wait::until("the store to answer again", wait::PATIENCE, || async {
        (service.get("/readyz").await.status == 200).then_some(())
    })
    .await;

    let back = status(&service).await;
    assert_eq!(back["store"]["ready"], true, "{back:#}");
    assert!(back["failing"].is_null(), "the store answers: {back:#}");
    let error = &back["store"]["last_error"];
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&memcached.addr()),
        "the check's error, naming the node: {back:#}"
    );
}
