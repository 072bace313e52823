//! Validation of the rendered resources against schemas: the built-in
//! kinds by `kubernetes-validate --strict` at the oldest and the newest
//! Kubernetes the manifests claim, the custom resources (ServiceMonitors)
//! by jsonschema against the CRD schema kept beside the manifests.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::WITHIN;
use crate::common::process::output_within;
use crate::common::tools;
use crate::render::{kind, repo};

/// The oldest Kubernetes the manifests claim (deploy/kubernetes/README.md)
/// and the newest the validator knows.
pub(super) const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];

/// Resources the Kubernetes API itself defines (their schemas ship with
/// the validator), as against custom resources.
pub(super) fn built_in(resource: &Value) -> bool {
    let api = resource["apiVersion"].as_str().expect("an apiVersion");
    !api.contains(".coreos.com/")
}

/// `kubernetes-validate --strict` on `resources` at every version of
/// [`KUBERNETES_VERSIONS`]: each one must be reported as passed.
pub(super) fn validate_built_in(
    python: &Path,
    dir: &Path,
    label: &str,
    resources: &[&Value],
) -> String {
    let file = dir.join(format!("{}.yaml", label.replace('/', "-")));
    let yaml = resources
        .iter()
        .map(|resource| serde_yaml_ng::to_string(resource).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n");
    std::fs::write(&file, yaml).expect("write the resources");
    let mut all = String::new();
    for version in KUBERNETES_VERSIONS {
        let mut command = Command::new(python);
        command
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .arg(&file);
        let output = output_within(command, WITHIN);
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!("{label}, Kubernetes {version}:\n{said}");
        let passed = said.matches(" passed for resource ").count();
        assert!(
            output.status.success() && passed == resources.len(),
            "{label}: {passed} of {} resources validated against Kubernetes {version}:\n{said}",
            resources.len()
        );
        all.push_str(&said);
    }
    all
}

/// The custom resources against their CRD's schema (only ServiceMonitors
/// are rendered; any other custom kind has no schema here and fails).
pub(super) fn validate_custom(
    python: &Path,
    dir: &Path,
    label: &str,
    resources: &[&Value],
) -> tools::Said {
    for resource in resources {
        assert_eq!(
            kind(resource),
            "ServiceMonitor",
            "{label}: no schema kept for the custom resource {resource}"
        );
    }
    let file = dir.join(format!("{}-custom.json", label.replace('/', "-")));
    std::fs::write(&file, serde_json::to_vec(resources).expect("JSON")).expect("write");
    tools::run_python(
        python,
        "deploy/kubernetes/test/validate_crd.py",
        &[
            repo("deploy/kubernetes/test/servicemonitor-crd-schema.json")
                .display()
                .to_string(),
            file.display().to_string(),
        ],
        WITHIN,
    )
}
