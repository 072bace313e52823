//! The server's guard on the gRPC face: API tokens, the connection cap it
//! shares with the HTTP API, and the quiet timeout that frees the place of
//! a silent connection.

use std::time::Duration;

use slidegate::config::{ApiTokens, ServerGuard};
use slidegate::server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

use super::{CONFIG, Code, RateLimitServiceClient, TestRls, ask, descriptor, memory, request};
use crate::common::in_process;

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
