//! Release hygiene: the license and changelog are there and say what they
//! must, `slidegate --version` names the commit it was built from, and the
//! package `cargo publish` would upload holds what its build needs (the
//! protos, build.rs).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::process::output_within;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// `cargo` as the test was run by (cargo sets `CARGO` for it).
fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root());
    command
}

/// Listing and packing read the tree and the lock file; no compiling, so
/// this is ample even on a loaded machine.
const PACKAGE_WITHIN: Duration = Duration::from_secs(120);

#[test]
fn the_version_names_the_commit_when_built_from_a_checkout() {
    let mut version = Command::new(env!("CARGO_BIN_EXE_slidegate"));
    version.arg("--version");
    let output = output_within(version, Duration::from_secs(20));
    assert!(output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let crate_version = env!("CARGO_PKG_VERSION");
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    match head {
        Some(commit) if root().join(".git").exists() => assert_eq!(
            printed,
            format!("slidegate {crate_version} ({commit})"),
            "built from this checkout"
        ),
        // No checkout (a packaged crate): the crate version alone.
        _ => assert_eq!(printed, format!("slidegate {crate_version}")),
    }
}

#[test]
fn the_license_and_the_changelog_are_there() {
    let manifest = read("Cargo.toml");
    assert!(manifest.contains("\nlicense = \"MIT\"\n"));
    let license = read("LICENSE");
    assert!(license.starts_with("MIT License\n"), "{license}");
    assert!(license.contains("the slidegate authors"));
    let changelog = read("CHANGELOG.md");
    assert!(changelog.starts_with("# Changelog\n"));
    assert!(changelog.contains("keepachangelog.com"));
    let first_entry = changelog
        .lines()
        .find(|line| line.starts_with("## "))
        .expect("an entry");
    assert!(
        first_entry.starts_with("## [Unreleased]")
            && first_entry.contains(env!("CARGO_PKG_VERSION")),
        "{first_entry}"
    );
}

#[test]
fn the_package_holds_the_protos_and_the_build_script() {
    let mut list = cargo();
    list.args(["package", "--list", "--allow-dirty", "--offline"]);
    let output = output_within(list, PACKAGE_WITHIN);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files = String::from_utf8_lossy(&output.stdout);
    let files: Vec<&str> = files.lines().collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "LICENSE",
        "CHANGELOG.md",
        "README.md",
        "src/main.rs",
        "src/lib.rs",
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
        // What those two import.
        "proto/envoy/config/core/v3/base.proto",
        "proto/envoy/extensions/common/ratelimit/v3/ratelimit.proto",
        "proto/envoy/type/v3/ratelimit_unit.proto",
        "proto/envoy/type/v3/ratelimit_strategy.proto",
        "proto/envoy/type/v3/token_bucket.proto",
    ] {
        assert!(files.contains(&needed), "{needed} not packaged: {files:?}");
    }
    assert!(
        !files.iter().any(|file| file.starts_with("target/")),
        "build output packaged"
    );

    // The .crate itself, unverified (verifying compiles the whole crate
    // again: `cargo package --allow-dirty` by hand).
    let mut pack = cargo();
    pack.args(["package", "--allow-dirty", "--no-verify", "--offline"]);
    let output = output_within(pack, PACKAGE_WITHIN);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
