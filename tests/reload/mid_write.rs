//! A file caught mid-write: editors and shell redirection truncate, then
//! write, and a reload can read the file between the two. A reload that
//! would turn the token guard off, or leave no policy where there were
//! some, is refused like a bad file: the running configuration stays, the
//! log says which and why, and the failure is counted. A restart applies
//! such a file on purpose.

use std::net::SocketAddr;
use std::path::Path;

use crate::common::{http, process};

use super::{TOKEN_A, eventually, hang_up, metric, start_listening};

/// What reloads the file: the watch, or (watch off) SIGHUP.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ReloadBy {
    Watch,
    Hangup,
}

impl ReloadBy {
    fn watch_ms(self) -> u32 {
        match self {
            ReloadBy::Watch => 100,
            ReloadBy::Hangup => 0,
        }
    }
}

/// The file's first part: its policies. The `[server]` section with the
/// token comes after it, so a file cut in the middle keeps the policies
/// and loses the guard.
fn policies(reload_by: ReloadBy) -> String {
    format!(
        "[reload]\nwatch_ms = {}\n\n\
         [policies.api]\nlimits = [{{ limit = 1000, window = \"1h\" }}]\n\n\
         [policies.search]\nlimits = [{{ limit = 1000, window = \"1h\" }}]\n\n",
        reload_by.watch_ms()
    )
}

fn whole(reload_by: ReloadBy) -> String {
    format!(
        "{}[server]\napi_tokens = [{TOKEN_A:?}]\n",
        policies(reload_by)
    )
}

async fn call(addr: SocketAddr, method: &str, path: &str, token: bool, body: &str) -> u16 {
    let authorization = format!("Bearer {TOKEN_A}");
    let headers: &[(&str, &str)] = if token {
        &[("authorization", &authorization)]
    } else {
        &[]
    };
    http::send(addr, method, path, headers, body.to_owned())
        .await
        .status
}

const NAMED: &str = r#"{"key": "k", "policy": "api"}"#;
const INLINE: &str = r#"{"key": "k", "limits": [{"limit": 1000, "window": "1h"}]}"#;

/// Every route that needs a token, called without one: each status.
async fn without_a_token(addr: SocketAddr) -> Vec<(&'static str, u16)> {
    vec![
        (
            "POST /v1/check (named)",
            call(addr, "POST", "/v1/check", false, NAMED).await,
        ),
        (
            "POST /v1/check (inline)",
            call(addr, "POST", "/v1/check", false, INLINE).await,
        ),
        (
            "POST /v1/reset",
            call(addr, "POST", "/v1/reset", false, NAMED).await,
        ),
        (
            "GET /v1/limited",
            call(addr, "GET", "/v1/limited", false, "").await,
        ),
    ]
}

/// Wait until a reload of the file has been tried and has ended, either
/// way: the number of reloads counted `ok` plus `failed` reaches `count`.
async fn reloads_tried(addr: SocketAddr, count: f64) {
    eventually("the reload tried", || async {
        let ok = metric(addr, "slidegate_config_reloads_total{result=\"ok\"}").await;
        let failed = metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await;
        ok.unwrap_or(0.0) + failed.unwrap_or(0.0) >= count
    })
    .await;
}

/// The file as a writer leaves it between its truncation and its last
/// write: `text`, written over the whole file, then the reload it causes.
async fn caught_with(config: &Path, text: &str, daemon: &super::Slidegate, reload_by: ReloadBy) {
    std::fs::write(config, text).unwrap();
    if reload_by == ReloadBy::Hangup {
        hang_up(daemon);
    }
    reloads_tried(daemon.addr, 1.0).await;
}

/// The issue's case: `[server]` after the policies, the file cut before
/// it. Without a token, every route that needs one must still answer 401.
async fn a_file_cut_before_its_tokens_keeps_the_guard(reload_by: ReloadBy) {
    let dir = process::temp_dir("slidegate-cut-tokens");
    let config = dir.join("slidegate.toml");
    std::fs::write(&config, whole(reload_by)).unwrap();
    let addr = process::free_addr();
    let daemon = start_listening(&config, &dir, Some(addr), &[addr]);
    assert!(
        without_a_token(addr)
            .await
            .iter()
            .all(|(_, status)| *status == 401)
    );

    caught_with(&config, &policies(reload_by), &daemon, reload_by).await;
    let answered = without_a_token(addr).await;
    assert!(
        answered.iter().all(|(_, status)| *status == 401),
        "{reload_by:?}: a file cut before its tokens opened the API: {answered:?}\n{}",
        daemon.log()
    );
    assert_eq!(call(addr, "POST", "/v1/check", true, NAMED).await, 200);
    // At least once: a watch that caught the file empty, between its
    // truncation and its write, refused that too.
    let failed = metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await;
    assert!(
        failed.is_some_and(|failed| failed >= 1.0),
        "{reload_by:?}: the refusal is counted: {failed:?}"
    );
    let log = daemon.log();
    assert!(
        log.contains("configuration NOT reloaded") && log.contains("server.api_tokens"),
        "{reload_by:?}: the log says which and why:\n{log}"
    );

    // The rest of the write lands: the whole file is applied.
    std::fs::write(&config, whole(reload_by)).unwrap();
    if reload_by == ReloadBy::Hangup {
        hang_up(&daemon);
    }
    super::reloaded(addr, 1.0).await;
    assert!(
        without_a_token(addr)
            .await
            .iter()
            .all(|(_, status)| *status == 401)
    );

    // A restart applies such a file on purpose: that is how the guard is
    // turned off.
    drop(daemon);
    let dir = process::temp_dir("slidegate-cut-tokens-restart");
    let config = dir.join("slidegate.toml");
    std::fs::write(&config, policies(reload_by)).unwrap();
    let addr = process::free_addr();
    let _daemon = start_listening(&config, &dir, Some(addr), &[addr]);
    assert_eq!(call(addr, "POST", "/v1/check", false, NAMED).await, 200);
}

#[tokio::test]
async fn a_watched_file_cut_before_its_tokens_keeps_the_guard() {
    a_file_cut_before_its_tokens_keeps_the_guard(ReloadBy::Watch).await;
}

#[tokio::test]
async fn a_file_cut_before_its_tokens_and_a_sighup_keep_the_guard() {
    a_file_cut_before_its_tokens_keeps_the_guard(ReloadBy::Hangup).await;
}

/// A file caught empty: the policies stay (a named check is decided, not a
/// 400 "no policy named"), and so does the guard.
#[tokio::test]
async fn an_emptied_file_keeps_the_policies_and_the_guard() {
    let reload_by = ReloadBy::Watch;
    let dir = process::temp_dir("slidegate-emptied");
    let config = dir.join("slidegate.toml");
    std::fs::write(&config, whole(reload_by)).unwrap();
    let addr = process::free_addr();
    let daemon = start_listening(&config, &dir, Some(addr), &[addr]);

    caught_with(&config, "", &daemon, reload_by).await;
    let named = http::send(
        addr,
        "POST",
        "/v1/check",
        &[("authorization", &format!("Bearer {TOKEN_A}"))],
        NAMED,
    )
    .await;
    assert_eq!(
        named.status,
        200,
        "an emptied file took the policies away: {}\n{}",
        named.body,
        daemon.log()
    );
    let answered = without_a_token(addr).await;
    assert!(
        answered.iter().all(|(_, status)| *status == 401),
        "an emptied file opened the API: {answered:?}"
    );
    let log = daemon.log();
    assert!(
        log.contains("configuration NOT reloaded") && log.contains("policies"),
        "the log says which and why:\n{log}"
    );
}

/// Policies the file still has, some taken out, are no such case: the
/// reload applies. Only "every policy gone" is refused.
#[tokio::test]
async fn a_reload_that_keeps_one_policy_applies() {
    let reload_by = ReloadBy::Hangup;
    let dir = process::temp_dir("slidegate-fewer-policies");
    let config = dir.join("slidegate.toml");
    std::fs::write(&config, whole(reload_by)).unwrap();
    let addr = process::free_addr();
    let daemon = start_listening(&config, &dir, Some(addr), &[addr]);
    let search = "[policies.search]\nlimits = [{ limit = 1000, window = \"1h\" }]\n\n";
    let fewer = whole(reload_by).replace(search, "");
    assert_ne!(fewer, whole(reload_by));
    std::fs::write(&config, fewer).unwrap();
    hang_up(&daemon);
    super::reloaded(addr, 1.0).await;
    let search = r#"{"key": "k", "policy": "search"}"#;
    assert_eq!(call(addr, "POST", "/v1/check", true, search).await, 400);
}
