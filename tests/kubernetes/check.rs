//! `slidegate --check` on a rendering, as the pod would run it: the
//! ConfigMaps and the tokens Secret laid out as the pod's mounts under a
//! directory, every mount path in the container's arguments, environment
//! and files moved there, and the binary asked whether it would start.

use std::path::Path;

use serde_json::Value;

use crate::WITHIN;
use crate::common::process::output_within;
use crate::common::service::Slidegate;
use crate::render::{container, environment, named, one, strings};

/// A token for the tokens file the Secret would hold (the manifests ship
/// none: the operator creates the Secret).
const TEST_TOKEN: &str = "kubernetes-test-token-0123456789";

/// What a `--check` run of one rendering saw: the pod's files under
/// `root`, and what it printed.
pub(super) struct Checked {
    pub(super) success: bool,
    pub(super) said: String,
}

/// Lay the pod's mounts out under `root` (each ConfigMap's keys as files,
/// the tokens Secret as a tokens file), rewrite every mount path in the
/// container's arguments, environment and mounted files to its place under
/// `root`, and run `slidegate --check` with them.
pub(super) fn check(label: &str, resources: &[Value], root: &Path) -> Checked {
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
