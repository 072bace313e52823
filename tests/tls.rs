//! TLS to Memcached, as ElastiCache's encryption in transit: Debian's
//! memcached started with `-Z` and a certificate from a CA this test makes
//! (openssl on the command line). Exact counts over TLS, discovery over TLS
//! with nodes verified by the host name the config gives, and a wrong CA
//! or a wrong name refused: a store failure, never plaintext.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::Memcached;
use common::wait::{PATIENCE, until_version, wait_for};
use slidegate::config::AuthConfig;
use slidegate::server::{self, App};
use slidegate::store::AnyStore;
use slidegate::{
    FailureMode, Limit, Limiter, MemcachedOptions, MemcachedStore, Policy, Source, Store,
    TlsOptions,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const NODE_NAME: &str = "node-1.cache.local";

fn openssl(dir: &Path, args: &[&str]) {
    let mut openssl = Command::new("openssl");
    openssl.args(args).current_dir(dir);
    common::process::succeed(openssl);
}

/// A CA, and a server certificate it signed for `NODE_NAME` and 127.0.0.1;
/// plus a second CA that signed nothing.
fn certificates() -> PathBuf {
    let dir = common::process::temp_dir("slidegate-tls");
    let days = "2";
    for ca in ["ca", "other-ca"] {
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-days",
                days,
                "-subj",
                &format!("/CN=slidegate test {ca}"),
            ],
        );
    }
    openssl(
        &dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            &format!("/CN={NODE_NAME}"),
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        format!("subjectAltName=DNS:{NODE_NAME},IP:127.0.0.1\n"),
    )
    .unwrap();
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            days,
            "-extfile",
            "san.ext",
        ],
    );
    dir
}

fn tls_memcached(dir: &Path) -> Memcached {
    Memcached::start_with(&[
        "-Z".to_owned(),
        "-o".to_owned(),
        format!(
            "ssl_chain_cert={},ssl_key={}",
            dir.join("server.pem").display(),
            dir.join("server.key").display()
        ),
    ])
}

fn options(servers: Vec<String>, ca: &Path, name: Option<&str>) -> MemcachedOptions {
    MemcachedOptions {
        tls: Some(TlsOptions {
            ca_file: Some(ca.to_owned()),
            server_name: name.map(str::to_owned),
        }),
        ..common::memcached_options(servers)
    }
}

fn per_minute(limit: u64) -> Arc<Policy> {
    Arc::new(Policy::new("tls", vec![Limit::new(limit, 60_000, 1).unwrap()]).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_exact_over_tls() {
    let dir = certificates();
    let node = tls_memcached(&dir);
    let store = Arc::new(
        MemcachedStore::connect(&options(vec![node.addr()], &dir.join("ca.pem"), None))
            .await
            .unwrap(),
    );
    store.ping().await.unwrap();
    assert!(store.topology().tls);
    let limiter = Arc::new(
        common::patient_limiter(store.clone())
            .failure_mode(FailureMode::Deny)
            .build(),
    );
    let policy = per_minute(5);
    let tasks = common::spawn_checks(&limiter, "client", &policy, 50);
    let mut admitted = 0;
    for task in tasks {
        let decision = task.await.unwrap();
        assert_ne!(decision.source, Source::Fallback);
        admitted += u32::from(decision.allowed);
    }
    assert_eq!(admitted, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_does_not_verify_is_a_store_failure() {
    let dir = certificates();
    let node = tls_memcached(&dir);
    for (ca, name, why) in [
        ("other-ca.pem", None, "a CA that signed nothing"),
        (
            "ca.pem",
            Some("somebody-else.cache.local"),
            "a name not on the certificate",
        ),
    ] {
        let mut options = options(vec![node.addr()], &dir.join(ca), name);
        options.timeout = Duration::from_millis(300);
        let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
        let error = store.ping().await.unwrap_err().to_string();
        eprintln!("{why}: {error}");
        assert!(error.contains("TLS handshake"), "{why}: {error}");
        let limiter = Limiter::builder(store.clone())
            .failure_mode(FailureMode::Deny)
            .build();
        assert!(
            limiter.check("k", &per_minute(5), 1).await.is_err(),
            "{why}"
        );
        // Dials keep failing (with backoff), each counted, none in plaintext.
        wait_for(
            &format!("{why}: a handshake failure counted"),
            PATIENCE,
            || std::future::ready(store.topology().tls_failures > 0),
        )
        .await;
        // The service on such a store is not ready, and says why.
        let served = MemcachedStore::connect(&options).await.unwrap();
        let app = App::new(
            Limiter::builder(AnyStore::Memcached(served)).build(),
            [],
            AuthConfig::default(),
        );
        let addr = common::in_process::serve_forever(server::serve, Arc::new(app)).await;
        let ready = common::http::get(addr, "/readyz").await;
        assert_eq!(ready.status, 503, "{why}: {}", ready.body);
        assert!(
            ready.body.contains("TLS handshake"),
            "{why}: {}",
            ready.body
        );
    }
}

/// With TLS on, the first byte on a new connection is a TLS handshake
/// record (0x16, a ClientHello), whatever answers: pointed at a plain
/// listener, the store never speaks plaintext memcached to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_never_falls_back_to_plaintext() {
    use tokio::io::AsyncReadExt;
    let dir = certificates();
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = plain.local_addr().unwrap().to_string();
    let store = Arc::new(
        MemcachedStore::connect(&options(vec![addr], &dir.join("ca.pem"), None))
            .await
            .unwrap(),
    );
    let pinging = {
        let store = store.clone();
        tokio::spawn(async move { store.ping().await })
    };
    // Every connection the store opens, the first few of its redials too.
    for _ in 0..3 {
        let (mut connection, _) = tokio::time::timeout(PATIENCE, plain.accept())
            .await
            .expect("the store dials the node")
            .unwrap();
        let mut first = [0u8; 1];
        tokio::time::timeout(PATIENCE, connection.read_exact(&mut first))
            .await
            .expect("the store sends first")
            .unwrap();
        assert_eq!(
            first[0], 0x16,
            "the first byte is not a TLS handshake record: {:?}",
            first[0] as char
        );
        // Answered in plaintext, as a memcached without TLS would.
        use tokio::io::AsyncWriteExt;
        let _ = connection.write_all(b"SERVER_ERROR plaintext\r\n").await;
    }
    assert!(pinging.await.unwrap().is_err(), "a plaintext node answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovered_nodes_are_verified_by_their_host_name() {
    let dir = certificates();
    let node = tls_memcached(&dir);
    // The configuration endpoint is the TLS node itself: it refuses
    // `config get cluster` (plain memcached does not know it), so discovery
    // asks `get AmazonElastiCache:cluster`, as for engines before 1.4.14,
    // and the node answers from an item set here.
    // First a host the certificate does not name: dialled at 127.0.0.1
    // (which it does name), the node must still be refused.
    let body = format!("1\nwrong-host.cache.local|127.0.0.1|{}\n", node.port);
    set_item_over_tls(&dir, &node, "AmazonElastiCache:cluster", &body).await;
    let options = MemcachedOptions {
        discovery: Some(node.addr()),
        discovery_interval: Duration::from_millis(50),
        ..options(Vec::new(), &dir.join("ca.pem"), None)
    };
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    until_version(&store, 1).await;
    let error = store.ping().await.unwrap_err().to_string();
    assert!(error.contains("wrong-host.cache.local"), "{error}");

    let body = format!("2\n{NODE_NAME}|127.0.0.1|{}\n", node.port);
    set_item_over_tls(&dir, &node, "AmazonElastiCache:cluster", &body).await;
    until_version(&store, 2).await;
    store.ping().await.unwrap();
    // Dialled at 127.0.0.1, verified as node-1.cache.local.
    let limiter = common::patient_limiter(store.clone())
        .failure_mode(FailureMode::Deny)
        .build();
    let decision = limiter.check("k", &per_minute(5), 1).await.unwrap();
    assert_eq!(decision.source, Source::Store);
}

/// Store an item on a TLS memcached, through `openssl s_client`.
async fn set_item_over_tls(dir: &Path, node: &Memcached, key: &str, value: &str) {
    let mut child = tokio::process::Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &node.addr(),
            "-CAfile",
            &dir.join("ca.pem").display().to_string(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = child.stdin.take().unwrap();
    let command = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    stdin.write_all(command.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("memcached answered the set")
        .unwrap();
    assert_eq!(answer.as_deref(), Some("STORED"));
    drop(stdin);
    let _ = child.kill().await;
}
