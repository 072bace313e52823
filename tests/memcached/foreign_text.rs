//! Counters another program has written text into, under our namespace: a
//! batch with one command refused leaves nothing counted, and a counter
//! that is not a number fails only its own check.

use std::sync::Arc;

use slidegate::store::{CounterKey, KeyDigest};
use slidegate::{FailureMode, Limit, Limiter, ManualClock, MemcachedStore, Source};

use super::{MINUTE, policy, store_at};
use crate::common;
use crate::common::Memcached;

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
