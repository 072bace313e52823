//! A fleet of simulated Envoys on one bucket's limit: at 2.7 x the limit it
//! admits the limit in equal shares, idle clients' shares move to a busy
//! one, two instances on one memcached share one count, and a full window
//! denies, then allows again.

use std::net::SocketAddr;

use slidegate::config::ServerGuard;
use slidegate::server::rlqs::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use slidegate::{AnyStore, Clock, FailureMode, MemcachedStore};

use super::envoy::{self, Enforced, FakeEnvoy};
use super::{
    Client, INTERVAL_MS, LIMIT, WINDOW_MS, admitted_between, api, clock, fleet, instance,
    most_in_any_window, plain_instance, run, sharing_one_count,
};
use crate::common;

#[tokio::test]
async fn a_fleet_at_2_7_times_the_limit_admits_the_limit_in_equal_shares() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    let mut clients = fleet(&[server.addr], start).await;
    run(&mut clients, &clock, start, start + 60_000).await;

    let most = most_in_any_window(&clients, start, WINDOW_MS);
    let ratio = most as f64 / LIMIT as f64;
    eprintln!(
        "FIGURE fleet: most admitted in any 10 s window {most} (limit {LIMIT}, {ratio:.3} x)"
    );
    assert!((0.8..=1.1).contains(&ratio), "most in a window: {most}");

    let shares: Vec<usize> = clients
        .iter()
        .map(|client| admitted_between(client, start + 10_000, start + 60_000))
        .collect();
    let (low, high) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
    eprintln!(
        "FIGURE fleet: admitted per client over 10-60 s {shares:?} (max/min {:.3})",
        *high as f64 / *low as f64
    );
    assert!(
        *high as f64 <= *low as f64 * 1.25,
        "equal demand, shares {shares:?}"
    );
}

#[tokio::test]
async fn one_busy_client_takes_what_three_idle_ones_leave() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    let mut clients = fleet(&[server.addr], start).await;
    run(&mut clients, &clock, start, start + 30_000).await;

    // Three go idle (they still report, with nothing); one alone asks 2.7 x.
    let switch = start + 30_000;
    let busy_rate = 2.7 * LIMIT as f64 / (WINDOW_MS / 1000) as f64;
    clients[0].demand.set_rate(busy_rate, switch);
    for client in &mut clients[1..] {
        client.demand.set_rate(0.0, switch);
    }
    let mut moved_after_ms = None;
    let mut now = switch;
    while now < start + 60_000 {
        run(&mut clients, &clock, now, now + INTERVAL_MS).await;
        now += INTERVAL_MS;
        let rate = match clients[0].envoy.enforced(&api()) {
            Some(Enforced::TokenBucket(_, per_fill, _)) => f64::from(per_fill),
            _ => 0.0,
        };
        // 75 % of the whole limit's rate: the idle ones' shares have moved.
        if moved_after_ms.is_none() && rate >= 0.75 * LIMIT as f64 / 10.0 {
            moved_after_ms = Some(now - switch);
        }
    }
    let idle: usize = clients[1..]
        .iter()
        .map(|client| admitted_between(client, start + 40_000, start + 60_000))
        .sum();
    let busy = admitted_between(&clients[0], start + 40_000, start + 60_000);
    let left = 2 * LIMIT - idle;
    eprintln!(
        "FIGURE idle: over 40-60 s the busy client admitted {busy} of the {left} the idle ones left ({:.3}); its rate reached 75 % of the limit {moved_after_ms:?} ms after the switch",
        busy as f64 / left as f64
    );
    assert!(
        busy as f64 >= 0.75 * left as f64,
        "busy {busy}, left {left}"
    );
    let moved = moved_after_ms.expect("the idle shares moved");
    assert!(
        moved <= WINDOW_MS + 2 * INTERVAL_MS,
        "moved after {moved} ms"
    );
}

#[tokio::test]
async fn two_instances_on_one_memcached_share_one_count() {
    let clock = clock();
    let instances = sharing_one_count(&clock, 2).await;
    let start = clock.now_ms();
    let addrs: Vec<SocketAddr> = instances.iter().map(|i| i.addr).collect();
    let mut clients = fleet(&addrs, start).await;
    run(&mut clients, &clock, start, start + 40_000).await;
    let most = most_in_any_window(&clients, start, WINDOW_MS);
    eprintln!("FIGURE two instances: most admitted in any 10 s window {most} (limit {LIMIT})");
    assert!(
        (0.8..=1.1).contains(&(most as f64 / LIMIT as f64)),
        "most {most}"
    );
}

#[tokio::test]
async fn a_full_window_denies_then_allows_again_and_a_reconnected_client_is_served() {
    let clock = clock();
    let server = plain_instance(&clock).await;
    let start = clock.now_ms();
    // Envoys that admitted a whole window before their first assignment
    // (their no-assignment behaviour allows) report it: the window is full.
    let (reports, mut answers) = envoy::open(server.addr, None).await.unwrap();
    let usages = vec![envoy::usage(&api(), LIMIT as u64, 0, 0)];
    let full = RateLimitQuotaUsageReports {
        domain: "envoy".into(),
        bucket_quota_usages: usages,
    };
    reports.send(full).await.unwrap();
    envoy::next(&mut answers).await.unwrap().unwrap();
    // One client asking 5 x the limit.
    let mut clients = vec![Client::new(server.addr, 300.0, 7, 0, start).await];
    let (mut denied_at, mut allowed_again_at) = (None, None);
    let mut now = start;
    while now < start + 30_000 && allowed_again_at.is_none() {
        run(&mut clients, &clock, now, now + INTERVAL_MS).await;
        now += INTERVAL_MS;
        match clients[0].envoy.enforced(&api()) {
            Some(Enforced::DenyAll) if denied_at.is_none() => denied_at = Some(now),
            Some(Enforced::TokenBucket(..)) if denied_at.is_some() => allowed_again_at = Some(now),
            _ => {}
        }
    }
    let denied_at = denied_at.expect("a full window denies");
    let reopened = allowed_again_at.expect("the window frees up") - denied_at;
    eprintln!(
        "FIGURE full window: denied {} ms after it filled, allowed again {reopened} ms later",
        denied_at - start
    );
    assert!(
        reopened <= WINDOW_MS + 2 * INTERVAL_MS,
        "allowed again after {reopened} ms"
    );

    // Reconnect: a new stream gets an assignment in its first answer, and
    // the count the old stream made still holds.
    clients[0].envoy = FakeEnvoy::connect(server.addr, "envoy").await;
    let resumed = now;
    run(&mut clients, &clock, now, now + 20_000).await;
    assert!(
        matches!(
            clients[0].envoy.enforced(&api()),
            Some(Enforced::TokenBucket(..) | Enforced::DenyAll)
        ),
        "assigned again after reconnecting"
    );
    let most = most_in_any_window(&clients, start, WINDOW_MS);
    eprintln!(
        "FIGURE reconnect: most in any 10 s window {most}, reconnected at {} ms",
        resumed - start
    );
    assert!(most as f64 <= 1.1 * LIMIT as f64, "most {most}");
}

/// The largest demand a report can say (allowed and denied each up to
/// 10^12) reaches the fleet's shared demand: a client on another instance
/// then gets its share of the whole fleet's demand, the floor of one a
/// second, not the whole rate. The sum used to be refused by the demand
/// counter (more than 10^12 in one report) and read as no demand at all.
#[tokio::test]
async fn the_largest_demand_a_report_says_reaches_the_fleet() {
    const MOST: u64 = 1_000_000_000_000;
    let clock = clock();
    let options = common::memcached_options(vec![common::shared_memcached().addr()]);
    let mut addrs = Vec::new();
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = MemcachedStore::connect(&options).await.unwrap();
        let instance = instance(
            AnyStore::Memcached(store),
            &clock,
            FailureMode::Allow,
            ServerGuard::default(),
        )
        .await;
        addrs.push(instance.addr);
        instances.push(instance);
    }
    let tenant = envoy::labels(&[("name", "api"), ("tenant", "largest-demand")]);
    let (hungry, mut hungry_answers) = envoy::open(addrs[0], None).await.unwrap();
    let report = |denied| RateLimitQuotaUsageReports {
        domain: "envoy".into(),
        bucket_quota_usages: vec![envoy::usage(&tenant, 1, denied, 1)],
    };
    hungry.send(report(MOST)).await.unwrap();
    envoy::next(&mut hungry_answers).await.unwrap().unwrap();
    let (modest, mut modest_answers) = envoy::open(addrs[1], None).await.unwrap();
    modest.send(report(0)).await.unwrap();
    let answer = envoy::next(&mut modest_answers).await.unwrap().unwrap();
    let tokens = answer.bucket_action.iter().find_map(|action| {
        let Some(envoy::Action::QuotaAssignmentAction(assignment)) = &action.bucket_action else {
            return None;
        };
        match assignment.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
            envoy::Strategy::TokenBucket(bucket) => bucket.tokens_per_fill,
            _ => None,
        }
    });
    assert_eq!(tokens, Some(1), "{answer:?}");
}
