//! Two jobs at build time:
//! - the version `slidegate --version` prints (`SLIDEGATE_VERSION`): the
//!   crate's, and the commit when built from a git checkout, so a binary
//!   says which code it is; a build from the packaged crate or from a copy
//!   without `.git` (the Docker build) has the crate version alone;
//! - the vendored Envoy RLS and RLQS protos (`proto/`), compiled when the
//!   `grpc` feature is on. protox parses them in Rust, so the build needs
//!   neither `protoc` nor the network; the library without `grpc` compiles
//!   none of it.

use std::path::Path;
use std::process::Command;

fn main() {
    set_version();
    #[cfg(feature = "grpc")]
    if let Err(error) = compile_protos() {
        panic!("cannot compile the RLS and RLQS protos in proto/: {error}");
    }
}

/// `SLIDEGATE_VERSION`: `0.1.0 (abc1234)` in a checkout, else `0.1.0`.
fn set_version() {
    let crate_version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let root = Path::new(&root);
    let commit = if root.join(".git").exists() {
        git(root, &["rev-parse", "--short", "HEAD"])
    } else {
        None
    };
    let version = match commit {
        Some(commit) => format!("{crate_version} ({commit})"),
        None => crate_version,
    };
    println!("cargo:rustc-env=SLIDEGATE_VERSION={version}");
    // Built again when the commit moves: HEAD (a checkout or a detached
    // head), the branch it names, and packed-refs (where `git gc` moves
    // the branch). Asked of git, since in a worktree `.git` is a file and
    // the refs live in the main repository. Only files that exist are
    // named: Cargo takes a missing one for changed, and would run this
    // script, and build the crate again, on every build.
    println!("cargo:rerun-if-changed=build.rs");
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(root, &["rev-parse", "--git-path", &name]) {
            let path = root.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}

/// What `git args` prints in `dir`, trimmed; `None` without git or on a
/// failure (not a repository, no commit yet).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

#[cfg(feature = "grpc")]
fn compile_protos() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let files = protox::compile(
        [
            "envoy/service/ratelimit/v3/rls.proto",
            "envoy/service/rate_limit_quota/v3/rlqs.proto",
        ],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        // The generic client, for tests and load drivers; `connect` needs
        // tonic's transport, which the service does not otherwise use.
        .build_client(true)
        .build_transport(false)
        // Undecodable bytes are the caller's error (src/server/grpc/codec.rs).
        .codec_path("crate::server::grpc::codec::CallerCodec")
        .compile_fds(files)?;
    Ok(())
}
