//! `limits.max_counters` on reload: raised, it applies together with the
//! policies that need it; RLS rules are held to it at start and on reload.

use crate::common::process;
#[cfg(feature = "grpc")]
use crate::common::service::Slidegate;

use super::{POLICIES_V1, check, hang_up, reloaded, start};
#[cfg(feature = "grpc")]
use super::{eventually, metric, rls_call_with, start_listening};

/// `limits.max_counters` raised in a reload, with a policy that needs the
/// new bound: the policy serves at once. Before, the file was checked
/// against the new bound but the limiter kept the old one, so the reload
/// succeeded and every check of the new policy was a 400.
#[tokio::test]
async fn a_raised_max_counters_applies_with_the_policies_that_need_it() {
    let dir = process::temp_dir("slidegate-max-counters");
    let config = dir.join("slidegate.toml");
    let off = POLICIES_V1.replace("watch_ms = 100", "watch_ms = 0");
    std::fs::write(&config, format!("{off}\n[limits]\nmax_counters = 16\n")).unwrap();
    let (daemon, addr) = start(&config, &dir);
    // 1 limit at precision 100: 101 counters.
    let wide = "[policies.wide]\nlimits = [{ limit = 5, window = \"100s\", precision = 100 }]\n";
    std::fs::write(
        &config,
        format!("{off}\n[limits]\nmax_counters = 128\n{wide}"),
    )
    .unwrap();
    hang_up(&daemon);
    reloaded(addr, 1.0).await;
    let answer = check(addr, "wide").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(!daemon.log().contains("restart needed"), "{}", daemon.log());
}

/// RLS rules are held to `limits.max_counters` as policies are: a rule past
/// it stops the start, naming the rule, and a reload that would lower the
/// bound under a loaded rule is refused, the running bound kept (else every
/// request the rule matches would get INVALID_ARGUMENT).
#[cfg(feature = "grpc")]
#[tokio::test]
async fn rls_rules_are_held_to_max_counters_at_start_and_on_reload() {
    let dir = process::temp_dir("slidegate-rls-counters");
    let config = dir.join("slidegate.toml");
    // Precision 200: 201 counters a check.
    std::fs::write(
        dir.join("rules.yaml"),
        "domain: test\ndescriptors:\n  - key: client\n    \
         rate_limit: {unit: hour, requests_per_unit: 1000, precision: 200}\n",
    )
    .unwrap();
    let (addr, rls) = (process::free_addr(), process::free_addr());
    let write = |max_counters: u32| {
        std::fs::write(
            &config,
            format!(
                "[reload]\nwatch_ms = 0\n[limits]\nmax_counters = {max_counters}\n\
                 [rls]\nlisten = \"{rls}\"\nconfig = \"rules.yaml\"\n"
            ),
        )
        .unwrap();
    };

    write(128);
    let mut command = Slidegate::command();
    command
        .arg("--config")
        .arg(&config)
        .args(["--listen", &addr.to_string()]);
    let (status, output) = Slidegate::run_to_exit(command);
    assert!(!status.success(), "started with a rule past the bound");
    assert!(
        output.contains("rule test.client: 201 counters")
            && output.contains("limits.max_counters = 128"),
        "{output}"
    );

    write(256);
    let daemon = start_listening(&config, &dir, Some(addr), &[addr, rls]);
    assert_eq!(rls_call_with(rls, "any").await, tonic::Code::Ok);
    write(128);
    hang_up(&daemon);
    eventually("the reload to be refused", || async {
        metric(addr, "slidegate_config_reloads_total{result=\"failed\"}").await == Some(1.0)
    })
    .await;
    assert!(
        daemon.log().contains("rule test.client"),
        "{}",
        daemon.log()
    );
    assert_eq!(
        rls_call_with(rls, "any").await,
        tonic::Code::Ok,
        "the running bound was kept"
    );
}
