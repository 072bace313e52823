use super::lookup::wildcard_match;
use super::*;

fn load(text: &str) -> Result<RuleSet, String> {
    let mut rules = RuleSet::default();
    rules.add_file("limits.yaml", text)?;
    Ok(rules)
}

fn error(text: &str) -> String {
    load(text).unwrap_err()
}

#[test]
fn errors_name_the_file_and_the_path() {
    let cases = [
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, burst: 3}\n",
            "limits.yaml: descriptors[0].rate_limit: unknown field `burst`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        colour: red\n",
            "limits.yaml: descriptors[0].descriptors[0]: unknown field `colour`",
        ),
        (
            "descriptors: []\n",
            "limits.yaml: domain: must not be empty",
        ),
        (
            "domain: d\ndescriptors:\n  - value: x\n",
            "limits.yaml: descriptors[0].key: must not be empty",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
            "limits.yaml: descriptors[0].rate_limit.unit: \"fortnight\" is not one of",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, unlimited: true}\n",
            "limits.yaml: descriptors[0].rate_limit.unit: must not be given with unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
            "limits.yaml: descriptors[1]: duplicate descriptor \"d.a\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, precision: 7}\n",
            "limits.yaml: descriptors[0].rate_limit.precision: 7 does not divide",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 2}\n",
            "limits.yaml: descriptors[0].rate_limit.unit_multiplier: the window must be at most 365 days",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n",
            "limits.yaml: descriptors[0].rate_limit.replaces[0].name: a rule cannot replace itself",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: x\n    share_threshold: true\n",
            "limits.yaml: descriptors[0].share_threshold: only applies to a value with a wildcard",
        ),
        ("domain: [1]\n", "limits.yaml: domain: invalid type"),
    ];
    for (text, expected) in cases {
        let message = error(text);
        assert!(message.starts_with(expected), "{text}\n→ {message}");
    }
}

#[test]
fn a_domain_is_defined_once() {
    let mut rules = RuleSet::default();
    rules.add_file("a.yaml", "domain: d\n").unwrap();
    assert_eq!(
        rules.add_file("b.yaml", "domain: d\n").unwrap_err(),
        "b.yaml: domain: \"d\" is already defined by another file"
    );
}

#[test]
fn units_are_envoyproxy_ratelimit_s() {
    assert_eq!(Unit::parse("MINUTE"), Some(Unit::Minute));
    assert_eq!(Unit::Week.ms(), 7 * 86_400_000);
    assert_eq!(Unit::Month.ms(), 30 * 86_400_000);
    assert_eq!(Unit::Year.ms(), 365 * 86_400_000);
    for number in 1..=7 {
        assert_eq!(
            Unit::from_wire(number).map(|unit| unit as i32),
            Some(number)
        );
    }
    assert_eq!(Unit::from_wire(0), None);
}

#[test]
fn lookup_follows_get_limit() {
    let rules = load(
        r#"
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, name: key_only}
  - key: k
    value: v
    rate_limit: {unit: second, requests_per_unit: 2, name: key_value}
  - key: wild
    value: "a*z"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3, name: wildcard}
  - key: outer
    descriptors:
      - key: inner
        rate_limit: {unit: second, requests_per_unit: 4, name: nested}
"#,
    )
    .unwrap();
    let name = |entries: &[(&str, &str)]| {
        rules
            .find("d", entries)
            .and_then(|found| found.rule.name.clone())
    };
    assert_eq!(name(&[("k", "v")]).as_deref(), Some("key_value"));
    assert_eq!(name(&[("k", "other")]).as_deref(), Some("key_only"));
    assert_eq!(name(&[("wild", "a-to-z")]).as_deref(), Some("wildcard"));
    assert_eq!(name(&[("wild", "a-to-y")]), None);
    assert_eq!(
        name(&[("outer", "x"), ("inner", "y")]).as_deref(),
        Some("nested")
    );
    assert_eq!(name(&[("outer", "x")]), None, "no rule at the first level");
    assert_eq!(
        name(&[("k", "v"), ("more", "x")]),
        None,
        "limits apply at the last entry"
    );
    assert!(rules.find("other", &[("k", "v")]).is_none());
    let shared = rules.find("d", &[("wild", "a-to-z")]).unwrap().shared;
    assert_eq!(shared, vec![Some("a*z")]);
}

#[test]
fn wildcards_match_as_upstream() {
    let parts = |pattern: &str| pattern.split('*').map(str::to_owned).collect::<Vec<_>>();
    assert!(wildcard_match(&parts("k_files*"), "k_files/a"));
    assert!(wildcard_match(&parts("k_files*"), "k_files"));
    assert!(!wildcard_match(&parts("k_files*"), "k_file"));
    assert!(wildcard_match(&parts("k_a*b*c"), "k_a-b-c"));
    assert!(!wildcard_match(&parts("k_a*b*c"), "k_a-c-b"));
    assert!(!wildcard_match(&parts("k_exact"), "k_exact2"));
}

#[test]
fn envoyproxy_ratelimit_examples_load_unchanged() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/envoyproxy-ratelimit");
    let rules = RuleSet::load(&dir).unwrap();
    let mut domains: Vec<&str> = rules.domains().collect();
    domains.sort();
    assert_eq!(domains, ["mongo_cps", "rl"]);
    assert!(
        RuleSet::load(&dir.join("missing.yaml"))
            .unwrap_err()
            .contains("missing.yaml")
    );
}
