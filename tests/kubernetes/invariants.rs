//! The invariants every rendering holds, whatever the overlay: the
//! selector and the configuration's mount, the shutdown delay and drain
//! within the grace period, the listen addresses and named ports, the
//! probes, the pod's hardening and sizing, the tokens Secret, the Service,
//! the disruption budget and the autoscaler.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::render::{container, environment, named, one, strings};

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
pub(super) fn invariants(label: &str, resources: &[Value]) {
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
