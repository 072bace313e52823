//! The Kubernetes manifests under `deploy/kubernetes/`, as a cluster gets
//! them: every kustomization rendered by a real kustomize (`kubectl
//! kustomize`), every resource validated against the Kubernetes API
//! schemas by `kubernetes-validate --strict` (unknown fields are errors),
//! the ServiceMonitor against the prometheus-operator CRD's schema kept
//! beside the manifests, the invariants rolling updates and probes rest on,
//! and `slidegate --check` on each rendered configuration, with the
//! container's arguments and environment, in a directory laid out as the
//! pod's mounts are.
#![cfg(feature = "server")]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use common::process::{self, output_within};
use common::service::Slidegate;
use common::tools;

/// The validator, pinned: it carries the schemas of every Kubernetes
/// version it knows inside the package, so validating needs no network.
const VALIDATOR: &str = "kubernetes-validate==1.37.0";
/// The oldest Kubernetes the manifests claim (deploy/kubernetes/README.md)
/// and the newest the validator knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
/// Rendering, validating or checking a handful of small files: far less
/// than this even on a loaded machine.
const WITHIN: Duration = Duration::from_secs(120);
/// A token for the tokens file the Secret would hold (the manifests ship
/// none: the operator creates the Secret).
const TEST_TOKEN: &str = "kubernetes-test-token-0123456789";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn deploy() -> PathBuf {
    repo("deploy/kubernetes")
}

/// Every directory under `deploy/kubernetes/` holding a
/// `kustomization.yaml` (at most three levels down), sorted.
fn kustomizations() -> Vec<PathBuf> {
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

fn name_of(dir: &Path) -> String {
    dir.strip_prefix(deploy())
        .expect("under deploy/kubernetes")
        .display()
        .to_string()
}

/// `kubectl`, with a kustomize new enough for the kustomizations (v5:
/// kubectl 1.27 or later). Debian 12's `kubernetes-client` is kubectl
/// 1.20, whose kustomize (v2.0.3) cannot read them: that is reported as
/// the tool not being had. `None` when `test` is skipped.
fn kubectl(test: &str) -> Option<PathBuf> {
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
fn python(test: &str) -> Option<PathBuf> {
    let found = tools::python_with(
        &[VALIDATOR, "jsonschema"],
        "kubernetes_validate, jsonschema",
    );
    tools::require(test, "python kubernetes-validate and jsonschema", found)
}

/// `kubectl kustomize dir`: the rendered YAML and its resources.
fn render(kubectl: &Path, dir: &Path) -> (String, Vec<Value>) {
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

fn kind(resource: &Value) -> &str {
    resource["kind"]
        .as_str()
        .expect("every resource has a kind")
}

fn resource_name(resource: &Value) -> &str {
    resource["metadata"]["name"]
        .as_str()
        .expect("every resource has a name")
}

fn one<'a>(resources: &'a [Value], wanted: &str) -> &'a Value {
    let mut found = resources.iter().filter(|resource| kind(resource) == wanted);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no {wanted} rendered"));
    assert!(found.next().is_none(), "more than one {wanted} rendered");
    first
}

fn named<'a>(resources: &'a [Value], wanted_kind: &str, wanted_name: &str) -> Option<&'a Value> {
    resources
        .iter()
        .find(|resource| kind(resource) == wanted_kind && resource_name(resource) == wanted_name)
}

/// Resources the Kubernetes API itself defines (their schemas ship with
/// the validator), as against custom resources.
fn built_in(resource: &Value) -> bool {
    let api = resource["apiVersion"].as_str().expect("an apiVersion");
    !api.contains(".coreos.com/")
}

/// `kubernetes-validate --strict` on `resources` at every version of
/// [`KUBERNETES_VERSIONS`]: each one must be reported as passed.
fn validate_built_in(python: &Path, dir: &Path, label: &str, resources: &[&Value]) -> String {
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
fn validate_custom(python: &Path, dir: &Path, label: &str, resources: &[&Value]) -> tools::Said {
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

/// The Deployment's one container.
fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container: slidegate");
    &containers[0]
}

/// The container's literal environment (a `valueFrom` would need the
/// cluster: none is used).
fn environment(container: &Value) -> BTreeMap<String, String> {
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

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| item.as_str().expect("a string").to_string())
        .collect()
}

/// What a `--check` run of one rendering saw: the pod's files under
/// `root`, and what it printed.
struct Checked {
    success: bool,
    said: String,
}

/// Lay the pod's mounts out under `root` (each ConfigMap's keys as files,
/// the tokens Secret as a tokens file), rewrite every mount path in the
/// container's arguments, environment and mounted files to its place under
/// `root`, and run `slidegate --check` with them.
fn check(label: &str, resources: &[Value], root: &Path) -> Checked {
    let deployment = one(resources, "Deployment");
    let container = container(deployment);
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    // The mount paths, longest first, so that a path that prefixes another
    // (`/etc/slidegate`, `/etc/slidegate-rls`) is never taken for it.
    let mut mounts: Vec<(String, &Value)> = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .map(|mount| {
            assert!(
                mount.get("subPath").is_none(),
                "{label}: {mount}: a subPath mount never sees an edit, so reload would not follow it"
            );
            let volume_name = mount["name"].as_str().expect("a volume name");
            let volume = volumes
                .iter()
                .find(|volume| volume["name"] == volume_name)
                .unwrap_or_else(|| panic!("{label}: no volume {volume_name}"));
            let path = mount["mountPath"].as_str().expect("a mountPath");
            (path.to_string(), volume)
        })
        .collect();
    mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    let rewrite = |text: &str| -> String {
        let mut text = text.to_string();
        for (index, (path, _)) in mounts.iter().enumerate() {
            text = text.replace(path.as_str(), &format!("\u{0}{index}\u{0}"));
        }
        for (index, (path, _)) in mounts.iter().enumerate() {
            let placed = root.join(path.trim_start_matches('/'));
            text = text.replace(&format!("\u{0}{index}\u{0}"), &placed.display().to_string());
        }
        text
    };
    for (path, volume) in &mounts {
        let dir = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).expect("the mount's directory");
        assert!(
            volume.get("configMap").is_some() || volume.get("secret").is_some(),
            "{label}: volume {volume}: only ConfigMaps and Secrets are mounted"
        );
        if let Some(config_map) = volume.get("configMap") {
            assert!(
                config_map.get("items").is_none(),
                "{label}: every key mounted"
            );
            let name = config_map["name"].as_str().expect("a ConfigMap name");
            let rendered = named(resources, "ConfigMap", name).unwrap_or_else(|| {
                panic!("{label}: the ConfigMap {name} is mounted but not rendered")
            });
            for (key, value) in rendered["data"].as_object().expect("data") {
                let value = value.as_str().expect("text data");
                std::fs::write(dir.join(key), rewrite(value)).expect("write a mounted key");
            }
        }
        if let Some(secret) = volume.get("secret") {
            let name = secret["secretName"].as_str().expect("a secretName");
            assert_eq!(
                name, "slidegate-api-tokens",
                "{label}: the only Secret is the API tokens', created by the operator"
            );
            assert!(
                named(resources, "Secret", name).is_none(),
                "{label}: no token is shipped in the manifests"
            );
            std::fs::write(
                dir.join("tokens"),
                format!("# the Secret's key `tokens`\n{TEST_TOKEN}\n"),
            )
            .expect("write the tokens file");
        }
    }
    let mut command = Slidegate::command();
    command.arg("--check");
    assert!(
        container.get("command").is_none(),
        "{label}: the image's entrypoint runs slidegate"
    );
    for arg in strings(&container["args"]) {
        command.arg(rewrite(&arg));
    }
    for (name, value) in environment(container) {
        command.env(name, rewrite(&value));
    }
    command.env("RUST_BACKTRACE", "1").current_dir(root);
    let output = output_within(command, WITHIN);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("{label}: slidegate --check:\n{said}");
    Checked {
        success: output.status.success(),
        said,
    }
}

/// A number of milliseconds from the environment, else the TOML file's
/// `server.KEY`, else `default` (as slidegate reads them).
fn setting_ms(
    env: &BTreeMap<String, String>,
    variable: &str,
    toml: &toml::Value,
    key: &str,
    default: u64,
) -> u64 {
    if let Some(value) = env.get(variable) {
        return value.parse().expect("a number of milliseconds");
    }
    toml.get("server")
        .and_then(|server| server.get(key))
        .and_then(toml::Value::as_integer)
        .map_or(default, |value| value as u64)
}

fn port_number(port: &str) -> u64 {
    port.rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("{port}: no port"))
}

/// What every rendering must hold, whatever the overlay: the invariants
/// rolling updates, probes and the pod's hardening rest on.
fn invariants(label: &str, resources: &[Value]) {
    let deployment = one(resources, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = container(deployment);
    let env = environment(container);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(
        &deployment["spec"]["selector"]["matchLabels"], labels,
        "{label}: the selector is the pod's labels"
    );

    // The configuration: the ConfigMap mounted as a directory, named by
    // --config.
    let args = strings(&container["args"]);
    let config = args
        .windows(2)
        .find(|pair| pair[0] == "--config")
        .map(|pair| pair[1].clone())
        .unwrap_or_else(|| panic!("{label}: --config in {args:?}"));
    let (config_dir, config_file) = config.rsplit_once('/').expect("an absolute path");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|mount| mount["mountPath"] == config_dir)
        .unwrap_or_else(|| panic!("{label}: {config_dir} is not a mount"));
    let volume = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|volume| volume["name"] == mount["name"])
        .expect("the config volume");
    let config_map = named(
        resources,
        "ConfigMap",
        volume["configMap"]["name"]
            .as_str()
            .expect("the configuration is a ConfigMap"),
    )
    .expect("the configuration's ConfigMap is rendered");
    let toml_text = config_map["data"][config_file]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: the ConfigMap holds {config_file}"));
    let toml: toml::Value = toml::from_str(toml_text).expect("the TOML parses");

    // Rolling updates: the delay is set, and the kubelet waits past it and
    // the drain before SIGKILL.
    let delay = setting_ms(
        &env,
        "SLIDEGATE_SHUTDOWN_DELAY_MS",
        &toml,
        "shutdown_delay_ms",
        0,
    );
    let drain = setting_ms(
        &env,
        "SLIDEGATE_DRAIN_TIMEOUT_MS",
        &toml,
        "drain_timeout_ms",
        10_000,
    );
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(delay > 0, "{label}: a shutdown delay is set");
    assert!(
        grace * 1000 > delay + drain,
        "{label}: terminationGracePeriodSeconds {grace} s is not above delay {delay} ms + drain {drain} ms"
    );

    // Listening on every interface of the pod, on the port named http.
    let listen = env
        .get("SLIDEGATE_LISTEN")
        .cloned()
        .or_else(|| {
            toml.get("listen")
                .and_then(|v| v.as_str())
                .map(String::from)
        })
        .unwrap_or_else(|| panic!("{label}: a listen address"));
    assert!(
        listen.starts_with("0.0.0.0:") || listen.starts_with("[::]:"),
        "{label}: {listen} is not reachable from outside the pod"
    );
    let ports = container["ports"].as_array().expect("container ports");
    let port_named = |name: &str| -> u64 {
        ports
            .iter()
            .find(|port| port["name"] == name)
            .and_then(|port| port["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{label}: no container port named {name}"))
    };
    assert_eq!(
        port_named("http"),
        port_number(&listen),
        "{label}: http is the listen port"
    );
    for (variable, name) in [
        ("SLIDEGATE_RLS_LISTEN", "grpc-rls"),
        ("SLIDEGATE_RLQS_LISTEN", "grpc-rlqs"),
    ] {
        if let Some(address) = env.get(variable) {
            assert_eq!(
                port_named(name),
                port_number(address),
                "{label}: {variable}"
            );
        }
    }

    // Probes: readiness on /readyz, liveness and start-up on /healthz, all
    // on the HTTP port.
    for (probe, path) in [
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{label}: {probe}");
        let port = &get["port"];
        assert!(
            port == "http" || port.as_u64() == Some(port_named("http")),
            "{label}: {probe} on the HTTP port, not {port}"
        );
    }

    // Hardening.
    let security = &container["securityContext"];
    let pod_security = &pod["securityContext"];
    assert!(
        security["runAsNonRoot"] == true || pod_security["runAsNonRoot"] == true,
        "{label}: runAsNonRoot"
    );
    let user = security["runAsUser"]
        .as_u64()
        .or_else(|| pod_security["runAsUser"].as_u64());
    assert_ne!(user, Some(0), "{label}: not root");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{label}");
    assert_eq!(security["allowPrivilegeEscalation"], false, "{label}");
    assert_eq!(
        strings(&security["capabilities"]["drop"]),
        ["ALL"],
        "{label}: every capability dropped"
    );
    assert!(
        security["capabilities"].get("add").is_none(),
        "{label}: none added"
    );
    let seccomp = if security["seccompProfile"].is_null() {
        &pod_security["seccompProfile"]
    } else {
        &security["seccompProfile"]
    };
    assert_eq!(seccomp["type"], "RuntimeDefault", "{label}: seccomp");

    // Sized: requests for the scheduler and the autoscaler, a memory limit.
    let resources_ = &container["resources"];
    for (what, key) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(
            resources_[what][key].is_string(),
            "{label}: resources.{what}.{key}"
        );
    }

    // Spread across zones.
    let spread = pod["topologySpreadConstraints"]
        .as_array()
        .expect("topologySpreadConstraints");
    assert!(
        spread.iter().any(|constraint| {
            constraint["topologyKey"] == "topology.kubernetes.io/zone"
                && &constraint["labelSelector"]["matchLabels"] == labels
        }),
        "{label}: spread across zones"
    );

    // The tokens file is in the mounted Secret.
    let tokens_file = toml
        .get("server")
        .and_then(|server| server.get("api_tokens_file"))
        .and_then(toml::Value::as_str)
        .unwrap_or_else(|| panic!("{label}: server.api_tokens_file"));
    let secret_mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|mount| {
            pod["volumes"]
                .as_array()
                .expect("volumes")
                .iter()
                .any(|volume| {
                    volume["name"] == mount["name"]
                        && volume["secret"]["secretName"] == "slidegate-api-tokens"
                })
        })
        .unwrap_or_else(|| panic!("{label}: the tokens Secret is mounted"));
    assert_eq!(
        format!(
            "{}/tokens",
            secret_mount["mountPath"].as_str().expect("a path")
        ),
        tokens_file,
        "{label}: api_tokens_file is the Secret's key `tokens`"
    );

    // The Service names the HTTP, RLS and RLQS ports, each a container
    // port, and selects the pods.
    let service = named(resources, "Service", "slidegate").expect("the Service");
    assert_eq!(
        &service["spec"]["selector"], labels,
        "{label}: Service selector"
    );
    let service_ports = service["spec"]["ports"].as_array().expect("ports");
    for name in ["http", "grpc-rls", "grpc-rlqs"] {
        let port = service_ports
            .iter()
            .find(|port| port["name"] == name)
            .unwrap_or_else(|| panic!("{label}: the Service names no port {name}"));
        assert_eq!(
            port["targetPort"], name,
            "{label}: {name} targets the named port"
        );
        port_named(name);
    }

    // Disruptions and scaling act on these pods.
    let budget = one(resources, "PodDisruptionBudget");
    assert_eq!(
        &budget["spec"]["selector"]["matchLabels"], labels,
        "{label}"
    );
    let autoscaler = one(resources, "HorizontalPodAutoscaler");
    assert_eq!(autoscaler["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(
        autoscaler["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    assert!(
        autoscaler["spec"]["metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .any(|metric| metric["resource"]["name"] == "cpu"),
        "{label}: the autoscaler follows CPU"
    );
    assert!(
        autoscaler["spec"]["minReplicas"].as_u64() >= Some(2),
        "{label}: at least two pods, so one may be disrupted"
    );
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "{label}: the autoscaler owns the replica count"
    );
}

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
