//! The Envoy RLS rules reload live, as envoyproxy/ratelimit's do: an edited
//! rule, a domain file added to or removed from the rules directory, put in
//! force by the watch or by SIGHUP; a broken rules file keeps the running
//! rules, names the file and counts a failed reload. Asked with tonic's
//! client, on the real binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use slidegate::server::rls::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use slidegate::server::rls::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, rate_limit_response::Code, rate_limit_service_client::RateLimitServiceClient,
};

use crate::common::process;
use crate::common::service::Slidegate;

use super::{eventually, hang_up, metric, reloaded, start_listening};

/// One domain's rules: `client` limited to `per_hour`.
fn domain_rules(domain: &str, per_hour: u32) -> String {
    format!(
        "domain: {domain}\ndescriptors:\n  - key: client\n    \
         rate_limit: {{unit: hour, requests_per_unit: {per_hour}}}\n"
    )
}

/// The binary serving the rules directory `rules/` (with `test.yaml`
/// holding `test`'s `client` at `per_hour`), its watch at `watch_ms`.
struct Served {
    daemon: Slidegate,
    addr: SocketAddr,
    rls: SocketAddr,
    rules: PathBuf,
}

fn serve(name: &str, watch_ms: u32, per_hour: u32) -> Served {
    let dir = process::temp_dir(name);
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("test.yaml"), domain_rules("test", per_hour)).unwrap();
    let (addr, rls) = (process::free_addr(), process::free_addr());
    let config = dir.join("slidegate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{addr}\"\n[reload]\nwatch_ms = {watch_ms}\n\
             [rls]\nlisten = \"{rls}\"\nconfig = \"rules\"\n"
        ),
    )
    .unwrap();
    let daemon = start_listening(&config, &dir, None, &[addr, rls]);
    Served {
        daemon,
        addr,
        rls,
        rules,
    }
}

/// The overall code of one hit of `client=value` in `domain`.
async fn hit(rls: SocketAddr, domain: &str, value: &str) -> Code {
    let channel = tonic::transport::Channel::from_shared(format!("http://{rls}"))
        .unwrap()
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let request = RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "client".to_owned(),
                value: value.to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    RateLimitServiceClient::new(channel)
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
        .overall_code()
}

/// The codes of `count` hits in a row.
async fn hits(rls: SocketAddr, domain: &str, value: &str, count: usize) -> Vec<Code> {
    let mut codes = Vec::with_capacity(count);
    for _ in 0..count {
        codes.push(hit(rls, domain, value).await);
    }
    codes
}

fn admitted_then_refused(admitted: usize) -> Vec<Code> {
    let mut codes = vec![Code::Ok; admitted];
    codes.push(Code::OverLimit);
    codes
}

fn write(rules: &Path, file: &str, text: &str) {
    std::fs::write(rules.join(file), text).unwrap();
}

/// A rule's limit raised in its file: the next requests after the watch
/// are decided by the new limit, on the counters the old one kept (2
/// admitted under a limit of 2, then 3 more under 5), the rule's hit
/// counts go on, and no restart is named.
#[tokio::test]
async fn an_edited_rule_limit_decides_the_next_requests_after_the_watch() {
    let served = serve("slidegate-rls-edit", 100, 2);
    assert_eq!(
        hits(served.rls, "test", "c", 3).await,
        admitted_then_refused(2)
    );

    write(&served.rules, "test.yaml", &domain_rules("test", 5));
    reloaded(served.addr, 1.0).await;
    assert_eq!(
        hits(served.rls, "test", "c", 4).await,
        admitted_then_refused(3),
        "the new limit of 5 decides"
    );
    assert_eq!(
        metric(served.addr, "slidegate_config_restart_pending").await,
        Some(0.0)
    );
    // The rule's hit counts go on across the reload: 3 before, 4 after.
    assert_eq!(
        metric(
            served.addr,
            "slidegate_rls_hits_total{domain=\"test\",rule=\"test.client\",result=\"total_hits\"}"
        )
        .await,
        Some(7.0)
    );
    let log = served.daemon.log();
    assert!(!log.contains("restart needed"), "{log}");
}

/// A domain file added to the rules directory is served after the watch;
/// removed, its domain is unknown again (every descriptor OK).
#[tokio::test]
async fn a_domain_file_added_to_the_directory_is_served_and_removed_is_not() {
    let served = serve("slidegate-rls-add", 100, 2);
    assert_eq!(
        hits(served.rls, "other", "c", 3).await,
        [Code::Ok; 3],
        "an unknown domain is not limited"
    );

    write(&served.rules, "other.yaml", &domain_rules("other", 1));
    reloaded(served.addr, 1.0).await;
    assert_eq!(
        hits(served.rls, "other", "d", 2).await,
        admitted_then_refused(1),
        "the added domain decides"
    );
    assert_eq!(
        hits(served.rls, "test", "d", 3).await,
        admitted_then_refused(2),
        "the domain that was there still does"
    );

    std::fs::remove_file(served.rules.join("other.yaml")).unwrap();
    reloaded(served.addr, 2.0).await;
    assert_eq!(
        hits(served.rls, "other", "d", 2).await,
        [Code::Ok; 2],
        "the removed domain is unknown again"
    );
}

/// A broken rules file is refused: the running rules still decide, the
/// log names the file and what is wrong, the reload is counted failed.
/// Mended, it applies.
#[tokio::test]
async fn a_broken_rules_file_keeps_the_running_rules_and_names_the_file() {
    let served = serve("slidegate-rls-broken", 100, 2);
    write(
        &served.rules,
        "test.yaml",
        "domain: test\ndescriptors:\n  - key: client\n    \
         rate_limit: {unit: fortnight, requests_per_unit: 50}\n",
    );
    eventually("the broken rules to be refused", || async {
        metric(
            served.addr,
            "slidegate_config_reloads_total{result=\"failed\"}",
        )
        .await
            == Some(1.0)
    })
    .await;
    let log = served.daemon.log();
    let refusal = log
        .lines()
        .find(|line| line.contains("NOT reloaded"))
        .unwrap_or_else(|| panic!("no refusal line:\n{log}"));
    assert!(
        refusal.contains("test.yaml") && refusal.contains("fortnight"),
        "the line names neither the file nor what is wrong: {refusal}"
    );
    assert_eq!(
        hits(served.rls, "test", "c", 3).await,
        admitted_then_refused(2),
        "the running rules still decide"
    );

    write(&served.rules, "test.yaml", &domain_rules("test", 3));
    reloaded(served.addr, 1.0).await;
    assert_eq!(
        hits(served.rls, "test", "c", 2).await,
        admitted_then_refused(1),
        "the mended file applies"
    );
}

/// With the watch off, SIGHUP applies an edited rule.
#[tokio::test]
async fn sighup_applies_an_edited_rule_with_the_watch_off() {
    let served = serve("slidegate-rls-hup", 0, 2);
    assert_eq!(
        hits(served.rls, "test", "c", 3).await,
        admitted_then_refused(2)
    );
    write(&served.rules, "test.yaml", &domain_rules("test", 4));
    hang_up(&served.daemon);
    reloaded(served.addr, 1.0).await;
    assert_eq!(
        hits(served.rls, "test", "c", 3).await,
        admitted_then_refused(2),
        "the new limit of 4 decides"
    );
}
