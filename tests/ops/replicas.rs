//! With `memcached.replicas = 2` in the file, one node of three down is
//! degraded, not down: `/v1/status` says ready and degraded, `/readyz`
//! answers 200 naming the node; checks of every key are still decided by
//! the store. A second node down: not ready.

use super::{Service, TOKEN, check};
use crate::common::{self, wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_down_of_three_with_two_replicas_is_degraded_not_down() {
    let mut nodes: Vec<common::Memcached> = (0..3).map(|_| common::Memcached::start()).collect();
    let servers: Vec<String> = nodes
        .iter()
        .map(|node| format!("\"{}\"", node.addr()))
        .collect();
    let text = format!(
        "[memcached]\nservers = [{}]\nreplicas = 2\nnamespace = \"{}\"\ntimeout_ms = 2000\n\
         [server]\napi_tokens = [\"{TOKEN}\"]\n[failure]\nmode = \"deny\"\n\
         [policies.api]\nlimits = [{{ limit = 1000, window = \"1m\" }}]\n",
        servers.join(", "),
        common::unique_namespace(),
    );
    let service = Service::start(&text).await;
    let status = || async {
        let answer = service.get("/v1/status").await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        serde_json::from_str::<serde_json::Value>(&answer.body).unwrap()
    };
    let up = status().await;
    assert_eq!(up["store"]["ready"], true, "{up:#}");
    assert_eq!(up["store"]["degraded"], false, "{up:#}");

    nodes[0].kill();
    let degraded = wait::until("a node named down", wait::PATIENCE, || async {
        let now = status().await;
        (now["store"]["degraded"] == true).then_some(now)
    })
    .await;
    assert_eq!(degraded["store"]["ready"], true, "{degraded:#}");
    assert_eq!(service.get("/readyz").await.status, 200);
    // Every key keeps a replica that answers: with `deny`, an admission is
    // the store's.
    for key in 0..30 {
        let answer = service
            .post("/v1/check", check(&format!("key-{key}"), "api"))
            .await;
        assert_eq!(answer.status, 200, "key-{key}: {}", answer.body);
    }

    nodes[1].kill();
    wait::wait_for("not ready", wait::PATIENCE, || async {
        status().await["store"]["ready"] == false
    })
    .await;
    assert_eq!(service.get("/readyz").await.status, 503);
}
