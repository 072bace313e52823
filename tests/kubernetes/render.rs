//! What is rendered and how to find things in it: where the
//! kustomizations are, `kubectl kustomize` on one of them, and the lookups
//! the validation, the check, the invariants and the tests share (a
//! resource by kind or name, the Deployment's container, its environment).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::WITHIN;
use crate::common::process::output_within;

pub(super) fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

pub(super) fn deploy() -> PathBuf {
    repo("deploy/kubernetes")
}

/// Every directory under `deploy/kubernetes/` holding a
/// `kustomization.yaml` (at most three levels down), sorted.
pub(super) fn kustomizations() -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
        if dir.join("kustomization.yaml").is_file() {
            found.push(dir.to_path_buf());
        }
        if depth == 0 {
            return;
        }
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
            .map(|entry| entry.expect("a directory entry").path())
            .filter(|path| path.is_dir())
            .collect();
        entries.sort();
        for entry in entries {
            walk(&entry, depth - 1, found);
        }
    }
    let mut found = Vec::new();
    walk(&deploy(), 3, &mut found);
    found
}

pub(super) fn name_of(dir: &Path) -> String {
    dir.strip_prefix(deploy())
        .expect("under deploy/kubernetes")
        .display()
        .to_string()
}

/// `kubectl kustomize dir`: the rendered YAML and its resources.
pub(super) fn render(kubectl: &Path, dir: &Path) -> (String, Vec<Value>) {
    let mut command = Command::new(kubectl);
    command.arg("kustomize").arg(dir);
    let output = output_within(command, WITHIN);
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let yaml = String::from_utf8(output.stdout).expect("YAML is UTF-8");
    let resources = serde_yaml_ng::Deserializer::from_str(&yaml)
        .map(|document| {
            let value: serde_yaml_ng::Value =
                serde::Deserialize::deserialize(document).expect("rendered YAML parses");
            serde_json::to_value(value).expect("a resource is JSON")
        })
        .filter(|value| !value.is_null())
        .collect();
    (yaml, resources)
}

pub(super) fn kind(resource: &Value) -> &str {
    resource["kind"]
        .as_str()
        .expect("every resource has a kind")
}

pub(super) fn resource_name(resource: &Value) -> &str {
    resource["metadata"]["name"]
        .as_str()
        .expect("every resource has a name")
}

pub(super) fn one<'a>(resources: &'a [Value], wanted: &str) -> &'a Value {
    let mut found = resources.iter().filter(|resource| kind(resource) == wanted);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no {wanted} rendered"));
    assert!(found.next().is_none(), "more than one {wanted} rendered");
    first
}

pub(super) fn named<'a>(
    resources: &'a [Value],
    wanted_kind: &str,
    wanted_name: &str,
) -> Option<&'a Value> {
    resources
        .iter()
        .find(|resource| kind(resource) == wanted_kind && resource_name(resource) == wanted_name)
}

/// The Deployment's one container.
pub(super) fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container: slidegate");
    &containers[0]
}

/// The container's literal environment (a `valueFrom` would need the
/// cluster: none is used).
pub(super) fn environment(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|variable| {
            let name = variable["name"].as_str().expect("a name").to_string();
            let value = variable["value"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: a literal value, not {variable}"))
                .to_string();
            (name, value)
        })
        .collect()
}

pub(super) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| item.as_str().expect("a string").to_string())
        .collect()
}
