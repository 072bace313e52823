//! A token taken out of the configuration, wherever it is written, is
//! refused on the very next call after the reload, on the HTTP API and on
//! RLS, and the token that stays keeps working.

use std::net::SocketAddr;

use crate::common::{http, process};

#[cfg(feature = "grpc")]
use super::rls_call_with;
use super::{TOKEN_A, TOKEN_B, hang_up, reloaded, start_listening};

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

/// Every token revoked (or a tokens file caught empty mid-write): the
/// guard stays on and refuses every call, rather than turning off.
async fn with_no_token_left_every_call_is_refused(tokens_in: TokensIn) {
    let dir = process::temp_dir("slidegate-revoke-all");
    let config = dir.join("slidegate.toml");
    let addr = process::free_addr();
    let server = match tokens_in {
        TokensIn::List => "api_tokens = []".to_owned(),
        TokensIn::File | TokensIn::FileWatched => {
            std::fs::write(dir.join("tokens"), format!("{TOKEN_A}\n")).unwrap();
            "api_tokens_file = \"tokens\"".to_owned()
        }
    };
    let write_config = |server: &str| {
        std::fs::write(
            &config,
            format!("[reload]\nwatch_ms = 100\n[server]\n{server}\n"),
        )
        .unwrap();
    };
    match tokens_in {
        TokensIn::List => write_config(&format!("api_tokens = [{TOKEN_A:?}]")),
        TokensIn::File | TokensIn::FileWatched => write_config(&server),
    }
    let _daemon = start_listening(&config, &dir, Some(addr), &[addr]);
    assert_eq!(check_with(addr, TOKEN_A).await, 200);

    match tokens_in {
        TokensIn::List => write_config(&server),
        TokensIn::File | TokensIn::FileWatched => {
            std::fs::write(dir.join("tokens"), "# every token revoked\n").unwrap();
        }
    }
    reloaded(addr, 1.0).await;
    assert_eq!(check_with(addr, TOKEN_A).await, 401, "{tokens_in:?}");
    let bare = http::send(
        addr,
        "POST",
        "/v1/check",
        &[],
        r#"{"key": "k", "limits": [{"limit": 1000, "window": "1h"}]}"#,
    )
    .await;
    assert_eq!(
        bare.status, 401,
        "{tokens_in:?}: with no token left the API is open"
    );
}

#[tokio::test]
async fn an_emptied_tokens_file_refuses_every_call() {
    with_no_token_left_every_call_is_refused(TokensIn::FileWatched).await;
}

#[tokio::test]
async fn an_emptied_token_list_refuses_every_call() {
    with_no_token_left_every_call_is_refused(TokensIn::List).await;
}

/// A request is decided under one configuration: the one in force when its
/// token was checked. Here a request's headers (with a token) arrive, then
/// a reload revokes that token and removes the policy it names, then its
/// body arrives: it is decided under the configuration whose token it
/// carried (200), not under the new policies with the revoked token, which
/// named its policy unknown (400).
#[tokio::test]
async fn a_request_is_decided_under_the_configuration_its_token_was_checked_by() {
    use tokio::io::AsyncWriteExt;

    let dir = process::temp_dir("slidegate-one-config");
    let config = dir.join("slidegate.toml");
    let write = |tokens: &[&str], policy: &str| {
        let quoted: Vec<String> = tokens.iter().map(|t| format!("{t:?}")).collect();
        std::fs::write(
            &config,
            format!(
                "[reload]\nwatch_ms = 0\n[server]\napi_tokens = [{}]\n\
                 [policies.{policy}]\nlimits = [{{ limit = 1000, window = \"1h\" }}]\n",
                quoted.join(", ")
            ),
        )
        .unwrap();
    };
    write(&[TOKEN_A, TOKEN_B], "api");
    let addr = process::free_addr();
    let daemon = start_listening(&config, &dir, Some(addr), &[addr]);

    let body = r#"{"key": "k", "policy": "api"}"#;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nhost: slidegate\r\nauthorization: Bearer {TOKEN_A}\r\n\
         content-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // The head is read and its token checked; the body has not come yet.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    write(&[TOKEN_B], "other");
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    assert_eq!(check_with(addr, TOKEN_A).await, 401, "the token is revoked");

    let answer = http::raw_exchange(
        &mut stream,
        body.as_bytes(),
        std::time::Duration::from_secs(10),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "decided under the new policies with the revoked token:\n{answer}"
    );
}
