//! Which counters a request counts in: scope, key, window and precision make
//! a counter, any key maps to counters of its own, and invalid keys and
//! costs are errors.

use slidegate::{CheckError, Policy, Store};

use super::{MINUTE, Through, estimates, limit, limiter, policy};

pub(super) async fn counter_identity_is_scope_key_window_precision<S: Store>(
    store: S,
    through: Through,
) {
    let (limiter, _) = limiter(store, 0, through);
    let five = limit(5, MINUTE, 1);
    limiter
        .check("k", &policy("api", &[five]), 3)
        .await
        .unwrap();
    let seen = |policy: Policy, key: &'static str| {
        let limiter = &limiter;
        async move { estimates(&limiter.peek(key, &policy, 1).await.unwrap())[0] }
    };
    // Raising the limit keeps the counts.
    assert_eq!(seen(policy("api", &[limit(50, MINUTE, 1)]), "k").await, 3.0);
    // Another key, scope, window or precision is another counter.
    assert_eq!(seen(policy("api", &[five]), "k2").await, 0.0);
    assert_eq!(seen(policy("other", &[five]), "k").await, 0.0);
    assert_eq!(seen(Policy::inline(vec![five]).unwrap(), "k").await, 0.0);
    assert_eq!(
        seen(policy("api", &[limit(5, 2 * MINUTE, 1)]), "k").await,
        0.0
    );
    assert_eq!(seen(policy("api", &[limit(5, MINUTE, 2)]), "k").await, 0.0);
    // Inline limits share the `inline` scope across requests.
    limiter
        .check("k", &Policy::inline(vec![limit(9, MINUTE, 1)]).unwrap(), 2)
        .await
        .unwrap();
    assert_eq!(seen(Policy::inline(vec![five]).unwrap(), "k").await, 2.0);
}

pub(super) async fn any_key_maps_to_its_own_counters<S: Store>(store: S, through: Through) {
    let (limiter, _) = limiter(store, 0, through);
    let once = policy("api", &[limit(1, MINUTE, 1)]);
    limiter.check("victim", &once, 1).await.unwrap();
    let long = "x".repeat(1024);
    let keys = [
        "a b",
        "a\r\nb",
        "a\nb",
        "flush_all",
        "k\r\nflush_all\r\n",
        "mg victim v\r\n",
        "ключ 🔑",
        "\0",
        "a:b:c",
        "*",
        long.as_str(),
    ];
    for key in keys {
        assert!(
            limiter.check(key, &once, 1).await.unwrap().allowed,
            "{key:?}"
        );
    }
    for key in keys {
        assert!(
            !limiter.check(key, &once, 1).await.unwrap().allowed,
            "{key:?}"
        );
    }
    assert_eq!(
        estimates(&limiter.peek("victim", &once, 1).await.unwrap()),
        [1.0]
    );
    assert_eq!(
        estimates(&limiter.peek("a b ", &once, 1).await.unwrap()),
        [0.0]
    );
}

pub(super) async fn invalid_keys_and_costs_are_errors<S: Store>(store: S, through: Through) {
    let (limiter, _) = limiter(store, 0, through);
    let api = policy("api", &[limit(5, MINUTE, 1)]);
    let too_long = "x".repeat(1025);
    for key in ["", too_long.as_str()] {
        assert!(matches!(
            limiter.check(key, &api, 1).await,
            Err(CheckError::InvalidKey(_))
        ));
    }
    for cost in [0, slidegate::policy::MAX_AMOUNT + 1] {
        assert!(matches!(
            limiter.check("k", &api, cost).await,
            Err(CheckError::InvalidCost(_))
        ));
    }
}
