//! The watch on tokio's paused clock: each test's timeline is exact.

use std::task::Context;

use super::*;

const QUIET: Duration = Duration::from_secs(10);

/// A connection that ends only when it is drained.
#[derive(Default)]
struct UntilDrained {
    drained: bool,
}

impl Future for UntilDrained {
    type Output = &'static str;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<&'static str> {
        if self.drained {
            Poll::Ready("drained")
        } else {
            Poll::Pending
        }
    }
}

impl Drainable for UntilDrained {
    fn drain(mut self: Pin<&mut Self>) {
        self.drained = true;
    }
}

/// A connection that ends by itself, drained or not.
struct EndsItself(Pin<Box<dyn Future<Output = &'static str> + Send>>);

impl Future for EndsItself {
    type Output = &'static str;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
        self.0.as_mut().poll(cx)
    }
}

impl Drainable for EndsItself {
    fn drain(self: Pin<&mut Self>) {}
}

/// A member of a drain of its own, which never begins.
fn undrained() -> Member {
    Arc::new(Drain::default()).member()
}

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
    let connection = UntilDrained::default();
    let closed = until_quiet(connection, activity, undrained(), QUIET).await;
    assert!(closed.is_none());
    opened.elapsed().checked_sub(since).unwrap_or_else(|| {
        panic!(
            "closed {:?} after it opened, before {since:?}",
            opened.elapsed()
        )
    })
}

/// Closed between one and 1.2 quiet timeouts after the last request.
fn closed_in_time(after_last: Duration, what: &str) {
    assert!(
        after_last >= QUIET && after_last <= QUIET * 6 / 5,
        "{what}: closed {after_last:?} after the last request ended"
    );
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
        closed_in_time(after_last, &format!("a request from {start} to {end} ms"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_for_longer_than_the_timeout_keeps_its_connection() {
    let activity = Arc::new(Activity::default());
    let end = QUIET * 6;
    request(&activity, Duration::from_secs(1), end);
    closed_in_time(open_after(&activity, end).await, "a request of 59 s");
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
    closed_in_time(open_after(&activity, last_end).await, "requests 7 s apart");
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_ends_by_itself_gives_its_own_answer() {
    let activity = Arc::new(Activity::default());
    let connection = EndsItself(Box::pin(async {
        tokio::time::sleep(QUIET * 3).await;
        "ended"
    }));
    // Requests keep it open until it ends.
    for n in 0..4 {
        let start = Duration::from_secs(8 * n);
        request(&activity, start, start + Duration::from_millis(1));
    }
    assert_eq!(
        until_quiet(connection, &activity, undrained(), QUIET).await,
        Some("ended")
    );
}

/// Serves `connections` stand-ins under `drain`, each on its own task.
fn serve_under(
    drain: &Arc<Drain>,
    connections: usize,
) -> Vec<tokio::task::JoinHandle<Option<&'static str>>> {
    (0..connections)
        .map(|_| {
            let member = drain.member();
            tokio::spawn(async move {
                let activity = Activity::default();
                until_quiet(UntilDrained::default(), &activity, member, QUIET).await
            })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_every_connection_at_once_and_waits_for_them() {
    let drain = Arc::new(Drain::default());
    let served = serve_under(&drain, 5);
    // Each has been polled, and waits.
    tokio::task::yield_now().await;
    let began = Instant::now();
    drain.begin();
    drain.finished().await;
    assert_eq!(began.elapsed(), Duration::ZERO, "not at once");
    for connection in served {
        assert_eq!(connection.await.unwrap(), Some("drained"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_connection_first_polled_after_shutdown_began_drains_too() {
    let drain = Arc::new(Drain::default());
    drain.begin();
    let served = serve_under(&drain, 3);
    drain.finished().await;
    for connection in served {
        assert_eq!(connection.await.unwrap(), Some("drained"));
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_an_accepted_connection_not_yet_served() {
    let drain = Arc::new(Drain::default());
    let accepted = drain.member();
    drain.begin();
    let finished = tokio::time::timeout(QUIET, drain.finished()).await;
    assert!(finished.is_err(), "finished while a connection was open");
    drop(accepted);
    drain.finished().await;
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_went_quiet_leaves_the_drain() {
    let drain = Arc::new(Drain::default());
    let served = serve_under(&drain, 2);
    for connection in served {
        assert_eq!(connection.await.unwrap(), None);
    }
    // Nothing is left to wait for.
    drain.finished().await;
}
