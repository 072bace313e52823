//! The `[server]` section applies live: the token on `/metrics` and the
//! connection cap.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{http, process};

use super::{TOKEN_B, eventually, hang_up, start};

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

    // A keep-alive connection opened before the cap is lowered stays, and
    // keeps being served (the README: "connections already open over a
    // lowered cap stay").
    let mut kept = tokio::net::TcpStream::connect(addr).await.unwrap();
    let ask_health = b"GET /healthz HTTP/1.1\r\nhost: slidegate\r\n\r\n";
    assert!(answered(&mut kept, ask_health).await, "before the cap");
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
    // Over the lowered cap (it and the probes above), it is still served.
    assert!(answered(&mut kept, ask_health).await, "after the cap");
    assert!(!daemon.log().contains("restart needed"), "{}", daemon.log());
}

/// Whether `request`, written on `stream`, is answered 200 (a keep-alive
/// connection: the answer is read by its length, the connection stays).
async fn answered(stream: &mut tokio::net::TcpStream, request: &[u8]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.write_all(request).await.is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    let read = async {
        while !answer.windows(4).any(|window| window == b"\r\n\r\n") || !answer.ends_with(b"}") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    answer.starts_with(b"HTTP/1.1 200")
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

/// `[auth]` applies live: the configured `deny_status` answers the path
/// form's refusals (it has no query to set one), and a reload's new status
/// and trusted proxies answer the next request.
#[tokio::test]
async fn the_auth_section_applies_live() {
    let dir = process::temp_dir("slidegate-auth-live");
    let config = dir.join("slidegate.toml");
    let write = |deny: u16, trusted: &str| {
        std::fs::write(
            &config,
            format!(
                "[reload]\nwatch_ms = 0\n[auth]\ndeny_status = {deny}\ntrusted_proxies = [{trusted}]\n\
                 [policies.api]\nlimits = [{{ limit = 1, window = \"1h\" }}]\n"
            ),
        )
        .unwrap();
    };
    write(403, "");
    let (daemon, addr) = start(&config, &dir);
    let ask = |forwarded: &'static str| async move {
        http::send(
            addr,
            "GET",
            "/v1/auth/api/orders",
            &[("x-forwarded-for", forwarded)],
            Vec::new(),
        )
        .await
    };
    // Untrusted, the forwarded address is ignored: both are the peer's.
    assert_eq!(ask("192.0.2.1").await.status, 200);
    assert_eq!(
        ask("192.0.2.2").await.status,
        403,
        "the configured deny_status"
    );

    write(451, "\"127.0.0.1\"");
    hang_up(&daemon);
    eventually("the reloaded [auth]", || async {
        // Trusted now: each forwarded client counts apart.
        ask("192.0.2.3").await.status == 200
    })
    .await;
    let refused = ask("192.0.2.3").await;
    assert_eq!(refused.status, 451, "{}", refused.body);
    assert!(refused.header("retry-after").is_some());
}
