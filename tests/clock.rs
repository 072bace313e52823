//! The shared clock: two instances whose local clocks are 3 s apart count
//! one window together exactly when they read the first Memcached node's
//! clock, and do not when each reads its own.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::service::Slidegate;
use slidegate::{
    Clock, Limit, Limiter, MemcachedClock, MemcachedStore, Policy, Store, SystemClock,
};

/// A host whose clock is `by_ms` ahead of this one's: the test-only offset.
struct Skewed {
    by_ms: u64,
}

impl Clock for Skewed {
    fn now_ms(&self) -> u64 {
        SystemClock.now_ms() + self.by_ms
    }
}

/// A host whose clock is set back a second at every reading, while
/// `stepping`: whatever two readings an interval is taken between, the
/// second is earlier than the first.
struct SetBackAtEveryReading {
    back_ms: AtomicU64,
    stepping: AtomicBool,
}

impl Clock for SetBackAtEveryReading {
    fn now_ms(&self) -> u64 {
        let back_ms = if self.stepping.load(Ordering::SeqCst) {
            self.back_ms.fetch_add(1_000, Ordering::SeqCst)
        } else {
            self.back_ms.load(Ordering::SeqCst)
        };
        SystemClock.now_ms() - back_ms
    }
}

const SKEW_MS: u64 = 3_000;
/// "A few ms": how closely two instances' shared clocks must agree.
const AGREE_WITHIN_MS: i64 = 10;
const LIMIT: u64 = 20;
/// Shorter than the skew: with local clocks the two instances are never in
/// the same bucket.
const WINDOW_MS: u64 = 2_000;

/// Two instances take turns checking one fresh key, starting early in a
/// window by `timing`'s clock; how many checks were admitted. `None` when
/// the run crossed a bucket boundary (by `timing`), to be run again.
async fn admitted_together<S: Store>(
    a: &Limiter<S>,
    b: &Limiter<S>,
    timing: &dyn Clock,
    key: &str,
) -> Option<u64> {
    let policy = Policy::new("together", vec![Limit::new(LIMIT, WINDOW_MS, 1).unwrap()]).unwrap();
    // Early in a window, but clear of its start, so that instances which
    // disagree by a few ms still share the bucket.
    loop {
        let position = timing.now_ms() % WINDOW_MS;
        if (300..700).contains(&position) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bucket = timing.now_ms() / WINDOW_MS;
    let mut admitted = 0;
    for _ in 0..LIMIT {
        for limiter in [a, b] {
            if limiter.check(key, &policy, 1).await.unwrap().allowed {
                admitted += 1;
            }
        }
    }
    let still_there = timing.now_ms() % WINDOW_MS < WINDOW_MS - 300;
    (timing.now_ms() / WINDOW_MS == bucket && still_there).then_some(admitted)
}

fn limiter(store: MemcachedStore, clock: Arc<dyn Clock>) -> Limiter<MemcachedStore> {
    Limiter::builder(store)
        .clock(clock)
        // Every decision from the store, none from remembered rejects.
        .near_cache_capacity(0)
        .timeout(Duration::from_secs(2))
        .build()
}

async fn run(
    a: &Limiter<MemcachedStore>,
    b: &Limiter<MemcachedStore>,
    timing: &dyn Clock,
    name: &str,
) -> u64 {
    for attempt in 0..5 {
        let key = format!("{name}-{attempt}-{}", common::unique_namespace());
        if let Some(admitted) = admitted_together(a, b, timing, &key).await {
            return admitted;
        }
    }
    panic!("five runs in a row crossed a bucket boundary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_three_seconds_apart_count_one_window_together_on_the_shared_clock() {
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let behind: Arc<dyn Clock> = Arc::new(Skewed { by_ms: 0 });
    let ahead: Arc<dyn Clock> = Arc::new(Skewed { by_ms: SKEW_MS });

    let clock_a = MemcachedClock::start(&options, behind.clone())
        .await
        .unwrap();
    let clock_b = MemcachedClock::start(&options, ahead.clone())
        .await
        .unwrap();
    assert!(
        clock_a.synced(Duration::from_secs(20)).await,
        "no estimate for A"
    );
    assert!(
        clock_b.synced(Duration::from_secs(20)).await,
        "no estimate for B"
    );
    let disagreement = clock_a.now_ms() as i64 - clock_b.now_ms() as i64;
    println!(
        "offsets: A {} ms, B {} ms; the two shared clocks differ by {disagreement} ms (local clocks: {SKEW_MS} ms)",
        clock_a.offset_ms(),
        clock_b.offset_ms()
    );
    // The README's promise: instances watching the same tick "agree to a
    // few ms whatever their local clocks say".
    assert!(
        disagreement.abs() <= AGREE_WITHIN_MS,
        "the shared clocks differ by {disagreement} ms, more than {AGREE_WITHIN_MS} ms"
    );

    let connect = || async { MemcachedStore::connect(&options).await.unwrap() };
    let a = limiter(connect().await, clock_a.clone());
    let b = limiter(connect().await, clock_b.clone());
    let shared = run(&a, &b, &*clock_a, "shared").await;
    println!(
        "source = memcached: {shared} admitted of {} (limit {LIMIT})",
        2 * LIMIT
    );
    assert_eq!(shared, LIMIT, "the two instances count one window together");

    let a = limiter(connect().await, behind.clone());
    let b = limiter(connect().await, ahead.clone());
    let local = run(&a, &b, &*behind, "local").await;
    println!(
        "source = local: {local} admitted of {} (limit {LIMIT})",
        2 * LIMIT
    );
    assert!(
        local > LIMIT,
        "3 s apart, local clocks put the instances in different buckets"
    );
}

#[tokio::test]
async fn the_service_decides_on_the_shared_clock_when_configured() {
    let memcached = common::shared_memcached();
    let dir = Slidegate::dir("clock");
    let addr = common::process::free_addr();
    let config = format!(
        "listen = \"{addr}\"\n[memcached]\nservers = [\"{}\"]\nnamespace = \"{}\"\n[clock]\nsource = \"memcached\"\n",
        memcached.addr(),
        common::unique_namespace()
    );
    std::fs::write(dir.join("slidegate.toml"), config).unwrap();
    let mut command = Slidegate::command();
    command.arg("--config").arg(dir.join("slidegate.toml"));
    let service = Slidegate::start_in(dir, command, addr, &[]);
    let metrics = service.metrics().await;
    let offset = metrics.value("slidegate_clock_offset_ms");
    println!("the service's offset to Memcached's clock: {offset} ms");
    assert_eq!(metrics.value("slidegate_clock_backward_jumps_total"), 0.0);
}

/// The estimator times its probes on a monotonic clock: a local clock set
/// back between every two of its readings neither panics the estimate nor
/// gives an absurd offset (on wall-clock intervals, the subtraction of two
/// readings underflowed: a panic in debug, an offset of about -9.2e18 ms
/// in release). The offset it finds puts the local clock, wherever it has
/// been set back to, on Memcached's time, which on this host is ours.
#[tokio::test]
async fn a_local_clock_set_back_during_the_estimate_still_gives_the_nodes_time() {
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let local = Arc::new(SetBackAtEveryReading {
        back_ms: AtomicU64::new(0),
        stepping: AtomicBool::new(true),
    });
    let shared = MemcachedClock::start(&options, local.clone())
        .await
        .unwrap();
    let synced = shared.synced(Duration::from_secs(20)).await;
    local.stepping.store(false, Ordering::SeqCst);
    assert!(synced, "no estimate while the local clock was set back");
    let set_back_ms = local.back_ms.load(Ordering::SeqCst);
    let error_ms = shared.now_ms() as i64 - SystemClock.now_ms() as i64;
    println!(
        "local clock set back by {set_back_ms} ms in all during the estimate; offset {} ms; \
         the shared clock is {error_ms} ms from this host's",
        shared.offset_ms()
    );
    // Readings after the estimate's last one (a few: the next estimate is
    // scheduled) set the local clock back further, a second each.
    assert!(
        error_ms.abs() < 5_000,
        "the shared clock is {error_ms} ms off (offset {} ms)",
        shared.offset_ms()
    );
}

/// What the README says an estimate costs and what a silent Memcached does
/// to the shared clock: the first estimate takes at most 110 probes (each
/// a round trip through the counting proxy, on a connection of its own),
/// and once Memcached stops answering, the time stays the local clock plus
/// the last offset: only the next estimate is affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_estimate_costs_at_most_110_probes_and_a_silent_memcached_keeps_the_offset() {
    let memcached = common::Memcached::start();
    let proxy = common::proxy::CountingProxy::start(memcached.addr()).await;
    let options = common::memcached_options(vec![proxy.addr.clone()]);
    let shared = MemcachedClock::start(&options, Arc::new(SystemClock))
        .await
        .unwrap();
    assert!(shared.synced(Duration::from_secs(20)).await, "no estimate");
    let probes = proxy.round_trips();
    assert!(
        (2..=110).contains(&probes),
        "{probes} probes for the estimate"
    );

    let offset = shared.offset_ms();
    proxy.cut();
    drop(memcached);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let drift = shared.now_ms() as i64 - SystemClock.now_ms() as i64 - offset;
        assert!(
            drift.abs() <= 5,
            "the shared time moved by {drift} ms from local + offset"
        );
        assert_eq!(shared.offset_ms(), offset);
    }
}
