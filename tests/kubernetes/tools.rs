//! The tools the tests run, found or installed: a `kubectl` whose
//! kustomize renders the kustomizations, and a python with the pinned
//! validator and jsonschema. A test without them is skipped, as
//! `common::tools` reports.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::WITHIN;
use crate::common::process::output_within;
use crate::common::tools;

/// The validator, pinned: it carries the schemas of every Kubernetes
/// version it knows inside the package, so validating needs no network.
const VALIDATOR: &str = "kubernetes-validate==1.37.0";

/// `kubectl`, with a kustomize new enough for the kustomizations (v5:
/// kubectl 1.27 or later). Debian 12's `kubernetes-client` is kubectl
/// 1.20, whose kustomize (v2.0.3) cannot read them: that is reported as
/// the tool not being had. `None` when `test` is skipped.
pub(super) fn kubectl(test: &str) -> Option<PathBuf> {
    let found = tools::debian("kubectl", "kubernetes-client").and_then(|kubectl| {
        let mut version = Command::new(&kubectl);
        version.args(["version", "--client", "-o", "json"]);
        let output = output_within(version, WITHIN);
        let json: Value = serde_json::from_slice(&output.stdout).map_err(|error| {
            format!(
                "`kubectl version --client -o json` said no JSON ({error}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        let kustomize = json["kustomizeVersion"].as_str().unwrap_or("none");
        let major: u32 = kustomize
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse().ok())
            .unwrap_or(0);
        if major >= 5 {
            Ok(kubectl)
        } else {
            Err(format!(
                "{} has kustomize {kustomize}; the manifests need v5 (kubectl 1.27 or later)",
                kubectl.display()
            ))
        }
    });
    tools::require(test, "kubectl with kustomize v5", found)
}

/// A python with the validator and jsonschema. `None` when skipped.
pub(super) fn python(test: &str) -> Option<PathBuf> {
    let found = tools::python_with(
        &[VALIDATOR, "jsonschema"],
        "kubernetes_validate, jsonschema",
    );
    tools::require(test, "python kubernetes-validate and jsonschema", found)
}
