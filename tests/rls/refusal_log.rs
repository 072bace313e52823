//! RLS refusals in the refusal log (`log.refusals_per_s`), on the real
//! binary: a refused descriptor is a line naming face `rls`, the rule (its
//! domain in its path), the descriptor and the limit that refused. They
//! stay out of `/v1/limited`, as the README says.

use super::{Code, client, codes, descriptor, request};
use crate::common::process;
use crate::common::service::Slidegate;
use crate::common::wait::{PATIENCE, wait_for};

const RULES: &str = "domain: shop\ndescriptors:\n  - key: client\n    \
                     rate_limit: {unit: hour, requests_per_unit: 1}\n";

#[tokio::test]
async fn an_rls_refusal_is_logged_naming_the_face_descriptor_and_limit() {
    let dir = Slidegate::dir("rls-refusal-log");
    std::fs::write(dir.join("rules.yaml"), RULES).unwrap();
    let (addr, rls) = (process::free_addr(), process::free_addr());
    let mut command = Slidegate::command();
    command
        .args(["--listen", &addr.to_string()])
        .args(["--rls-listen", &rls.to_string()])
        .arg("--rls-config")
        .arg(dir.join("rules.yaml"))
        .args(["--log-format", "json", "--log-refusals-per-s", "100"]);
    let daemon = Slidegate::start_in(dir, command, addr, &[rls]);

    let mut client = client(rls).await;
    let one = || request("shop", vec![descriptor(&[("client", "alice")])]);
    assert_eq!(codes(&mut client, one()).await.0, Code::Ok);
    assert_eq!(codes(&mut client, one()).await.0, Code::OverLimit);

    let refused_line = || {
        daemon.log().lines().find_map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).ok()?;
            let fields = &line["fields"];
            (fields["message"] == "refused" && fields["face"] == "rls").then(|| fields.clone())
        })
    };
    wait_for("the refusal's log line", PATIENCE, || {
        let found = refused_line().is_some();
        async move { found }
    })
    .await;
    let fields = refused_line().unwrap();
    assert_eq!(
        fields["policy"], "shop.client",
        "the rule, its domain first: {fields}"
    );
    assert_eq!(fields["key"], "client=alice", "the descriptor: {fields}");
    assert_eq!(fields["limit"], 1, "{fields}");
    assert_eq!(fields["window_ms"], 3_600_000, "{fields}");

    // Logged, but not listed: /v1/limited counts the HTTP faces only.
    let limited = crate::common::http::get(addr, "/v1/limited").await;
    assert_eq!(
        limited.json()["keys"],
        serde_json::json!([]),
        "{}",
        limited.body
    );
}
