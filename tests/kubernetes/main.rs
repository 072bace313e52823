//! The Kubernetes manifests under `deploy/kubernetes/`, as a cluster gets
//! them: every kustomization rendered by a real kustomize (`kubectl
//! kustomize`), every resource validated against the Kubernetes API
//! schemas by `kubernetes-validate --strict` (unknown fields are errors),
//! the ServiceMonitor against the prometheus-operator CRD's schema kept
//! beside the manifests, the invariants rolling updates and probes rest on,
//! and `slidegate --check` on each rendered configuration, with the
//! container's arguments and environment, in a directory laid out as the
//! pod's mounts are.
//!
//! This file holds what a test of one kustomization does and the tests;
//! finding the tools, rendering, validating, checking and the invariants
//! are in the modules below.
#![cfg(feature = "server")]

#[path = "../common/mod.rs"]
mod common;

mod check;
mod invariants;
mod render;
mod tools;
mod validate;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use check::check;
use common::process::{self, output_within};
use invariants::invariants;
use render::{
    container, deploy, environment, kind, kustomizations, name_of, named, one, render, repo,
    resource_name,
};
use tools::{kubectl, python};
use validate::{KUBERNETES_VERSIONS, built_in, validate_built_in, validate_custom};

/// Rendering, validating or checking a handful of small files: far less
/// than this even on a loaded machine.
const WITHIN: Duration = Duration::from_secs(120);

/// Everything about one kustomization: rendered, validated, its
/// invariants held, its configuration checked. Returns the resources and
/// what `--check` printed.
fn verify(test: &str, dir: &Path) -> Option<(Vec<Value>, String)> {
    let kubectl = kubectl(test)?;
    let python = python(test)?;
    let label = name_of(dir);
    let work = process::temp_dir(&format!("kubernetes-{}", label.replace('/', "-")));
    let (yaml, resources) = render(&kubectl, dir);
    std::fs::write(work.join("rendered.yaml"), &yaml).expect("keep the rendering");
    assert!(!resources.is_empty(), "{label}: nothing rendered");
    let (built_ins, customs): (Vec<&Value>, Vec<&Value>) =
        resources.iter().partition(|resource| built_in(resource));
    validate_built_in(&python, &work, &label, &built_ins);
    if !customs.is_empty() {
        let said = validate_custom(&python, &work, &label, &customs);
        assert!(
            said.success,
            "{label}: custom resources do not validate:\n{}",
            said.all
        );
        assert_eq!(said.stdout.matches("PASSED ").count(), customs.len());
    }
    invariants(&label, &resources);
    let checked = check(&label, &resources, &work.join("pod"));
    assert!(
        checked.success,
        "{label}: slidegate --check refused the rendered configuration:\n{}",
        checked.said
    );
    Some((resources, checked.said))
}

#[test]
fn every_kustomization_is_tested_here() {
    let found: Vec<String> = kustomizations().iter().map(|dir| name_of(dir)).collect();
    assert_eq!(
        found,
        [
            "base",
            "overlays/elasticache",
            "overlays/envoy",
            "overlays/prometheus-operator"
        ],
        "a kustomization was added or removed: give it a test below"
    );
}

#[test]
fn the_base_renders_validates_and_checks() {
    let test = "the_base_renders_validates_and_checks";
    let Some((resources, said)) = verify(test, &deploy().join("base")) else {
        return;
    };
    assert!(
        said.contains("0.0.0.0:8080"),
        "the HTTP API on every interface:\n{said}"
    );
    assert!(
        said.contains("memcached:11211"),
        "the Memcached Service:\n{said}"
    );
    let kinds: Vec<&str> = resources.iter().map(kind).collect();
    for wanted in [
        "ConfigMap",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    ] {
        assert!(
            kinds.contains(&wanted),
            "the base renders a {wanted}: {kinds:?}"
        );
    }
    // The pod runs as the image's user: the one docker/Dockerfile makes,
    // which owns nothing it could write.
    let dockerfile = std::fs::read_to_string(repo("docker/Dockerfile")).expect("the Dockerfile");
    let image_user = dockerfile
        .lines()
        .rev()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("a USER in the Dockerfile")
        .trim();
    let pod = &one(&resources, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"]["runAsUser"].to_string(),
        image_user,
        "runAsUser is the image's USER"
    );
}

#[test]
fn the_elasticache_overlay_discovers_over_tls() {
    let test = "the_elasticache_overlay_discovers_over_tls";
    let Some((resources, said)) = verify(test, &deploy().join("overlays/elasticache")) else {
        return;
    };
    let env = environment(container(one(&resources, "Deployment")));
    let endpoint = &env["SLIDEGATE_MEMCACHED_DISCOVERY"];
    assert!(
        endpoint.contains(".cfg."),
        "a configuration endpoint: {endpoint}"
    );
    assert_eq!(env["SLIDEGATE_MEMCACHED_TLS"], "true");
    assert!(
        said.contains(endpoint.as_str()),
        "--check names the endpoint:\n{said}"
    );
    assert!(
        said.to_lowercase().contains("tls"),
        "--check names TLS:\n{said}"
    );
    assert!(
        !said.contains("memcached:11211"),
        "discovery replaces the base's node list:\n{said}"
    );
}

#[test]
fn the_envoy_overlay_serves_rls_and_rlqs() {
    let test = "the_envoy_overlay_serves_rls_and_rlqs";
    let Some((resources, said)) = verify(test, &deploy().join("overlays/envoy")) else {
        return;
    };
    assert!(said.contains("0.0.0.0:8081"), "RLS listens:\n{said}");
    assert!(said.contains("0.0.0.0:18082"), "RLQS listens:\n{said}");
    assert!(said.contains("edge"), "the RLS domain is loaded:\n{said}");

    // The Envoy clusters reach the headless Service's ports by its name.
    let headless = named(&resources, "Service", "slidegate-grpc").expect("a headless Service");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    let clusters = named(&resources, "ConfigMap", "slidegate-envoy-clusters")
        .expect("the Envoy clusters")["data"]["envoy-clusters.yaml"]
        .as_str()
        .expect("envoy-clusters.yaml");
    let clusters: serde_yaml_ng::Value = serde_yaml_ng::from_str(clusters).expect("YAML");
    let clusters = serde_json::to_value(clusters).expect("JSON");
    for (cluster, port_name) in [
        ("slidegate_rls", "grpc-rls"),
        ("slidegate_rlqs", "grpc-rlqs"),
    ] {
        let cluster = clusters["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .find(|found| found["name"] == cluster)
            .unwrap_or_else(|| panic!("no Envoy cluster {cluster}"));
        assert_eq!(cluster["type"], "STRICT_DNS", "every pod, not one");
        assert!(
            !cluster["typed_extension_protocol_options"]
                ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"]
                ["http2_protocol_options"]
                .is_null(),
            "gRPC needs HTTP/2"
        );
        let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
            ["socket_address"];
        assert!(
            address["address"]
                .as_str()
                .expect("a host")
                .starts_with("slidegate-grpc."),
            "{address}: the headless Service"
        );
        let port = headless["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|port| port["name"] == port_name)
            .expect("the port");
        assert_eq!(address["port_value"], port["port"], "{port_name}");
    }

    // The overlay's configuration is the base's plus RLQS.
    let base = std::fs::read_to_string(deploy().join("base/slidegate.toml")).expect("base");
    let envoy =
        std::fs::read_to_string(deploy().join("overlays/envoy/slidegate.toml")).expect("envoy");
    let body = |text: &str| -> String {
        let from = text.find("[memcached]").expect("a [memcached] table");
        let to = text.find("\n[rlqs]").unwrap_or(text.len());
        text[from..to].trim_end().to_string()
    };
    assert_eq!(
        body(&envoy),
        body(&base),
        "the Envoy overlay's TOML drifted from the base's"
    );
}

#[test]
fn the_prometheus_operator_overlay_scrapes_metrics() {
    let test = "the_prometheus_operator_overlay_scrapes_metrics";
    let Some((resources, _)) = verify(test, &deploy().join("overlays/prometheus-operator")) else {
        return;
    };
    let monitor = one(&resources, "ServiceMonitor");
    let service = named(&resources, "Service", "slidegate").expect("the Service");
    let selected = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (key, value) in selected {
        assert_eq!(
            &service["metadata"]["labels"][key], value,
            "the ServiceMonitor selects the Service by {key}"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["port"], "http",
        "scraped on the Service's http port"
    );
    assert_eq!(endpoint["path"], "/metrics");
}

/// The validators are not vacuous: a misspelt field in a Deployment and
/// in a ServiceMonitor, and a ServiceMonitor with a bad scheme, fail, and
/// so does a configuration `--check` refuses.
#[test]
fn the_validators_refuse_what_a_cluster_would() {
    let test = "the_validators_refuse_what_a_cluster_would";
    let (Some(kubectl), Some(python)) = (kubectl(test), python(test)) else {
        return;
    };
    let work = process::temp_dir("kubernetes-refusals");
    let (_, mut resources) = render(&kubectl, &deploy().join("overlays/prometheus-operator"));

    let deployment = resources
        .iter_mut()
        .find(|resource| kind(resource) == "Deployment")
        .expect("a Deployment");
    // A misspelt probe: a cluster would refuse the Deployment (or, with
    // a lenient client, drop the probe without a word).
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    container["readinesProbe"] = container["readinessProbe"].clone();
    let bad = deployment.clone();
    let file = work.join("bad-deployment.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&bad).expect("YAML")).expect("write");
    let mut command = Command::new(&python);
    command
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "-k",
            KUBERNETES_VERSIONS[0],
        ])
        .arg(&file);
    let output = output_within(command, WITHIN);
    let said = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && said.contains("readinesProbe"),
        "a misspelt field passed kubernetes-validate --strict:\n{said}"
    );

    let monitor = resources
        .iter()
        .find(|resource| kind(resource) == "ServiceMonitor")
        .expect("a ServiceMonitor");
    let mut misspelt = monitor.clone();
    misspelt["spec"]["endpoints"][0]["intervall"] = "15s".into();
    let mut scheme = monitor.clone();
    scheme["spec"]["endpoints"][0]["scheme"] = "ftp".into();
    let mut no_endpoints = monitor.clone();
    no_endpoints["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("endpoints");
    for (what, bad) in [
        ("intervall", misspelt),
        ("scheme", scheme),
        ("endpoints", no_endpoints),
    ] {
        let said = validate_custom(&python, &work, &format!("bad-{what}"), &[&bad]);
        assert!(
            !said.success && said.all.contains(what),
            "a ServiceMonitor with a bad {what} passed its schema:\n{}",
            said.all
        );
    }

    // A configuration --check refuses fails the check of the rendering.
    let config = resources
        .iter_mut()
        .find(|resource| {
            kind(resource) == "ConfigMap" && resource_name(resource) == "slidegate-config"
        })
        .expect("the configuration");
    let toml = config["data"]["slidegate.toml"]
        .as_str()
        .expect("slidegate.toml")
        .replace(
            "limit = 10, window = \"1s\"",
            "limit = 10, window = \"1s\", precision = 7",
        );
    config["data"]["slidegate.toml"] = toml.into();
    let checked = check("bad-config", &resources, &work.join("pod"));
    assert!(
        !checked.success && checked.said.contains("precision"),
        "--check passed a configuration a start would refuse:\n{}",
        checked.said
    );
}
