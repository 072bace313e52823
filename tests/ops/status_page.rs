//! The status page, rendered by headless Chromium: what its script fetches
//! is on the page, and keys are written as text, never as HTML.

use std::time::{Duration, Instant};

use super::{Service, TOKEN, check};
use crate::common::{self, http, tools};

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

    let url = format!("http://{}/#token={TOKEN}", service.addr);
    let Some(dom) = rendered(
        "the_status_page_renders_in_headless_chromium",
        &url,
        "page-client",
    )
    .await
    else {
        return;
    };
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

/// The DOM headless Chromium renders from `url` once it contains `awaited`
/// (text only the page's script writes), or `None` when Chromium is not
/// installed and the test may skip (never under CI=true).
pub(super) async fn rendered(test: &str, url: &str, awaited: &str) -> Option<String> {
    let found = tokio::task::spawn_blocking(|| tools::debian("chromium", "chromium"))
        .await
        .unwrap();
    let chromium = tools::require(test, "chromium", found)?;
    let profile = common::process::temp_dir("slidegate-chromium");
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
            .arg(url)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(60), output)
            .await
            .expect("chromium finished within 60 s")
            .expect("chromium ran");
        dom = String::from_utf8_lossy(&output.stdout).into_owned();
        if dom.contains(awaited) {
            break;
        }
        eprintln!(
            "chromium's DOM has no data yet: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Some(dom)
}
