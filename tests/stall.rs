//! A store stall ends within one round trip. A proxy between slidegate and
//! a real memcached delays every reply; once it stops, the very next checks
//! are decided by the store again, because a connection whose replies are
//! overdue takes no new requests: they go to a ready connection, or to an
//! extra one dialled for them. While a stall lasts, every check is answered
//! within the call timeout, with a bounded number of connections and flat
//! memory.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Memcached;
use common::proxy::CountingProxy;
use common::wait::{PATIENCE, wait_for};
use slidegate::store::Store;
use slidegate::{CheckError, FailureMode, Limit, Limiter, MemcachedStore, Policy, Source};

/// The call timeout the endless stall is run at (the default).
const TIMEOUT: Duration = Duration::from_millis(50);
/// The report's scenario (a 200 ms stall, a 50 ms timeout) at 4 times the
/// scale: the same stall past the timeout, and a busy machine's scheduling
/// (tens of ms beside stress-ng) cannot by itself time a check out.
const RECOVERY_TIMEOUT: Duration = Duration::from_millis(200);
/// How late the stalling proxy sends each reply in the recovery scenario.
const STALL_MS: u64 = 800;
/// The endless stall's delay: long, so that a check that waited for a
/// late reply stands out from one answered at the timeout on a busy
/// machine, yet under the 1 s after which a connection counts as stalled.
const ENDLESS_STALL_MS: u64 = 600;

fn per_minute(limit: u64) -> Arc<Policy> {
    Arc::new(Policy::new("api", vec![Limit::new(limit, 60_000, 1).unwrap()]).unwrap())
}

async fn store_behind(
    proxy: &CountingProxy,
    connections: usize,
    timeout: Duration,
) -> Arc<MemcachedStore> {
    let mut options = common::memcached_options(vec![proxy.addr.clone()]);
    options.timeout = timeout;
    options.connections = connections;
    let store = Arc::new(MemcachedStore::connect(&options).await.unwrap());
    // Every configured connection up, so the stall reaches all of them.
    let started = Instant::now();
    while store.topology().nodes[0].states.ready < connections || store.ping().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never connected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store
}

/// Where a check's answer came from; a failure-mode refusal under `deny`
/// is a fallback too.
fn source_of(outcome: &Result<slidegate::Decision, CheckError>) -> (Source, bool) {
    match outcome {
        Ok(decision) => (decision.source, decision.allowed),
        Err(CheckError::StoreUnavailable(_)) => (Source::Fallback, false),
        Err(error) => panic!("{error}"),
    }
}

/// The scenario of the report (at 4 times its scale, see
/// [`RECOVERY_TIMEOUT`]): 50 checks fall back during a stall;
/// the delay goes back to 0; then 10 sequential checks of a fresh key with
/// a limit of 5 are all decided by the store: exactly 5 admitted.
async fn recovers_at_once(connections: usize, mode: FailureMode) {
    let memcached = Memcached::start();
    let proxy = CountingProxy::start(memcached.addr()).await;
    let store = store_behind(&proxy, connections, RECOVERY_TIMEOUT).await;
    let limiter = Arc::new(
        Limiter::builder(store.clone())
            .timeout(RECOVERY_TIMEOUT)
            .failure_mode(mode)
            .build(),
    );
    let policy = per_minute(5);

    proxy.delay_replies(STALL_MS);
    let stalled: Vec<_> = (0..50)
        .map(|index| {
            let (limiter, policy) = (limiter.clone(), policy.clone());
            tokio::spawn(async move {
                source_of(&limiter.check(&format!("stalled-{index}"), &policy, 1).await)
            })
        })
        .collect();
    for check in stalled {
        let (source, _) = check.await.unwrap();
        assert_eq!(source, Source::Fallback, "a check during the stall");
    }
    // The stall is known once a reply is later than the timeout. The
    // callers above gave up at their own deadlines, a little before their
    // requests' replies were a timeout late (a request is written after
    // its check starts; on a loaded machine, milliseconds after): a check
    // routed in that window cannot tell the stall from a slow reply, and
    // waits for it. The promise is about a stall that has been seen.
    wait_for("every connection overdue", PATIENCE, || async {
        store.topology().nodes[0].states.overdue == connections
    })
    .await;

    proxy.delay_replies(0);
    let recovered = Instant::now();
    let mut first_by_store = None;
    let mut admitted = 0;
    for attempt in 0..10 {
        let started = Instant::now();
        let (source, allowed) = source_of(&limiter.check("fresh", &policy, 1).await);
        let node = &store.topology().nodes[0];
        assert!(
            matches!(source, Source::Store | Source::NearCache),
            "{connections} connection(s), {mode:?}: check {attempt} after the stall was decided \
             by {source:?} in {:?}, {:?} after the store recovered; connections {:?}, redials {:?}",
            started.elapsed(),
            recovered.elapsed(),
            node.states,
            node.redials
        );
        first_by_store.get_or_insert_with(|| recovered.elapsed());
        admitted += u32::from(allowed);
    }
    assert_eq!(admitted, 5, "{connections} connection(s), {mode:?}");
    println!(
        "{connections} connection(s), {mode:?}: first check decided by the store {:?} after the \
         store recovered; redials {:?}",
        first_by_store.unwrap_or_default(),
        store.topology().nodes[0].redials
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stall_one_connection_decides_by_the_store_at_once_allow() {
    recovers_at_once(1, FailureMode::Allow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stall_one_connection_decides_by_the_store_at_once_deny() {
    recovers_at_once(1, FailureMode::Deny).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stall_two_connections_decide_by_the_store_at_once_allow() {
    recovers_at_once(2, FailureMode::Allow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_stall_two_connections_decide_by_the_store_at_once_deny() {
    recovers_at_once(2, FailureMode::Deny).await;
}

/// `VmRSS` of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A stall that never ends: every check is still answered within the call
/// timeout (plus what a loaded machine's scheduling adds, well short of the
/// stall itself, which a check queued behind it would wait), at most `connections` extra
/// connections are ever open beside the configured ones, and memory stays
/// flat: requests do not pile up behind late replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_stall_answers_in_time_with_bounded_connections_and_memory() {
    const CONNECTIONS: usize = 2;
    const CALLERS: usize = 16;
    const CHECKS_EACH: usize = 125;
    let memcached = Memcached::start();
    let proxy = Arc::new(CountingProxy::start(memcached.addr()).await);
    let store = store_behind(&proxy, CONNECTIONS, TIMEOUT).await;
    let limiter = Arc::new(Limiter::builder(store.clone()).timeout(TIMEOUT).build());
    let policy = per_minute(1_000_000);
    proxy.delay_replies(ENDLESS_STALL_MS);
    // Memory once every connection has been overdue and redialled a while.
    let warm_up = Instant::now();
    while warm_up.elapsed() < Duration::from_millis(500) {
        let _ = limiter.check("warm-up", &policy, 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rss_after_warm_up = rss_kib();
    // How late the runtime itself wakes a timer on this machine right now:
    // a check may be that much later than its timeout without waiting on
    // the store. On an idle machine it is about a millisecond.
    let probing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let lateness = tokio::spawn({
        let probing = probing.clone();
        async move {
            let mut latest = Duration::ZERO;
            while probing.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                latest = latest.max(asked.elapsed().saturating_sub(Duration::from_millis(2)));
            }
            latest
        }
    });
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (limiter, policy, proxy) = (limiter.clone(), policy.clone(), proxy.clone());
            tokio::spawn(async move {
                let (mut slowest, mut fallbacks) = (Duration::ZERO, 0);
                for index in 0..CHECKS_EACH {
                    let call = Instant::now();
                    let key = format!("k{caller}-{}", index % 10);
                    let decision = limiter.check(&key, &policy, 1).await.unwrap();
                    slowest = slowest.max(call.elapsed());
                    fallbacks += usize::from(decision.source == Source::Fallback);
                    assert!(
                        proxy.open_connections() <= 2 * CONNECTIONS,
                        "{} connections open",
                        proxy.open_connections()
                    );
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (slowest, fallbacks)
            })
        })
        .collect();
    let (mut slowest, mut fallbacks) = (Duration::ZERO, 0);
    for caller in callers {
        let (caller_slowest, caller_fallbacks) = caller.await.unwrap();
        slowest = slowest.max(caller_slowest);
        fallbacks += caller_fallbacks;
    }
    probing.store(false, std::sync::atomic::Ordering::Relaxed);
    let scheduling = lateness.await.unwrap();
    let rss_at_end = rss_kib();
    let checks = CALLERS * CHECKS_EACH;
    println!(
        "{checks} checks over {:?} of endless stall: {fallbacks} fell back, slowest {slowest:?}, \
         at most {} connections open, RSS {rss_after_warm_up} KiB before and {rss_at_end} KiB \
         after; timers woke up to {scheduling:?} late; store {:?}",
        started.elapsed(),
        proxy.most_open_connections(),
        store.topology().nodes[0],
    );
    assert!(
        slowest <= TIMEOUT + Duration::from_millis(10) + scheduling,
        "slowest check took {slowest:?} (timers woke up to {scheduling:?} late)"
    );
    assert!(
        proxy.most_open_connections() <= 2 * CONNECTIONS,
        "{} connections were open at once",
        proxy.most_open_connections()
    );
    assert!(
        fallbacks > checks / 2,
        "the stall must be felt to mean anything"
    );
    assert!(
        rss_at_end < rss_after_warm_up + 8 * 1024,
        "memory grew from {rss_after_warm_up} KiB to {rss_at_end} KiB"
    );
}

/// Every stall is met like the first: the extra connection dialled for the
/// first one closes once the stall is over, and is dialled again for the
/// next, whose checks are answered within the timeout as the first's were
/// (an extra once woke only the first time it was needed: the next stall's
/// checks routed to it waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stall_is_met_like_the_first() {
    let memcached = Memcached::start();
    let proxy = Arc::new(CountingProxy::start(memcached.addr()).await);
    let store = store_behind(&proxy, 1, TIMEOUT).await;
    let limiter = Arc::new(Limiter::builder(store.clone()).timeout(TIMEOUT).build());
    let policy = per_minute(1_000_000);
    // A check that has not ended by now waits on nothing that will come.
    let hung = Duration::from_secs(5);
    let check = |what: String| {
        let (limiter, policy) = (limiter.clone(), policy.clone());
        async move {
            tokio::time::timeout(hung, limiter.check(&what, &policy, 1))
                .await
                .unwrap_or_else(|_| panic!("{what} was not answered in {hung:?}"))
                .unwrap()
        }
    };
    for stall in 1..=2 {
        proxy.delay_replies(ENDLESS_STALL_MS);
        // Until the extra connection is open, and ten checks after.
        let mut after_extra = 0;
        for index in 0.. {
            check(format!("stall {stall}, check {index}")).await;
            if proxy.open_connections() == 2 {
                after_extra += 1;
            }
            if after_extra == 10 {
                break;
            }
            assert!(
                index < 1_000,
                "stall {stall}: no extra connection was dialled"
            );
        }
        proxy.delay_replies(0);
        let mut index = 0;
        wait_for("the extra connection closed", PATIENCE, || {
            index += 1;
            let check = check(format!("after stall {stall}, check {index}"));
            let proxy = proxy.clone();
            async move {
                check.await;
                proxy.open_connections() == 1
            }
        })
        .await;
    }
    assert_eq!(
        check("after both stalls".to_owned()).await.source,
        Source::Store
    );
}
