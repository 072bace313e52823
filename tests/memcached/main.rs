//! What only the Memcached store has: round trips, TTLs on the wire, keys on
//! the wire, routing over several servers, and outages.
//!
//! This file holds the policy and the store the tests share; the tests are
//! in the modules below, by what they test.

#[path = "../common/mod.rs"]
mod common;

mod bucket_boundary;
mod foreign_text;
mod outages;
mod several_servers;
mod wire;

use slidegate::{Limit, MemcachedStore, Policy};

const MINUTE: u64 = 60_000;

fn policy(limits: &[(u64, u64, u32)]) -> Policy {
    let limits = limits
        .iter()
        .map(|&(limit, window_ms, precision)| Limit::new(limit, window_ms, precision).unwrap())
        .collect();
    Policy::new("api", limits).unwrap()
}

async fn store_at(servers: Vec<String>) -> MemcachedStore {
    MemcachedStore::connect(&common::memcached_options(servers))
        .await
        .unwrap()
}
