use super::*;
use crate::policy::Window;
use crate::store::KeyDigest;

fn counter_of(key: &str, bucket: u64) -> CounterKey {
    CounterKey {
        digest: KeyDigest::of("t", key),
        window: Window::new(1_000, 1).unwrap(),
        bucket,
    }
}

fn counter(bucket: u64) -> CounterKey {
    counter_of("k", bucket)
}

#[test]
fn counters_expire_after_their_ttl_and_their_slots_are_reused() {
    let mut shard = Shard::new(1);
    assert_eq!(shard.add(&counter(1), 2, 0), (2, false));
    assert_eq!(shard.add(&counter(1), 3, 10).0, 5);
    // TTL of a 1 s window: 2 s + 2 s margin.
    assert_eq!(shard.read(&counter(1), 3_999), 5);
    assert_eq!(shard.read(&counter(1), 4_000), 0);
    assert_eq!(shard.subtract(&counter(1), 1, 4_000), None);
    // An expired counter starts again from the amount, in its own slot.
    assert_eq!(shard.add(&counter(1), 1, 4_000), (1, false));
    assert_eq!(shard.held(), 1);
    // A full set of expired counters takes new ones without evicting.
    for bucket in 2..2 + WAYS as u64 {
        shard.add(&counter(bucket), 1, 4_000);
    }
    for bucket in 100..100 + WAYS as u64 {
        assert!(!shard.add(&counter(bucket), 1, 9_000).1, "bucket {bucket}");
    }
    assert_eq!(shard.held(), WAYS);
}

#[test]
fn a_full_set_evicts_its_least_recently_used_counter() {
    let mut shard = Shard::new(1);
    for bucket in 0..WAYS as u64 {
        shard.add(&counter(bucket), 10 + bucket, 0);
    }
    // Bucket 0 is the oldest, but reading it makes bucket 1 the least
    // recently used.
    assert_eq!(shard.read(&counter(0), 1), 10);
    assert_eq!(shard.add(&counter(99), 1, 2), (1, true));
    assert_eq!(shard.read(&counter(1), 3), 0, "evicted: reads as 0");
    assert_eq!(shard.read(&counter(0), 3), 10);
    assert_eq!(shard.read(&counter(99), 3), 1);
}

#[tokio::test]
async fn a_store_holds_its_capacity_and_counts_evictions() {
    let store = MemoryStore::with_capacity(1_000);
    assert!(store.capacity() >= 1_000 && store.capacity() < 1_000 + 64 * WAYS);
    let batch = |key: &str| CounterBatch {
        reads: smallvec::smallvec![counter_of(key, 0)],
        adds: smallvec::smallvec![counter_of(key, 1)],
        amount: 1,
        now_ms: 1_000,
        deadline: None,
    };
    for index in 0..10 * store.capacity() {
        store
            .read_and_add(&batch(&index.to_string()))
            .await
            .unwrap();
    }
    assert!(store.len() <= store.capacity());
    assert!(store.len() > store.capacity() * 9 / 10, "{}", store.len());
    assert!(store.evictions() >= 9 * store.capacity() as u64);
    // A key in use survives a flood of new ones.
    let hot = batch("hot");
    store.read_and_add(&hot).await.unwrap();
    for index in 0..10 * store.capacity() {
        store
            .read_and_add(&batch(&format!("flood-{index}")))
            .await
            .unwrap();
        if index % 8 == 0 {
            store.read_and_add(&hot).await.unwrap();
        }
    }
    let counts = store.read_and_add(&hot).await.unwrap();
    assert!(counts.added[0] > 1, "the hot counter was kept");
}

/// A touch is a use for the LRU (what a near-cache refusal does in place
/// of a check), and creates nothing.
#[tokio::test]
async fn a_touched_counter_is_kept_and_a_missing_one_stays_missing() {
    let store = MemoryStore::with_capacity(WAYS);
    for bucket in 0..WAYS as u64 {
        store.shard(&counter(bucket)).add(&counter(bucket), 1, 0);
    }
    store.touch(&[counter(0), counter_of("never-added", 0)], 1);
    assert_eq!(store.len(), WAYS, "nothing created");
    // Without the touch, bucket 0 (the oldest) would go first.
    store.shard(&counter(99)).add(&counter(99), 1, 2);
    assert_eq!(store.shard(&counter(0)).read(&counter(0), 3), 1);
    assert_eq!(store.shard(&counter(1)).read(&counter(1), 3), 0, "evicted");
}

#[test]
fn capacity_rounds_up_to_whole_sets() {
    assert_eq!(MemoryStore::with_capacity(0).capacity(), WAYS);
    assert_eq!(MemoryStore::with_capacity(16).capacity(), 16);
    assert_eq!(MemoryStore::with_capacity(17).capacity(), 32);
    let store = MemoryStore::with_capacity(DEFAULT_MEMORY_CAPACITY);
    assert_eq!(store.capacity(), 1_000_448);
    assert_eq!(store.table_bytes() / store.capacity(), 32);
}

/// Expiry is kept in 32 bits of seconds; a clock past 2038 (2^31 s) or
/// 2106 (2^32 s) still counts, expires on time and reuses free slots. Past
/// 2106 every expiry had saturated to the past: nothing counted, and every
/// check was admitted.
#[test]
fn counters_count_and_expire_whatever_the_century() {
    for start_ms in [
        2_200_000_000_000,
        4_294_967_295_000,
        4_300_000_000_000,
        9_000_000_000_000,
    ] {
        let mut shard = Shard::new(1);
        assert_eq!(
            shard.add(&counter(1), 2, start_ms),
            (2, false),
            "{start_ms}"
        );
        assert_eq!(shard.add(&counter(1), 3, start_ms + 10).0, 5, "{start_ms}");
        assert_eq!(shard.read(&counter(1), start_ms + 3_000), 5, "{start_ms}");
        assert_eq!(
            shard.read(&counter(1), start_ms + 5_000),
            0,
            "expired: {start_ms}"
        );
        // Free slots are taken before a live counter is evicted.
        for bucket in 2..1 + WAYS as u64 {
            let (_, evicted) = shard.add(&counter(bucket), 1, start_ms);
            assert!(!evicted, "{start_ms}");
        }
        assert_eq!(shard.read(&counter(2), start_ms), 1, "{start_ms}");
    }
}

/// The server holds its store as an `AnyStore`, an embedder perhaps in an
/// `Arc`: held either way, the embedded store must still say it keeps what
/// is touched, or a near-cache refusal would skip the touch.
#[test]
fn the_embedded_store_keeps_what_is_touched_however_it_is_held() {
    use crate::store::AnyStore;
    assert!(MemoryStore::with_capacity(WAYS).keeps_what_is_touched());
    assert!(std::sync::Arc::new(MemoryStore::with_capacity(WAYS)).keeps_what_is_touched());
    assert!(AnyStore::Memory(MemoryStore::with_capacity(WAYS)).keeps_what_is_touched());
}
