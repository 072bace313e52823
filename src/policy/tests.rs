use super::*;

#[test]
fn limit_specs_name_the_bad_field() {
    let spec = |limit, window: Option<&str>, window_ms, precision| LimitSpec {
        limit,
        window: window.map(str::to_owned),
        window_ms,
        precision,
    };
    assert_eq!(
        spec(Some(10), Some("10m"), None, Some(10)).to_limit(),
        Limit::new(10, 600_000, 10).map_err(|_| unreachable!())
    );
    assert!(spec(Some(10), None, Some(250), None).to_limit().is_ok());
    let field = |spec: LimitSpec| spec.to_limit().unwrap_err().field;
    assert_eq!(field(spec(None, Some("1s"), None, None)), "limit");
    assert_eq!(field(spec(Some(0), Some("1s"), None, None)), "limit");
    assert_eq!(field(spec(Some(1), None, None, None)), "window");
    assert_eq!(field(spec(Some(1), Some("1s"), Some(1000), None)), "window");
    assert_eq!(field(spec(Some(1), Some("soon"), None, None)), "window");
    assert_eq!(field(spec(Some(1), None, Some(0), None)), "window_ms");
    assert_eq!(field(spec(Some(1), Some("1s"), None, Some(7))), "precision");
    // A window given as text is named `window` whatever is wrong with it.
    assert_eq!(field(spec(Some(1), Some("366d"), None, None)), "window");
    assert_eq!(field(spec(Some(1), Some("0s"), None, None)), "window");
}

#[tokio::test]
async fn a_shadow_policy_admits_what_it_would_refuse() {
    let limiter = crate::Limiter::new(crate::MemoryStore::new());
    let enforced = Policy::new(
        "new-limit",
        vec![Limit::per(1, Duration::from_secs(60)).unwrap()],
    )
    .unwrap();
    let shadow = enforced.clone().with_shadow(true);
    assert!(shadow.is_shadow() && !enforced.is_shadow());
    let first = limiter.check("k", &shadow, 1).await.unwrap();
    assert!(first.allowed && first.would_allow);
    let second = limiter.check("k", &shadow, 1).await.unwrap();
    assert!(second.allowed && second.shadow && !second.would_allow);
    // The same counters, enforced: the first request's count refuses.
    let third = limiter.check("k", &enforced, 1).await.unwrap();
    assert!(!third.allowed && !third.shadow);
}

#[test]
fn the_largest_limit_and_the_largest_policy_can_be_built() {
    assert_eq!(
        Limit::new(MAX_AMOUNT, 1000, 1).unwrap().limit(),
        1_000_000_000_000
    );
    assert_eq!(
        Limit::new(MAX_AMOUNT + 1, 1000, 1),
        Err(LimitError::Limit(1_000_000_000_001))
    );
    // A window of a year, to the millisecond, and not one more.
    let year_ms = 365 * 24 * 3_600_000;
    assert_eq!(
        Limit::new(1, year_ms, 1).unwrap().window().window_ms(),
        31_536_000_000
    );
    assert_eq!(
        Limit::new(1, year_ms + 1, 1),
        Err(LimitError::Window(31_536_000_001))
    );
    assert_eq!(parse_duration_ms("365d"), Ok(year_ms));
    // 16 limits at precision 1000, every one a window of its own.
    let finest: Vec<Limit> = (1..=16)
        .map(|seconds| Limit::new(1, seconds * 1000, MAX_PRECISION).unwrap())
        .collect();
    let policy = Policy::new("largest", finest.clone()).unwrap();
    assert_eq!(policy.counters(), MAX_COUNTERS);
    assert_eq!(MAX_COUNTERS, 16_016);
    assert_eq!(policy.within(MAX_COUNTERS), Ok(()));
    let mut seventeen = finest;
    seventeen.push(Limit::new(1, 17_000, 1).unwrap());
    assert_eq!(
        Policy::new("largest", seventeen),
        Err(PolicyError::TooMany(17))
    );
}

#[test]
fn durations_parse_and_print_back() {
    for (text, ms) in [
        ("250ms", 250),
        ("1s", 1000),
        ("10m", 600_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("90s", 90_000),
    ] {
        assert_eq!(parse_duration_ms(text), Ok(ms), "{text}");
    }
    assert_eq!(DisplayMs(90_000).to_string(), "90s");
    assert_eq!(DisplayMs(600_000).to_string(), "10m");
    assert_eq!(DisplayMs(1500).to_string(), "1500ms");
}

#[test]
fn bad_durations_are_refused() {
    for text in [
        "",
        "10",
        "m",
        "1.5s",
        "-1s",
        "1 s",
        "10 m",
        "1w",
        "99999999999999999999d",
    ] {
        assert!(parse_duration_ms(text).is_err(), "{text:?} was accepted");
    }
}

#[test]
fn invalid_limits_cannot_be_built() {
    assert_eq!(Limit::new(0, 1000, 1), Err(LimitError::Limit(0)));
    assert_eq!(Limit::new(5, 0, 1), Err(LimitError::Window(0)));
    assert_eq!(Limit::new(5, 1000, 0), Err(LimitError::PrecisionRange(0)));
    assert_eq!(
        Limit::new(5, 1000, 1001),
        Err(LimitError::PrecisionRange(1001))
    );
    assert_eq!(
        Limit::new(5, 1000, 7),
        Err(LimitError::PrecisionDivides {
            precision: 7,
            window_ms: 1000
        })
    );
    assert_eq!(Limit::new(5, 1000, 7).unwrap_err().field(), "precision");
    assert!(Limit::new(MAX_AMOUNT + 1, 1000, 1).is_err());
    assert!(Limit::new(5, MAX_WINDOW_MS + 1, 1).is_err());
    assert!(Limit::new(5, 1000, 1000).is_ok());
}

#[test]
fn policies_refuse_empty_too_many_and_shared_counters() {
    let second = Limit::per(10, Duration::from_secs(1)).unwrap();
    assert_eq!(Policy::inline(vec![]), Err(PolicyError::Empty));
    assert_eq!(
        Policy::inline(vec![second; 17]),
        Err(PolicyError::TooMany(17))
    );
    assert_eq!(
        Policy::inline(vec![second, second.with_precision(2).unwrap(), second]),
        Err(PolicyError::Duplicate {
            first: 0,
            second: 2
        })
    );
    assert_eq!(
        Policy::new("inline", vec![second]),
        Err(PolicyError::ReservedName)
    );
    assert!(Policy::new("a b", vec![second]).is_err());
    assert!(is_plain_name("prod-eu.1_a") && !is_plain_name("a:b") && !is_plain_name(""));
    assert!(!is_plain_name(&"x".repeat(65)));
    let policy = Policy::new(
        "api",
        vec![second, Limit::per(3, Duration::from_secs(60)).unwrap()],
    )
    .unwrap();
    assert_eq!(policy.scope(), "api");
    assert_eq!(policy.max_cost(), 3);
    assert_eq!(policy.counters(), 4);
    assert_eq!(policy.within(4), Ok(()));
    assert_eq!(
        policy.within(3),
        Err(PolicyError::TooManyCounters {
            counters: 4,
            max: 3
        })
    );
}
