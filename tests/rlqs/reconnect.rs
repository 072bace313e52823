//! A stream that ends takes its demand out of the shares at once, on every
//! instance that shares the count: a client alone on a bucket that
//! reconnects, to another instance or the same one, is not shared with
//! the stream it closed.

use std::net::SocketAddr;

use slidegate::Clock;

use super::envoy::FakeEnvoy;
use super::streams::metrics_page;
use super::{Client, Instance, LIMIT, WINDOW_MS, admitted_between, clock, run, sharing_one_count};
use crate::common::wait;

/// Its streams on `server` have all ended, and what ending does is done.
async fn streams_ended(server: &Instance) {
    wait::wait_for(
        "the closed stream to end on its instance",
        wait::PATIENCE,
        || async {
            metrics_page(&server.app)
                .await
                .contains("slidegate_rlqs_streams 0")
        },
    )
    .await;
}

/// Admitted a second over `[from_ms, to_ms)`.
fn rate(client: &Client, from_ms: u64, to_ms: u64) -> f64 {
    admitted_between(client, from_ms, to_ms) as f64 / ((to_ms - from_ms) as f64 / 1000.0)
}

/// One client alone on a bucket, asking twice the limit's rate, closes its
/// stream and opens another: on the other instance, then on the first
/// again. In the seconds after each reconnect it admits what it admitted
/// before. The closed stream's demand used to stay in the shared demand
/// window for its 10 s, and the client got about half the rate, as if it
/// shared the bucket with itself.
#[tokio::test]
async fn a_stream_that_ends_takes_its_demand_out_of_the_shares_on_every_instance() {
    let clock = clock();
    let instances = sharing_one_count(&clock, 2).await;
    let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
    let start = clock.now_ms();
    let asked = 2.0 * LIMIT as f64 / (WINDOW_MS / 1000) as f64;
    let mut clients = vec![Client::new(addrs[0], asked, 11, 0, start).await];
    run(&mut clients, &clock, start, start + 20_000).await;
    let settled = rate(&clients[0], start + 14_000, start + 20_000);
    eprintln!("FIGURE reconnect: alone, before reconnecting: {settled:.1} a second");
    assert!(settled > 0.0);

    let mut now = start + 20_000;
    for (round, (from, to)) in [(0, 1), (1, 0)].into_iter().enumerate() {
        // Dropping the old client closes its stream and its connection.
        clients[0].envoy = FakeEnvoy::connect(addrs[to], "envoy").await;
        streams_ended(&instances[from]).await;
        run(&mut clients, &clock, now, now + 8_000).await;
        // Its first answer comes before it has said its demand: from the
        // second report on.
        let after = rate(&clients[0], now + 2_000, now + 8_000);
        let share = after / settled;
        eprintln!(
            "FIGURE reconnect {}: to instance {to}, seconds 2-8 after: {after:.1} a second, {share:.2} of before",
            round + 1
        );
        assert!(
            share >= 0.75,
            "reconnect {}: {after:.1} a second after, {settled:.1} before ({share:.2})",
            round + 1
        );
        now += 8_000;
    }
}
