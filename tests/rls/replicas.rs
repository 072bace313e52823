//! RLS counts on the store's replicas like any check: two nodes, each
//! counter on both (`memcached.replicas = 2`). One node is replaced empty,
//! then the other: the rule's limit holds through both, since the first
//! check after each replacement (once the node answers again) raised the
//! empty copy to the other's count.

use super::{CONFIG, Code, TestRls, codes, descriptor, request};
use crate::common::wait::{PATIENCE, wait_for};
use crate::common::{self, Memcached};
use slidegate::{AnyStore, MemcachedOptions, MemcachedStore};

#[tokio::test]
async fn a_rule_s_count_survives_each_node_replaced_in_turn() {
    let mut nodes = [Memcached::start(), Memcached::start()];
    let options = MemcachedOptions {
        replicas: 2,
        ..common::memcached_options(nodes.iter().map(Memcached::addr).collect())
    };
    let store = MemcachedStore::connect(&options).await.unwrap();
    // A store that fails refuses: every OK below was counted by a replica.
    let rls = TestRls::start_patient(AnyStore::Memcached(store), CONFIG).await;
    let mut client = rls.client().await;
    let five = || request("test", vec![descriptor(&[("five", "replicated")])]);
    for _ in 0..3 {
        assert_eq!(codes(&mut client, five()).await.0, Code::Ok);
    }
    // Back once it was dialled again and answers.
    let redials = |node: usize| {
        let AnyStore::Memcached(store) = rls.app.limiter().store() else {
            unreachable!("a memcached store")
        };
        let snapshot = store.topology();
        let redials: u64 = snapshot.nodes[node].redials.iter().map(|(_, n)| n).sum();
        (redials, snapshot.nodes[node].states.ready)
    };
    let back = |node: usize| {
        let before = redials(node).0;
        move || async move {
            let (now, ready) = redials(node);
            now > before && ready > 0
        }
    };
    let first_back = back(0);
    nodes[0].restart();
    wait_for("the first node back", PATIENCE, first_back).await;
    assert_eq!(codes(&mut client, five()).await.0, Code::Ok, "4 of 5");
    let second_back = back(1);
    nodes[1].restart();
    wait_for("the second node back", PATIENCE, second_back).await;
    assert_eq!(codes(&mut client, five()).await.0, Code::Ok, "5 of 5");
    for _ in 0..3 {
        assert_eq!(
            codes(&mut client, five()).await.0,
            Code::OverLimit,
            "the fifth was the last: the count survived both replacements"
        );
    }
}
