//! ElastiCache Auto Discovery against real memcached nodes, behind a small
//! configuration endpoint that speaks exactly the documented reply format
//! (`config get cluster`, and `get AmazonElastiCache:cluster` for engines
//! before 1.4.14): start, node added and removed under load, endpoint down
//! at start, malformed, older and empty configs.
//!
//! This file holds the endpoint the tests serve their configs from and the
//! helpers they share; the tests are in the modules below, by what changes.

#[path = "../common/mod.rs"]
mod common;

mod endpoint;
mod node_changes;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Memcached;
use slidegate::store::KeyDigest;
use slidegate::{Limit, Limiter, MemcachedOptions, MemcachedStore, Policy, Source};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const MINUTE: u64 = 60_000;
const POLL: Duration = Duration::from_millis(50);

/// What the endpoint answers.
#[derive(Default)]
struct Served {
    version: u64,
    /// `host|ip|port` entries.
    nodes: Vec<String>,
    /// Refuse `config get cluster`, as engines before 1.4.14 do.
    legacy_only: bool,
    /// Refuse `get AmazonElastiCache:cluster`, as an engine that only
    /// knows `config get` may.
    modern_only: bool,
    /// Refuse this many `config get cluster` first (a proxy or an engine
    /// mid-upgrade answering `ERROR` for a while).
    config_get_errors: u32,
    /// Answer a reply that does not parse.
    malformed: bool,
}

/// A configuration endpoint on loopback.
struct Endpoint {
    addr: String,
    served: Arc<Mutex<Served>>,
    polls: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Endpoint {
    async fn start(listener: Option<TcpListener>) -> Endpoint {
        let listener = match listener {
            Some(listener) => listener,
            None => TcpListener::bind("127.0.0.1:0").await.unwrap(),
        };
        let addr = listener.local_addr().unwrap().to_string();
        let served = Arc::new(Mutex::new(Served::default()));
        let polls = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (served_by_task, polls_by_task, stop_by_task) =
            (served.clone(), polls.clone(), stop.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if stop_by_task.load(Ordering::Relaxed) {
                    return;
                }
                let (served, polls) = (served_by_task.clone(), polls_by_task.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        polls.fetch_add(1, Ordering::Relaxed);
                        let answer = answer(&mut served.lock().unwrap(), line.trim());
                        if write.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Endpoint {
            addr,
            served,
            polls,
            stop,
        }
    }

    fn serve(&self, version: u64, nodes: &[&Memcached]) {
        let mut served = self.served.lock().unwrap();
        served.version = version;
        served.nodes = nodes
            .iter()
            .map(|node| format!("node-{}.cache.local|127.0.0.1|{}", node.port, node.port))
            .collect();
        served.malformed = false;
    }

    /// Wait for `more` polls after now.
    async fn polled(&self, more: u64) {
        let target = self.polls.load(Ordering::Relaxed) + more;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.polls.load(Ordering::Relaxed) < target {
            assert!(Instant::now() < deadline, "the endpoint was not polled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(served: &mut Served, command: &str) -> String {
    let legacy = match command {
        "config get cluster" if served.legacy_only => return "ERROR\r\n".to_owned(),
        "config get cluster" if served.config_get_errors > 0 => {
            served.config_get_errors -= 1;
            return "ERROR\r\n".to_owned();
        }
        "config get cluster" => false,
        "get AmazonElastiCache:cluster" if served.modern_only => return "ERROR\r\n".to_owned(),
        "get AmazonElastiCache:cluster" => true,
        _ => return "ERROR\r\n".to_owned(),
    };
    let body = if served.malformed {
        "twelve\nnot a node list\n".to_owned()
    } else {
        format!("{}\n{}\n", served.version, served.nodes.join(" "))
    };
    let header = if legacy {
        "VALUE AmazonElastiCache:cluster"
    } else {
        "CONFIG cluster"
    };
    format!("{header} 0 {}\r\n{body}\r\nEND\r\n", body.len())
}

fn options(endpoint: &str) -> MemcachedOptions {
    MemcachedOptions {
        discovery: Some(endpoint.to_owned()),
        discovery_interval: POLL,
        ..common::memcached_options(Vec::new())
    }
}

async fn wait_for_version(store: &MemcachedStore, version: u64) {
    common::wait::until_version(store, version).await;
}

fn roomy() -> Arc<Policy> {
    Arc::new(Policy::new("disc", vec![Limit::new(1_000_000, MINUTE, 1).unwrap()]).unwrap())
}

fn node_of(store: &MemcachedStore, key: &str) -> String {
    store
        .node_name_of(&KeyDigest::of("disc", key))
        .expect("nodes are known")
}

/// Check every key once; each answer's estimate is that key's count.
async fn check_all(
    limiter: &Limiter<Arc<MemcachedStore>>,
    policy: &Policy,
    keys: &[String],
) -> Vec<u64> {
    let mut counts = Vec::new();
    for key in keys {
        let decision = limiter.check(key, policy, 1).await.unwrap();
        assert_eq!(decision.source, Source::Store, "{key}");
        counts.push(decision.limits[0].estimate.as_f64() as u64);
    }
    counts
}
