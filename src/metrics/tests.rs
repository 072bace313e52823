use super::*;

fn policy_count(metrics: &Metrics, policy: &str, outcome: Outcome) -> u64 {
    metrics.policy_counters(policy).0[outcome as usize].get()
}

/// Each thread keeps the counters of its recent policies at hand, by
/// instance and name: two limiters' metrics counting the same policy
/// name on one thread keep their own counts, and a policy pushed out of
/// the recent ones is found again.
#[test]
fn a_policy_is_counted_in_its_own_metrics_whatever_the_thread_keeps() {
    let (first, second) = (Metrics::default(), Metrics::default());
    let allowed = Decided {
        source: Source::Store,
        allowed: true,
        shadow_refusal: false,
    };
    for _ in 0..3 {
        first.decided("api", allowed, Duration::ZERO);
    }
    second.decided("api", allowed, Duration::ZERO);
    for other in 0..20 {
        first.decided(&format!("p{other}"), allowed, Duration::ZERO);
    }
    first.decided("api", allowed, Duration::ZERO);
    assert_eq!(policy_count(&first, "api", Outcome::allowed), 4);
    assert_eq!(policy_count(&second, "api", Outcome::allowed), 1);
    assert_eq!(policy_count(&first, "p0", Outcome::allowed), 1);
    assert_eq!(policy_count(&first, "api", Outcome::rejected), 0);
}
