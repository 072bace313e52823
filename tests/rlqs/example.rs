//! The example Envoy configuration (examples/envoy) and its slidegate side
//! agree: domain, filter, port and labels.

use std::path::Path;

use super::rlqs_config;

#[test]
fn the_example_envoy_configuration_and_its_slidegate_side_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy");
    let toml = std::fs::read_to_string(root.join("rlqs.toml")).unwrap();
    let config = rlqs_config(&toml);
    let yaml = std::fs::read_to_string(root.join("rlqs.yaml")).unwrap();
    let envoy: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
    let text = serde_yaml_ng::to_string(&envoy).unwrap();
    let rule = &config.buckets[0];
    assert!(text.contains(&format!("domain: {}", rule.domain.as_deref().unwrap())));
    assert!(text.contains("envoy.filters.http.rate_limit_quota"));
    assert!(text.contains(&format!("port_value: {}", config.listen.unwrap().port())));
    for label in rule.matches.keys() {
        assert!(text.contains(&format!("{label}:")), "{label}");
    }
}
