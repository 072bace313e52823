use super::*;
use crate::policy::Limit;

/// The lower bounds of a policy of one limit.
fn lower(counts: &[u64]) -> LowerBounds {
    smallvec::smallvec![counts.iter().copied().collect()]
}

/// Five a minute under policy `api`, and the near-cache key of its key
/// `k`: what most of these tests remember a refusal of.
fn five_a_minute() -> (Limit, Policy, NearKey) {
    let per_minute = Limit::new(5, 60_000, 1).unwrap();
    let policy = Policy::new("api", vec![per_minute]).unwrap();
    let key = NearKey::new(KeyDigest::of("api", "k"), &policy);
    (per_minute, policy, key)
}

/// What a refusal saw of `limit` in bucket 10: `counts`, oldest first.
fn seen_in_bucket_10(limit: Limit, counts: &[u64]) -> Seen {
    Seen {
        window: limit.window(),
        bucket: 10,
        counts: counts.iter().copied().collect(),
    }
}

/// The filter beside the cache never hides an entry moka holds, through
/// replacements, invalidations and evictions of many more keys than fit.
#[test]
fn every_entry_held_is_found_through_churn() {
    let limit = Limit::new(5, 60_000, 1).unwrap();
    let policy = Policy::new("api", vec![limit]).unwrap();
    let cache = NearCache::new(100).with_revalidate(Duration::from_secs(3600));
    let key = |n: u32| NearKey::new(KeyDigest::of("api", &format!("k{n}")), &policy);
    let seen = || Seen {
        window: limit.window(),
        bucket: 10,
        counts: smallvec::smallvec![0, 5],
    };
    let remember = |n: u32| {
        cache.remember(
            key(n),
            vec![seen()],
            Duration::from_secs(60),
            600_000,
            Items::One,
        )
    };
    for round in 0..3 {
        for n in 0..1_000 {
            remember(n);
            if n % 3 == round {
                remember(n); // replaced
            }
            if n % 7 == round {
                cache.forget(&key(n));
            }
        }
    }
    let held = cache.cache.as_ref().unwrap();
    held.entries.run_pending_tasks();
    let mut found = 0;
    for n in 0..1_000 {
        if held.entries.contains_key(&key(n)) {
            assert_ne!(
                cache.lookup(&key(n), &policy, 600_000, Items::One),
                Lookup::Unknown,
                "k{n}"
            );
            found += 1;
        }
    }
    assert!(found > 0 && found <= 100, "{found} held");
    // Forgotten, then remembered again: found again.
    cache.forget(&key(5));
    assert_eq!(
        cache.lookup(&key(5), &policy, 600_000, Items::One),
        Lookup::Unknown
    );
    remember(5);
    assert_ne!(
        cache.lookup(&key(5), &policy, 600_000, Items::One),
        Lookup::Unknown
    );
}

#[test]
fn remembered_counts_slide_with_time_and_check_windows() {
    let (per_minute, policy, key) = five_a_minute();
    // Trusted for an hour: this test is about sliding, not revalidation.
    let cache = NearCache::new(10).with_revalidate(Duration::from_secs(3600));
    assert_eq!(cache.lower_bounds(&key, &policy, 0, Items::One), None);

    let seen = seen_in_bucket_10(per_minute, &[2, 5]);
    cache.remember(
        key,
        vec![seen],
        Duration::from_secs(60),
        600_000,
        Items::One,
    );
    assert_eq!(
        cache.lower_bounds(&key, &policy, 600_000, Items::One),
        Some(lower(&[2, 5]))
    );
    assert_eq!(
        cache.lower_bounds(&key, &policy, 660_000, Items::One),
        Some(lower(&[5, 0]))
    );
    assert_eq!(
        cache.lower_bounds(&key, &policy, 599_999, Items::One),
        None,
        "clock went back"
    );

    // Same key and windows hash, but another precision: not usable.
    let finer = Policy::new("api", vec![per_minute.with_precision(2).unwrap()]).unwrap();
    assert_eq!(cache.lower_bounds(&key, &finer, 600_000, Items::One), None);
}

#[test]
fn an_entry_is_read_again_by_one_check_per_interval() {
    let (per_minute, policy, key) = five_a_minute();
    let cache = NearCache::new(10).with_revalidate(Duration::from_secs(1));
    let seen = seen_in_bucket_10(per_minute, &[2, 5]);
    cache.remember(
        key,
        vec![seen],
        Duration::from_secs(60),
        600_000,
        Items::One,
    );
    let bounds = lower(&[2, 5]);
    let at = |now_ms| cache.lookup(&key, &policy, now_ms, Items::One);
    assert_eq!(at(600_999), Lookup::Trusted(bounds.clone()));
    assert_eq!(at(601_000), Lookup::Revalidate(bounds.clone()));
    assert_eq!(at(601_000), Lookup::Trusted(bounds.clone()), "claimed");
    assert_eq!(at(601_999), Lookup::Trusted(bounds.clone()));
    assert_eq!(at(602_000), Lookup::Revalidate(bounds.clone()));
    // The multi-key path forgets a due entry, so the store decides.
    assert_eq!(cache.lower_bounds(&key, &policy, 603_000, Items::One), None);
    assert_eq!(at(603_000), Lookup::Unknown);
}

#[test]
fn entries_weigh_their_counts_and_bytes_bound_them() {
    let fine = Limit::new(1, 127_000, 127).unwrap();
    let policy = Policy::inline(vec![fine]).unwrap();
    let seen = |counts: usize| Seen {
        window: fine.window(),
        bucket: 1,
        counts: vec![1; counts].into(),
    };
    let small = Entry::new(
        smallvec::smallvec![seen(2)],
        Duration::from_secs(1),
        0,
        Items::One,
    );
    let large = Entry::new(
        smallvec::smallvec![seen(128)],
        Duration::from_secs(1),
        0,
        Items::One,
    );
    assert!(large.bytes >= small.bytes + 1024, "{}", large.bytes);

    // Room for about 10 large entries; 100 are remembered.
    let cache = NearCache::bounded(1_000, 10 * u64::from(large.bytes) + 100);
    for index in 0..100 {
        let key = NearKey::new(KeyDigest::of("inline", &index.to_string()), &policy);
        cache.remember(key, vec![seen(128)], Duration::from_secs(60), 0, Items::One);
    }
    assert!(cache.settled_weight() <= 10 * u64::from(large.bytes) + 100);
    assert!(cache.settled_len() <= 10, "{}", cache.settled_len());

    // And `capacity` still bounds the entries, however small.
    let cache = NearCache::bounded(10, DEFAULT_MAX_BYTES);
    for index in 0..100 {
        let key = NearKey::new(KeyDigest::of("inline", &index.to_string()), &policy);
        cache.remember(key, vec![seen(2)], Duration::from_secs(60), 0, Items::One);
    }
    assert!(cache.settled_len() <= 10, "{}", cache.settled_len());
}

#[test]
fn a_key_under_two_policies_keeps_an_entry_for_each() {
    let per_minute = Limit::new(5, 60_000, 1).unwrap();
    let per_second = Limit::new(2, 1_000, 1).unwrap();
    let minutes = Policy::inline(vec![per_minute]).unwrap();
    let seconds = Policy::inline(vec![per_second]).unwrap();
    let cache = NearCache::new(10).with_revalidate(Duration::from_secs(3600));
    // One client key, one scope: the windows tell the entries apart.
    let digest = KeyDigest::of("inline", "k");
    let seen = |limit: Limit, counts: SmallVec<[u64; 2]>| Seen {
        window: limit.window(),
        bucket: limit.window().bucket_of(600_000),
        counts,
    };
    let minute_key = NearKey::new(digest, &minutes);
    let second_key = NearKey::new(digest, &seconds);
    cache.remember(
        minute_key,
        vec![seen(per_minute, smallvec::smallvec![0, 5])],
        Duration::from_secs(60),
        600_000,
        Items::One,
    );
    cache.remember(
        second_key,
        vec![seen(per_second, smallvec::smallvec![0, 2])],
        Duration::from_secs(60),
        600_000,
        Items::One,
    );
    assert_eq!(
        cache.lower_bounds(&minute_key, &minutes, 600_000, Items::One),
        Some(lower(&[0, 5]))
    );
    assert_eq!(
        cache.lower_bounds(&second_key, &seconds, 600_000, Items::One),
        Some(lower(&[0, 2]))
    );
    assert_eq!(cache.settled_len(), 2);
    assert_eq!(cache.len(), 2);
    assert!(!cache.is_empty());
}

#[test]
fn a_refusal_remembered_again_replaces_the_entry() {
    let (per_minute, policy, key) = five_a_minute();
    let cache = NearCache::new(10).with_revalidate(Duration::from_secs(3600));
    for counts in [[2, 5], [3, 6]] {
        let seen = seen_in_bucket_10(per_minute, &counts);
        cache.remember(
            key,
            vec![seen],
            Duration::from_secs(60),
            600_000,
            Items::One,
        );
    }
    assert_eq!(
        cache.lower_bounds(&key, &policy, 600_000, Items::One),
        Some(lower(&[3, 6]))
    );
    assert_eq!(cache.settled_len(), 1);
}

#[test]
fn entries_leave_when_their_lifetime_ends() {
    // moka's expiry runs on its own clock, not the limiter's: this test
    // polls, with a deadline that only bounds a hang.
    let (per_minute, policy, _) = five_a_minute();
    let cache = NearCache::new(10);
    let seen = || seen_in_bucket_10(per_minute, &[2, 5]);
    let created = NearKey::new(KeyDigest::of("api", "created"), &policy);
    let updated = NearKey::new(KeyDigest::of("api", "updated"), &policy);
    let lifetime = Duration::from_millis(20);
    cache.remember(created, vec![seen()], lifetime, 600_000, Items::One);
    cache.remember(
        updated,
        vec![seen()],
        Duration::from_secs(3600),
        600_000,
        Items::One,
    );
    cache.remember(updated, vec![seen()], lifetime, 600_000, Items::One);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cache.settled_len() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "entries outlived their lifetime"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(cache.is_empty());
}

#[test]
fn by_default_capacity_bounds_the_entries_before_bytes_do() {
    // 2,000 refused keys of a 128-counter policy, about 1.4 KB each, in
    // a cache of 10,000 keys and the default 64 MiB: all are kept.
    let fine = Limit::new(1, 127_000, 127).unwrap();
    let policy = Policy::inline(vec![fine]).unwrap();
    let cache = NearCache::new(10_000);
    for index in 0..2_000 {
        let key = NearKey::new(KeyDigest::of("inline", &index.to_string()), &policy);
        let seen = Seen {
            window: fine.window(),
            bucket: 1,
            counts: vec![1; 128].into(),
        };
        cache.remember(key, vec![seen], Duration::from_secs(60), 0, Items::One);
    }
    assert_eq!(cache.settled_len(), 2_000);
    // Each weighs the larger of its size and 64 MiB / 10,000 bytes.
    assert_eq!(cache.settled_weight(), 2_000 * 6_710);
}

#[test]
fn max_bytes_zero_remembers_nothing() {
    let (per_minute, policy, key) = five_a_minute();
    let cache = NearCache::bounded(10, 0);
    let seen = seen_in_bucket_10(per_minute, &[2, 5]);
    cache.remember(
        key,
        vec![seen],
        Duration::from_secs(60),
        600_000,
        Items::One,
    );
    assert_eq!(cache.lower_bounds(&key, &policy, 600_000, Items::One), None);
    assert_eq!(cache.settled_len(), 0);
}

#[test]
fn capacity_zero_remembers_nothing() {
    let policy = Policy::new("api", vec![Limit::new(5, 1000, 1).unwrap()]).unwrap();
    let cache = NearCache::new(0);
    let key = NearKey::new(KeyDigest::of("api", "k"), &policy);
    cache.remember(key, vec![], Duration::from_secs(1), 0, Items::One);
    assert_eq!(cache.lower_bounds(&key, &policy, 0, Items::One), None);
}

/// What a request of several items remembered may hold other such
/// requests' additions still to be taken back: it refuses requests of
/// several items, and a request of one item finds nothing in it. What a
/// request of one item remembered serves both.
#[test]
fn an_entry_of_several_items_refuses_only_requests_of_several() {
    let (per_minute, policy, key) = five_a_minute();
    let cache = NearCache::new(10).with_revalidate(Duration::from_secs(3600));
    let seen = || vec![seen_in_bucket_10(per_minute, &[0, 5])];
    cache.remember(
        key,
        seen(),
        Duration::from_secs(60),
        600_000,
        Items::Several,
    );
    assert_eq!(
        cache.lookup(&key, &policy, 600_000, Items::One),
        Lookup::Unknown
    );
    assert_eq!(cache.lower_bounds(&key, &policy, 600_000, Items::One), None);
    assert_eq!(
        cache.lower_bounds(&key, &policy, 600_000, Items::Several),
        Some(lower(&[0, 5]))
    );
    cache.remember(key, seen(), Duration::from_secs(60), 600_000, Items::One);
    for asking in [Items::One, Items::Several] {
        assert_eq!(
            cache.lower_bounds(&key, &policy, 600_000, asking),
            Some(lower(&[0, 5])),
            "{asking:?}"
        );
    }
    assert_eq!((Items::of(1), Items::of(2)), (Items::One, Items::Several));
}
