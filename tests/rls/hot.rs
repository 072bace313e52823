//! What one hot admitted descriptor costs the store over RLS: concurrent
//! calls of one descriptor share one store exchange, as concurrent
//! `/v1/check`s of one key do (`tests/coalesce.rs` counts those), so a hot
//! descriptor costs a fraction of a memcached command per call.

use slidegate::{AnyStore, MemcachedStore};

use super::{Code, TestRls, descriptor, request};
use crate::common::{self, Memcached};

const HOT: &str = r#"
domain: test
descriptors:
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: 1000000}
"#;

/// Concurrent calls: each caller asks again as soon as it is answered.
const CALLERS: usize = 64;
/// Calls per caller: bounded, so the load ends.
const CALLS_EACH: usize = 16;

/// 64 callers asking for one descriptor over and over, every call
/// admitted: at most 0.3 memcached commands per call (without coalescing
/// each call reads and adds on its own, 2 commands).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_admitted_descriptor_costs_a_fraction_of_a_command_per_call() {
    // Its own memcached, so its stats count this test's commands only.
    let memcached = Memcached::start();
    let options = common::memcached_options(vec![memcached.addr()]);
    let store = MemcachedStore::connect(&options).await.unwrap();
    let rls = TestRls::start_patient(AnyStore::Memcached(store), HOT).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(rls.client().await);
    }
    let before = memcached.item_commands();
    let mut callers = tokio::task::JoinSet::new();
    for index in 0..CALLERS {
        let mut client = clients[index % clients.len()].clone();
        callers.spawn(async move {
            for _ in 0..CALLS_EACH {
                let call = request("test", vec![descriptor(&[("hot", "tenant")])]);
                let answer = client.should_rate_limit(call).await.unwrap();
                assert_eq!(answer.into_inner().overall_code(), Code::Ok);
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.unwrap();
    }
    let commands = memcached.item_commands() - before;
    let calls = (CALLERS * CALLS_EACH) as f64;
    let per_call = commands as f64 / calls;
    println!(
        "{calls} RLS calls of one hot descriptor, {CALLERS} at a time: {commands} memcached \
         commands ({per_call:.3} per call), {} calls coalesced",
        rls.app.limiter().metrics().coalesced_checks
    );
    assert!(per_call <= 0.3, "{per_call:.3} commands per call");
}
