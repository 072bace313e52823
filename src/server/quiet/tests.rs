//! The watch on tokio's paused clock: each test's timeline is exact.

use std::future::pending;

use super::*;

const QUIET: Duration = Duration::from_secs(10);

/// Holds a request of `activity` from `start` to `end` (from now).
fn request(activity: &Arc<Activity>, start: Duration, end: Duration) {
    let activity = activity.clone();
    tokio::spawn(async move {
        tokio::time::sleep(start).await;
        let serving = activity.serving();
        tokio::time::sleep(end - start).await;
        drop(serving);
    });
}

/// Runs a connection that never ends by itself under the watch: how long
/// it stayed open after `since`.
async fn open_after(activity: &Activity, since: Duration) -> Duration {
    let opened = Instant::now();
    let closed = until_quiet(pending::<()>(), activity, QUIET).await;
    assert!(closed.is_none());
    opened.elapsed().checked_sub(since).unwrap_or_else(|| {
        panic!(
            "closed {:?} after it opened, before {since:?}",
            opened.elapsed()
        )
    })
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_never_makes_a_request_is_closed_at_the_quiet_timeout() {
    let activity = Arc::new(Activity::default());
    assert_eq!(open_after(&activity, Duration::ZERO).await, QUIET);
}

#[tokio::test(start_paused = true)]
async fn a_connection_is_closed_between_one_and_one_point_two_timeouts_after_its_last_request() {
    for (start, end) in [(3_300, 3_400), (3_999, 4_001), (0, 9_999), (9_999, 10_000)] {
        let activity = Arc::new(Activity::default());
        request(
            &activity,
            Duration::from_millis(start),
            Duration::from_millis(end),
        );
        let after_last = open_after(&activity, Duration::from_millis(end)).await;
        assert!(
            after_last >= QUIET && after_last <= QUIET * 6 / 5,
            "a request from {start} to {end} ms: closed {after_last:?} after it ended"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_for_longer_than_the_timeout_keeps_its_connection() {
    let activity = Arc::new(Activity::default());
    let end = QUIET * 6;
    request(&activity, Duration::from_secs(1), end);
    let after_last = open_after(&activity, end).await;
    assert!(
        after_last >= QUIET && after_last <= QUIET * 6 / 5,
        "{after_last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_one_after_another_keep_the_connection_open() {
    let activity = Arc::new(Activity::default());
    // One every 7 s for 70 s: never 10 s without one.
    for n in 0..10 {
        let start = Duration::from_secs(7 * n + 1);
        request(&activity, start, start + Duration::from_millis(5));
    }
    let last_end = Duration::from_secs(64) + Duration::from_millis(5);
    let after_last = open_after(&activity, last_end).await;
    assert!(
        after_last >= QUIET && after_last <= QUIET * 6 / 5,
        "{after_last:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_ends_by_itself_gives_its_own_answer() {
    let activity = Arc::new(Activity::default());
    let connection = async {
        tokio::time::sleep(QUIET * 3).await;
        "ended"
    };
    // Requests keep it open until it ends.
    for n in 0..4 {
        let start = Duration::from_secs(8 * n);
        request(&activity, start, start + Duration::from_millis(1));
    }
    assert_eq!(
        until_quiet(connection, &activity, QUIET).await,
        Some("ended")
    );
}
