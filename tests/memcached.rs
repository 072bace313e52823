//! What only the Memcached store has: round trips, TTLs on the wire, keys on
//! the wire, routing over several servers, and outages.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use common::proxy::CountingProxy;
use common::wait::until_the_store_decides;
use slidegate::store::KeyDigest;
use slidegate::store::memcached::DigestRendezvous;
use slidegate::store::{CounterKey, Store};
use slidegate::{
    CheckError, FailureMode, Item, Limit, Limiter, ManualClock, MemcachedOptions, MemcachedStore,
    Policy, Source,
};

const MINUTE: u64 = 60_000;

fn policy(limits: &[(u64, u64, u32)]) -> Policy {
    let limits = limits
        .iter()
        .map(|&(limit, window_ms, precision)| Limit::new(limit, window_ms, precision).unwrap())
        .collect();
    Policy::new("api", limits).unwrap()
}

async fn store_at(servers: Vec<String>) -> MemcachedStore {
    MemcachedStore::connect(&common::memcached_options(servers))
        .await
        .unwrap()
}

/// Round trips counted by a proxy between the store and memcached, and what
/// memcached itself saw (`stats`): an admitted check is one round trip, the
/// first reject two (the rollback), a hot reject none at all.
#[tokio::test]
async fn round_trips_per_call() {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let clock = ManualClock::new(common::today_ms() + 30_000);
    let limiter = common::patient_limiter(store_at(vec![proxy.addr.clone()]).await)
        .clock(clock)
        .build();
    let api = policy(&[(3, MINUTE, 1)]);
    let fine = policy(&[(10, 1_000, 1), (3_000, 10 * MINUTE, 10)]);

    // Each step: (what, round trips through the proxy, memcached stats
    // deltas), printed with --nocapture and asserted below.
    let mut steps = Vec::new();
    let mut measure =
        |what: &'static str, before: (u64, std::collections::HashMap<String, u64>)| {
            let after = memcached.stats();
            let delta = |name: &str| after[name] - before.1[name];
            // Our own `stats\r\n` (7 bytes) is the only other thing memcached reads.
            let step = (
                what,
                proxy.round_trips() - before.0,
                delta("cmd_get"),
                delta("decr_hits"),
                delta("bytes_read") - 7,
            );
            println!(
                "{:<32} round trips {:>2}   memcached: cmd_get +{:<3} decr_hits +{:<3} bytes_read +{}",
                step.0, step.1, step.2, step.3, step.4
            );
            steps.push(step);
        };

    let before = (proxy.round_trips(), memcached.stats());
    assert!(limiter.check("k", &api, 1).await.unwrap().allowed);
    measure("admitted check", before);

    limiter.check("k", &api, 2).await.unwrap();
    let before = (proxy.round_trips(), memcached.stats());
    assert_eq!(
        limiter.check("k", &api, 1).await.unwrap().source,
        Source::Store
    );
    measure("first reject", before);

    let before = (proxy.round_trips(), memcached.stats());
    for _ in 0..100 {
        let hot = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!((hot.allowed, hot.source), (false, Source::NearCache));
    }
    measure("100 hot rejects", before);

    let before = (proxy.round_trips(), memcached.stats());
    limiter.peek("other", &api, 1).await.unwrap();
    measure("peek", before);
    let before = (proxy.round_trips(), memcached.stats());
    limiter.report("other", &api, 1).await.unwrap();
    measure("report", before);

    // Two limits, one at precision 10: 1 + 10 older buckets read and two
    // current ones incremented, still in one write.
    let before = (proxy.round_trips(), memcached.stats());
    assert!(limiter.check("k2", &fine, 1).await.unwrap().allowed);
    measure("admitted check, 2 limits, k=10", before);

    let round_trips: Vec<u64> = steps.iter().map(|step| step.1).collect();
    assert_eq!(round_trips, [1, 2, 0, 1, 1, 1]);
    let reads: Vec<u64> = steps.iter().map(|step| step.2).collect();
    assert_eq!(reads, [1, 1, 0, 2, 1, 11]);
    assert_eq!(
        steps[1].3, 1,
        "the first reject's rollback is one decrement"
    );
    assert_eq!(steps[2].4, 0, "hot rejects: memcached read nothing at all");
}

/// The TTL memcached holds for a bucket: two windows plus a margin; over 30
/// days, sent as an absolute time and still read back as ~80 days.
#[tokio::test]
async fn buckets_live_two_windows() {
    let memcached = common::shared_memcached();
    let now = common::today_ms() + 1_000;
    let store = Arc::new(store_at(vec![memcached.addr()]).await);
    let limiter = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    for (window_ms, expected_ttl) in [(MINUTE, 122), (40 * 86_400_000, 80 * 86_400 + 2)] {
        let api = policy(&[(5, window_ms, 1)]);
        limiter.check("k", &api, 1).await.unwrap();
        let limit = api.limits()[0];
        let key = store.wire_key(&CounterKey {
            digest: KeyDigest::of("api", "k"),
            window: limit.window(),
            bucket: limit.window().bucket_of(now),
        });
        let answer = memcached.raw(&format!("mg {key} t v\r\n"), "\r\n1\r\n");
        let ttl: i64 = answer
            .split_whitespace()
            .find_map(|token| token.strip_prefix('t')?.parse().ok())
            .unwrap_or_else(|| panic!("no TTL in {answer:?}"));
        // The absolute expiry was computed from the manual clock, which is
        // behind the real one by up to a day.
        let slack = if window_ms > MINUTE { 86_400 + 5 } else { 2 };
        assert!(
            (expected_ttl - slack..=expected_ttl).contains(&ttl),
            "window {window_ms} ms: TTL {ttl}, expected about {expected_ttl}"
        );
    }
}

/// Keys that look like protocol text reach memcached only as digests: a
/// sentinel item survives them, and every key in the namespace is plain.
#[tokio::test]
async fn client_keys_never_reach_the_wire_as_text() {
    let memcached = Memcached::start();
    assert_eq!(
        memcached.raw("set sentinel 0 0 2\r\nok\r\n", "\r\n"),
        "STORED\r\n"
    );
    let limiter = common::patient_limiter(store_at(vec![memcached.addr()]).await).build();
    let api = policy(&[(5, MINUTE, 1)]);
    let long = format!("{}\r\nflush_all\r\n", "y".repeat(1000));
    for key in [
        "\r\nflush_all\r\n",
        "k\r\ndelete sentinel\r\n",
        "k noreply\r\nset sentinel 0 0 1\r\nx\r\n",
        "mn\r\nmd sentinel q\r\n",
        long.as_str(),
    ] {
        limiter.check(key, &api, 1).await.unwrap();
    }
    assert_eq!(
        memcached.raw("get sentinel\r\n", "END\r\n"),
        "VALUE sentinel 0 2\r\nok\r\nEND\r\n"
    );
    let dump = memcached.raw("lru_crawler metadump all\r\n", "END\r\n");
    // metadump URL-encodes keys; ours only ever need ':' decoded.
    let keys: Vec<String> = dump
        .lines()
        .filter_map(|line| line.strip_prefix("key="))
        .map(|rest| rest.split(' ').next().unwrap_or("").replace("%3A", ":"))
        .filter(|key| key != "sentinel")
        .collect();
    assert_eq!(keys.len(), 5);
    for key in keys {
        assert!(
            key.len() <= 250
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".:-".contains(&b)),
            "{key}"
        );
    }
}

/// With three servers, every counter of a key sits on the one server the
/// pinned rendezvous hash names, and the keys spread over all three.
#[tokio::test]
async fn keys_route_by_digest_over_several_servers() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let addrs: Vec<String> = servers.iter().map(Memcached::addr).collect();
    let now = common::today_ms() + 1_000;
    let store = Arc::new(store_at(addrs.clone()).await);
    let limiter = common::patient_limiter(store.clone())
        .clock(ManualClock::new(now))
        .build();
    let api = policy(&[(10, MINUTE, 1), (100, 60 * MINUTE, 4)]);
    let mut per_server = [0usize; 3];
    for index in 0..300 {
        let key = format!("client-{index}");
        assert!(limiter.check(&key, &api, 1).await.unwrap().allowed);
        let wire_keys: Vec<String> = api
            .limits()
            .iter()
            .map(|limit| {
                store.wire_key(&CounterKey {
                    digest: KeyDigest::of("api", &key),
                    window: limit.window(),
                    bucket: limit.window().bucket_of(now),
                })
            })
            .collect();
        let owner = DigestRendezvous::pick(wire_keys[0].as_bytes(), &addrs);
        for (server, memcached) in servers.iter().enumerate() {
            for wire_key in &wire_keys {
                let held = memcached
                    .raw(&format!("mg {wire_key} v\r\n"), "\r\n")
                    .starts_with("VA");
                assert_eq!(
                    held,
                    server == owner,
                    "{key}: {wire_key} on server {server}"
                );
            }
        }
        per_server[owner] += 1;
    }
    assert!(
        per_server.iter().all(|&n| n > 60),
        "unbalanced: {per_server:?}"
    );
}

/// A check whose clock read falls in one bucket and whose increment lands
/// after another instance, already in the next bucket, has read that bucket
/// as its older one: the other instance decided without it. Admitting it
/// would let the window hold more than the formula allows at the other's
/// instant, so it must be decided again in the bucket it finished in. The
/// proxy holds the first instance's request on the wire while the second
/// checks, exactly at the boundary.
#[tokio::test]
async fn a_check_that_crosses_a_bucket_boundary_in_flight_is_decided_again() {
    for together in [false, true] {
        let memcached = Memcached::start();
        let proxy = CountingProxy::start(memcached.addr()).await;
        let boundary = common::today_ms() + 30_000;
        let clock = ManualClock::new(boundary - 1);
        // Two instances on the same counters (one namespace), one of them
        // through the proxy.
        let through_proxy = common::memcached_options(vec![proxy.addr.clone()]);
        let direct_to_memcached = MemcachedOptions {
            servers: vec![memcached.addr()],
            ..through_proxy.clone()
        };
        let slow = Arc::new(
            Limiter::builder(MemcachedStore::connect(&through_proxy).await.unwrap())
                .clock(clock.clone())
                .timeout(Duration::from_secs(5))
                .build(),
        );
        let direct =
            common::patient_limiter(MemcachedStore::connect(&direct_to_memcached).await.unwrap())
                .clock(clock.clone())
                .build();
        let api = Arc::new(policy(&[(2, 1_000, 1)]));

        proxy.hold();
        let in_flight = {
            let (slow, api) = (slow.clone(), api.clone());
            tokio::spawn(async move {
                if together {
                    let item = Item {
                        key: "k",
                        policy: &api,
                        cost: 2,
                    };
                    slow.check_all(&[item]).await.unwrap().remove(0)
                } else {
                    slow.check("k", &api, 2).await.unwrap()
                }
            })
        };
        // The slow check has read `boundary - 1` and is on the wire.
        proxy.holding_a_request().await;
        clock.set(boundary);
        let on_time = direct.check("k", &api, 2).await.unwrap();
        assert!(on_time.allowed, "the bucket before was empty when read");
        proxy.release();
        let late = in_flight.await.unwrap();

        assert!(
            !late.allowed,
            "check_all: {together}: both admitted, but at {boundary} the formula counts \
             the late one in the older bucket: 2 * 999/1000 + 2 > 2"
        );
        assert_eq!(
            late.decided_at_ms, boundary,
            "decided again after the boundary"
        );
        // Through the proxy: the check, the rollback of its crossing, the
        // check again, and the rollback of its rejection.
        assert_eq!(proxy.round_trips(), 4, "check_all: {together}");
        // Its increment of the older bucket was taken back: what the window
        // holds now is the on-time check alone.
        let now = direct.peek("k", &api, 1).await.unwrap();
        assert_eq!(
            now.limits[0].estimate.as_f64(),
            2.0,
            "check_all: {together}"
        );
    }
}

fn limiter_on(
    memcached: &Memcached,
    mode: FailureMode,
) -> impl Future<Output = Limiter<MemcachedStore>> {
    let mut options = common::memcached_options(vec![memcached.addr()]);
    options.timeout = Duration::from_millis(50);
    async move {
        Limiter::builder(MemcachedStore::connect(&options).await.unwrap())
            .failure_mode(mode)
            .build()
    }
}

#[tokio::test]
async fn fail_open_then_recover_by_itself() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Allow).await;
    let api = policy(&[(1, MINUTE, 1)]);
    assert_eq!(
        limiter.check("k", &api, 1).await.unwrap().source,
        Source::Store
    );
    assert!(limiter.ready().await.is_ok());

    memcached.kill();
    for _ in 0..3 {
        let decision = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!(
            (decision.allowed, decision.source),
            (true, Source::Fallback)
        );
    }
    let refused = limiter.check("k", &api, 2).await.unwrap();
    assert!(
        !refused.allowed,
        "a cost above the limit is refused even when failing open"
    );
    assert!(limiter.ready().await.is_err());
    assert!(limiter.metrics().store_errors >= 4);

    // The connections redial by themselves, with a backoff of at most half
    // a second: the store decides again within a second or so.
    memcached.restart();
    let (decision, took) = until_the_store_decides(&limiter, "k", &api).await;
    assert!(decision.allowed);
    println!("the store decided again {took:?} after the restart");
    assert!(limiter.ready().await.is_ok());
}

#[tokio::test]
async fn fail_closed() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Deny).await;
    let api = policy(&[(5, MINUTE, 1)]);
    memcached.kill();
    assert!(matches!(
        limiter.check("k", &api, 1).await,
        Err(CheckError::StoreUnavailable(error)) if error.is_transient()
    ));
}

#[tokio::test]
async fn local_counters_while_the_store_is_down() {
    let mut memcached = Memcached::start();
    let limiter = limiter_on(&memcached, FailureMode::Local).await;
    let api = policy(&[(3, MINUTE, 1)]);
    memcached.kill();
    let mut allowed = 0;
    for _ in 0..5 {
        let decision = limiter.check("k", &api, 1).await.unwrap();
        assert_eq!(decision.source, Source::Fallback);
        allowed += usize::from(decision.allowed);
    }
    assert_eq!(allowed, 3, "the local counters enforce the limit");
}

/// A server that accepts connections and never answers: every call must
/// come back at the timeout (50 ms), not hang. The bound checked is loose
/// (a second) so a busy machine cannot make it flaky; a hang would take the
/// crate's own default of seconds, or forever.
#[tokio::test]
async fn a_silent_store_times_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let _accepting = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming().take(64) {
            held.push(stream);
        }
    });
    let mut options = common::memcached_options(vec![addr]);
    options.timeout = Duration::from_millis(50);
    let store = MemcachedStore::connect(&options).await.unwrap();
    let limiter = Limiter::new(store);
    let api = policy(&[(5, MINUTE, 1)]);
    let started = Instant::now();
    let decision = limiter.check("k", &api, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert!(limiter.store().ping().await.is_err());
}

/// The README on discovery: "nodes that stay keep their connections ...
/// removed ones close once their last request is done", and "a poll that
/// fails ... keeps the list in use". The configuration endpoint here is a
/// plain memcached holding the cluster config as the
/// `AmazonElastiCache:cluster` item (as engines before 1.4.14 do); each
/// node sits behind a proxy that counts its open connections and can hold
/// a request on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_keeps_staying_connections_drains_removed_ones_and_survives_failed_polls() {
    use common::wait::{PATIENCE, until_version, wait_for};

    let (a, b) = (Memcached::start(), Memcached::start());
    let (proxy_a, proxy_b) = (
        CountingProxy::start(a.addr()).await,
        CountingProxy::start(b.addr()).await,
    );
    let mut endpoint = Memcached::start();
    let publish = |version: u64, proxies: &[(&str, &CountingProxy)]| {
        let nodes: Vec<String> = proxies
            .iter()
            .map(|(host, proxy)| {
                let port = proxy.addr.rsplit(':').next().unwrap();
                format!("{host}|127.0.0.1|{port}")
            })
            .collect();
        let body = format!("{version}\n{}\n", nodes.join(" "));
        let set = format!(
            "set AmazonElastiCache:cluster 0 0 {}\r\n{body}\r\n",
            body.len()
        );
        assert_eq!(endpoint.raw(&set, "\r\n"), "STORED\r\n");
    };
    publish(
        1,
        &[
            ("node-a.cache.local", &proxy_a),
            ("node-b.cache.local", &proxy_b),
        ],
    );
    let options = MemcachedOptions {
        discovery: Some(endpoint.addr()),
        discovery_interval: Duration::from_millis(50),
        // The held request waits out a discovery poll: longer than the
        // harness's 2 s on a busy machine, if need be.
        timeout: PATIENCE,
        ..common::memcached_options(Vec::new())
    };
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    until_version(&store, 1).await;
    wait_for("both nodes' connections up", PATIENCE, || {
        std::future::ready(store.topology().nodes.iter().all(|node| node.live() == 2))
    })
    .await;
    let limiter = Arc::new(Limiter::builder(store.clone()).timeout(PATIENCE).build());
    let api = Arc::new(policy(&[(1_000_000, MINUTE, 1)]));
    let on_node = |wanted: &str| {
        (0..1000)
            .map(|index| format!("client-{index}"))
            .find(|key| {
                store
                    .node_name_of(&KeyDigest::of("api", key))
                    .is_some_and(|node| node.starts_with(wanted))
            })
            .unwrap()
    };
    let (key_a, key_b) = (on_node("node-a"), on_node("node-b"));
    let redials_of_a = || {
        store
            .topology()
            .nodes
            .iter()
            .find(|node| node.name.starts_with("node-a"))
            .map(|node| node.redials.clone())
    };
    let redials_before = redials_of_a();
    assert_eq!(proxy_a.open_connections(), 2);

    // A request to B is on the wire when B leaves the cluster.
    proxy_b.hold();
    let in_flight = {
        let (limiter, api, key_b) = (limiter.clone(), api.clone(), key_b.clone());
        tokio::spawn(async move { limiter.check(&key_b, &api, 1).await.unwrap() })
    };
    proxy_b.holding_a_request().await;
    publish(2, &[("node-a.cache.local", &proxy_a)]);
    until_version(&store, 2).await;
    proxy_b.release();
    // Had B's connection closed under it, the check would have fallen back.
    let answered = in_flight.await.unwrap();
    assert_eq!(
        answered.source,
        Source::Store,
        "the request in flight was answered by B"
    );
    wait_for(
        "B's connections closed after its last request",
        PATIENCE,
        || std::future::ready(proxy_b.open_connections() == 0),
    )
    .await;
    // A stayed: the same two connections, never redialled.
    assert_eq!(proxy_a.open_connections(), 2);
    assert_eq!(proxy_a.most_open_connections(), 2);
    assert_eq!(redials_of_a(), redials_before);
    assert_eq!(
        limiter.check(&key_a, &api, 1).await.unwrap().source,
        Source::Store
    );

    // The endpoint goes away: polls fail, the list in use stays.
    endpoint.kill();
    wait_for("a failed poll", PATIENCE, || {
        let failed = store
            .topology()
            .polls
            .iter()
            .any(|&(result, count)| result == "failed" && count > 0);
        std::future::ready(failed)
    })
    .await;
    let topology = store.topology();
    assert_eq!(topology.version, Some(2));
    assert_eq!(topology.nodes.len(), 1);
    assert_eq!(
        limiter.check(&key_a, &api, 1).await.unwrap().source,
        Source::Store
    );
    assert_eq!(
        limiter.check(&key_b, &api, 1).await.unwrap().source,
        Source::Store
    );
}

/// A check's future is what every caller's task holds and what each level
/// of the decision moves whole when it creates the next: an async wrapper
/// that keeps the future it was given beside the one it awaits doubles it.
/// It was 7,256 bytes with two such wrappers (the profile showed memmove as
/// the first user-space cost, 11% of the library's CPU at 256 callers);
/// 2,520 without. The bound leaves a compiler's slack, not a wrapper's.
#[tokio::test]
async fn a_check_future_stays_small() {
    let store = Arc::new(store_at(vec![common::shared_memcached().addr()]).await);
    let limiter = common::patient_limiter(store).build();
    let policy = policy(&[(5, 60_000, 1)]);
    let check = limiter.check("small", &policy, 1);
    let bytes = std::mem::size_of_val(&check);
    println!("a check's future: {bytes} bytes");
    assert!(bytes <= 3_584, "a check's future is {bytes} bytes");
}

/// Checks of the key "foreign" at a fixed instant under `allow`, whose
/// counters another program may have written text into (under our
/// namespace).
struct Foreign {
    memcached: &'static Memcached,
    store: Arc<MemcachedStore>,
    limiter: Limiter<Arc<MemcachedStore>>,
    now: u64,
}

impl Foreign {
    async fn new() -> Foreign {
        let memcached = common::shared_memcached();
        let now = common::today_ms() + 1_000;
        let store = Arc::new(store_at(vec![memcached.addr()]).await);
        let limiter = common::patient_limiter(store.clone())
            .clock(ManualClock::new(now))
            .failure_mode(FailureMode::Allow)
            .build();
        Foreign {
            memcached,
            store,
            limiter,
            now,
        }
    }

    /// The wire key of `limit`'s bucket `back` buckets before the current.
    fn counter(&self, limit: &Limit, back: u64) -> String {
        let window = limit.window();
        self.store.wire_key(&CounterKey {
            digest: KeyDigest::of("api", "foreign"),
            window,
            bucket: window.bucket_of(self.now) - back,
        })
    }

    fn write_text(&self, counter: &str) {
        let set = format!("set {counter} 0 600 3\r\nabc\r\n");
        assert_eq!(self.memcached.raw(&set, "\r\n"), "STORED\r\n");
    }

    /// What `get` shows for `counter`, if it exists.
    fn value(&self, counter: &str) -> Option<String> {
        let answer = self.memcached.raw(&format!("get {counter}\r\n"), "END\r\n");
        answer
            .lines()
            .nth(1)
            .filter(|_| answer.starts_with("VALUE"))
            .map(|value| value.trim().to_owned())
    }

    /// Wait until the addition to `counter` has been taken back.
    async fn taken_back(&self, counter: &str) {
        common::wait::wait_for("the addition taken back", common::wait::PATIENCE, || {
            std::future::ready(self.value(counter).as_deref() == Some("0"))
        })
        .await;
    }
}

/// One command of a batch fails while another applies: the second limit's
/// addition is made, the first limit's counter holds text, not a number,
/// so memcached refuses that `ma`. The check falls to the failure mode,
/// which was told nothing was counted: the addition that applied must be
/// taken back.
#[tokio::test]
async fn a_failed_addition_in_a_batch_leaves_nothing_counted() {
    let foreign = Foreign::new().await;
    let api = policy(&[(10, MINUTE, 1), (100, 60 * MINUTE, 1)]);
    let [first, second] = [0, 1].map(|index| foreign.counter(&api.limits()[index], 0));
    foreign.write_text(&first);

    let decision = foreign.limiter.check("foreign", &api, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback, "{decision:?}");
    foreign.taken_back(&second).await;
    assert_eq!(foreign.value(&first).as_deref(), Some("abc"));
}

/// The same with text in a counter the batch reads: its framing is intact,
/// so only this check fails (the connection others share stays up), and
/// its addition is taken back.
#[tokio::test]
async fn a_counter_that_is_not_a_number_fails_only_its_check() {
    let foreign = Foreign::new().await;
    let api = policy(&[(10, MINUTE, 1)]);
    let [current, previous] = [0, 1].map(|back| foreign.counter(&api.limits()[0], back));
    foreign.write_text(&previous);
    let redials = || -> Vec<_> {
        let topology = foreign.store.topology();
        topology
            .nodes
            .into_iter()
            .map(|node| node.redials)
            .collect()
    };
    let redials_before = redials();

    let decision = foreign.limiter.check("foreign", &api, 1).await.unwrap();
    assert_eq!(decision.source, Source::Fallback, "{decision:?}");
    foreign.taken_back(&current).await;
    assert_eq!(redials(), redials_before, "the connection was dropped");
    let fine = foreign.limiter.check("other", &api, 1).await.unwrap();
    assert_eq!(fine.source, Source::Store);
}
