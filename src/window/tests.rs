use super::*;

const MINUTE: u64 = 60_000;

fn per_minute(limit: u64) -> Limit {
    Limit::new(limit, MINUTE, 1).unwrap()
}

#[test]
fn the_23_45_example() {
    // Limit 500/min; at 23:45 of a minute, prev = 400 and curr = 250.
    let now = 1_000 * MINUTE + 45_000;
    let estimate = estimate(per_minute(500).window(), &[400, 250], now);
    assert_eq!(estimate.as_f64(), 350.0);
    assert!(admits(per_minute(500), &[400, 250], now, 1));

    let verdict = decide(
        &[per_minute(500)],
        &[vec![400, 250]],
        now,
        1,
        Counting::IfAdmitted,
    );
    assert!(verdict.allowed && verdict.counted);
    assert_eq!(verdict.limits[0].estimate.as_f64(), 351.0);
    assert_eq!(verdict.remaining(), 149);
    assert_eq!(verdict.retry_after_ms, Some(0));
}

#[test]
fn precision_five_weights_only_the_oldest_sub_bucket() {
    // 100 per 10 s in 5 sub-buckets of 2 s; 30% into the current one.
    let limit = Limit::new(100, 10_000, 5).unwrap();
    let now = 7 * 10_000 + 4 * 2_000 + 600;
    let counts = [20, 10, 10, 10, 10, 30];
    // 20 * 0.7 + 10 + 10 + 10 + 10 + 30 = 84
    assert_eq!(estimate(limit.window(), &counts, now).as_f64(), 84.0);
    assert!(admits(limit, &counts, now, 16));
    assert!(!admits(limit, &counts, now, 17));
    // 17 fits once the oldest sub-bucket weighs at most 100 - 70 - 17:
    // 20 * (1 - f) <= 13 at f = 0.35, 700 ms into the sub-bucket.
    assert_eq!(retry_after_ms(limit, &counts, now, 17), Some(100));
    assert_eq!(retry_after_ms(limit, &counts, now, 101), None);
}

#[test]
fn counts_leave_the_window_a_window_after_their_sub_bucket_ends() {
    let minute = per_minute(10).window();
    let now = 7 * MINUTE + 15_000;
    assert_eq!(empty_after_ms(minute, &[0, 0], now), 0);
    // Only the previous minute: gone when this one ends.
    assert_eq!(empty_after_ms(minute, &[4, 0], now), 45_000);
    // This minute's: gone when the next one ends.
    assert_eq!(empty_after_ms(minute, &[4, 1], now), 105_000);
    // 10 s in 5 sub-buckets of 2 s, 600 ms into the current one: the
    // newest counted sub-bucket, three before the current, ended 4.6 s
    // ago and weighs for 10 s after its end.
    let tenths = Limit::new(100, 10_000, 5).unwrap().window();
    let now = 7 * 10_000 + 4 * 2_000 + 600;
    assert_eq!(empty_after_ms(tenths, &[1, 0, 3, 0, 0, 0], now), 5_400);
    assert_eq!(empty_after_ms(tenths, &[1, 0, 0, 0, 0, 0], now), 1_400);
    // Counted at the very start of a sub-bucket: a whole one more.
    assert_eq!(empty_after_ms(minute, &[0, 1], 7 * MINUTE), 2 * MINUTE);
    let verdict = decide(&[per_minute(10)], &[[0, 0]], now, 1, Counting::Never);
    assert_eq!(verdict.limits[0].empty_after_ms, 0, "a peek counts nothing");
    let verdict = decide(&[per_minute(10)], &[[0, 0]], now, 1, Counting::IfAdmitted);
    assert_eq!(verdict.limits[0].empty_after_ms, 2 * MINUTE - now % MINUTE);
}

#[test]
fn boundary_equality_is_admitted_exactly() {
    // prev = 3, f = 1/3: 3 * 2/3 = 2 exactly, which floats get wrong.
    let limit = Limit::new(3, 3_000, 1).unwrap();
    let now = 3_000 * 7 + 1_000;
    assert!(admits(limit, &[3, 0], now, 1));
    assert!(!admits(limit, &[3, 0], now - 1, 1));
    assert_eq!(retry_after_ms(limit, &[3, 0], now - 1, 1), Some(1));
}

#[test]
fn rejected_check_counts_nothing_and_says_when_to_retry() {
    let limit = per_minute(5);
    let now = 10 * MINUTE + 30_000;
    let verdict = decide(&[limit], &[vec![0, 5]], now, 1, Counting::IfAdmitted);
    assert!(!verdict.allowed && !verdict.counted);
    assert_eq!(verdict.limits[0].estimate.as_f64(), 5.0);
    assert_eq!(verdict.remaining(), 0);
    assert_eq!(verdict.limits[0].next_unit_ms, 42_000);
    // The 5 become the previous bucket at the next minute and must decay
    // to 4: 5 * (1 - f) <= 4 at f = 0.2, 12 s into it, 42 s from now.
    assert_eq!(verdict.retry_after_ms, Some(42_000));
}

#[test]
fn several_limits_count_only_if_all_admit() {
    let per_second = Limit::new(2, 1_000, 1).unwrap();
    let now = 50 * MINUTE + 500;
    let counts = vec![vec![0, 0], vec![0, 1]];
    let verdict = decide(
        &[per_second, per_minute(100)],
        &counts,
        now,
        2,
        Counting::IfAdmitted,
    );
    assert!(verdict.allowed);
    let counts = vec![vec![0, 1], vec![0, 1]];
    let verdict = decide(
        &[per_second, per_minute(100)],
        &counts,
        now,
        2,
        Counting::IfAdmitted,
    );
    assert!(!verdict.allowed && !verdict.counted);
    assert_eq!(verdict.limits[1].estimate.as_f64(), 1.0);
    // The minute limit never objected. The per-second one needs its 1
    // request gone entirely (1 * (1 - f) + 2 <= 2 only at f = 1), so
    // the request waits until the start of the second after next.
    assert_eq!(verdict.retry_after_ms, Some(1_500));
}

#[test]
fn peek_and_report_count_as_told() {
    let limit = per_minute(5);
    let now = 3 * MINUTE;
    let peek = decide(&[limit], &[vec![0, 4]], now, 1, Counting::Never);
    assert!(peek.allowed && !peek.counted);
    assert_eq!(peek.remaining(), 1);
    let report = decide(&[limit], &[vec![0, 5]], now, 2, Counting::Always);
    assert!(!report.allowed && report.counted);
    assert_eq!(report.limits[0].estimate.as_f64(), 7.0);
    assert_eq!(report.remaining(), 0);
}

#[test]
fn cost_above_the_limit_never_passes() {
    let verdict = decide(
        &[per_minute(5)],
        &[vec![0, 0]],
        MINUTE,
        6,
        Counting::IfAdmitted,
    );
    assert!(!verdict.allowed);
    assert_eq!(verdict.retry_after_ms, None);
}

#[test]
fn current_ceiling_is_what_the_older_counts_leave() {
    let limit = per_minute(10);
    // prev 8 at f = 0.5 weighs 4: the current counter can reach 6.
    assert_eq!(current_ceiling(limit, &[8, 3], MINUTE + 30_000), 6);
    assert_eq!(current_ceiling(limit, &[30, 3], MINUTE), 0);
}

#[test]
fn slide_drops_old_counters_and_zeroes_new_ones() {
    assert_eq!(slide(&[1, 2, 3], 10, 10).as_deref(), Some(&[1, 2, 3][..]));
    assert_eq!(slide(&[1, 2, 3], 10, 11).as_deref(), Some(&[2, 3, 0][..]));
    assert_eq!(slide(&[1, 2, 3], 10, 99).as_deref(), Some(&[0, 0, 0][..]));
    assert_eq!(
        slide(&[1, 2, 3], 10, u64::MAX).as_deref(),
        Some(&[0, 0, 0][..])
    );
    assert_eq!(slide(&[1, 2, 3], 10, 9), None);
}

/// `next_unit_ms` is how long one unit waits, however the decision got it
/// (a refused request of one unit shares its solve with `retry_after_ms`).
#[test]
fn next_unit_is_the_wait_of_one_unit() {
    let limits = [
        Limit::new(1, MINUTE, 1).unwrap(),
        Limit::new(10, 1_000, 1).unwrap(),
        Limit::new(100, 10_000, 5).unwrap(),
    ];
    for limit in limits {
        let buckets = limit.window().precision() as usize + 1;
        for counts in [0u64, 1, 3, 9, 10, 11, 60, 100, 250] {
            for now in [0u64, 1, 250, 999, 1_999, 7 * MINUTE + 45_000] {
                for cost in [1u64, 2, 5, 200] {
                    let mut counts = vec![counts / 2; buckets];
                    counts[buckets - 1] = counts[0] * 2;
                    let verdict = decide(&[limit], &[&counts[..]], now, cost, Counting::IfAdmitted);
                    let mut after = counts.clone();
                    if verdict.counted {
                        after[buckets - 1] += cost;
                    }
                    let state = &verdict.limits[0];
                    let expected = if state.remaining > 0 {
                        0
                    } else {
                        retry_after_ms(limit, &after, now, 1).unwrap()
                    };
                    assert_eq!(
                        state.next_unit_ms, expected,
                        "{counts:?} at {now}, cost {cost}"
                    );
                    if !verdict.allowed {
                        assert_eq!(
                            verdict.retry_after_ms,
                            retry_after_ms(limit, &after, now, cost),
                            "{counts:?} at {now}, cost {cost}"
                        );
                    }
                }
            }
        }
    }
}
