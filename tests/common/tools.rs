//! Tools a test needs that are not Rust (nginx, Caddy, python's grpcio),
//! and what happens when one cannot be had. A test that returns early
//! passes, and `cargo test` hides what it printed: so a missing tool fails
//! the test, under `CI=true` always, and elsewhere unless
//! `SLIDEGATE_ALLOW_SKIP=1` says a skip is wanted (then it says so on
//! stderr).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `found`, or what to do without it: `None` (the caller returns, the test
/// skipped, loudly) only when skips are allowed and this is not CI; a
/// panic naming the tool and why otherwise.
pub fn require<T>(test: &str, tool: &str, found: Result<T, String>) -> Option<T> {
    let why = match found {
        Ok(found) => return Some(found),
        Err(why) => why,
    };
    let ci = std::env::var("CI").is_ok_and(|value| value == "true");
    let allowed = std::env::var("SLIDEGATE_ALLOW_SKIP").is_ok_and(|value| value == "1");
    assert!(
        allowed && !ci,
        "{test}: {tool} cannot be had ({why}); this test did not run. \
         Install it, or (not under CI=true) set SLIDEGATE_ALLOW_SKIP=1 to skip it."
    );
    eprintln!("\n==== SKIPPED {test}: {tool} cannot be had ({why}); SLIDEGATE_ALLOW_SKIP=1 ====\n");
    None
}

/// A Debian package's program, installed with apt-get when missing.
pub fn debian(binary: &str, package: &str) -> Result<PathBuf, String> {
    super::process::installed(binary, package)
        .ok_or_else(|| format!("`apt-get install -y {package}` did not install {binary}"))
}

/// A python with `packages` importable (as `modules`): a virtual
/// environment of the tests' own under `target/` (made once, reused by
/// later runs), since Debian 12 and Ubuntu 24.04 refuse a bare
/// `pip install` outside one (PEP 668). Returns its interpreter.
pub fn python_with(packages: &[&str], modules: &str) -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-venv");
    let python = venv.join("bin/python");
    let importable = || {
        Command::new(&python)
            .args(["-c", &format!("import {modules}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if importable() {
        return Ok(python);
    }
    // One installer at a time across test binaries.
    let lock = std::fs::File::create(std::env::temp_dir().join("slidegate-venv.lock"))
        .map_err(|error| format!("lock: {error}"))?;
    lock.lock().map_err(|error| format!("lock: {error}"))?;
    if importable() {
        return Ok(python);
    }
    if !python.is_file() {
        make_venv(&venv)?;
    }
    let install = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .output()
        .map_err(|error| format!("cannot run {} -m pip: {error}", python.display()))?;
    if !install.status.success() || !importable() {
        return Err(format!(
            "pip install {} in {} failed: {}",
            packages.join(" "),
            venv.display(),
            String::from_utf8_lossy(&install.stderr)
        ));
    }
    Ok(python)
}

/// `python3 -m venv`, installing Debian's python3-venv when the system
/// python has no venv module (a pyenv or upstream python has it built in).
fn make_venv(venv: &Path) -> Result<(), String> {
    let create = || {
        Command::new("python3")
            .args(["-m", "venv", "--clear"])
            .arg(venv)
            .output()
    };
    match create() {
        Ok(output) if output.status.success() => return Ok(()),
        Ok(_) | Err(_) => {}
    }
    let _ = Command::new("apt-get")
        .args(["install", "-y", "-q", "python3-venv"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    match create() {
        Ok(output) if output.status.success() => Ok(()),
        Ok(output) => Err(format!(
            "python3 -m venv {} failed: {}",
            venv.display(),
            String::from_utf8_lossy(&output.stderr)
        )),
        Err(error) => Err(format!("cannot run python3: {error}")),
    }
}

/// A python with grpcio and grpcio-tools (see [`python_with`]), and the
/// gRPC stubs of `protos` generated into a fresh directory: the
/// interpreter and the directory. `None` when `test` is skipped (see
/// [`require`]).
#[allow(dead_code)]
pub fn grpc_python(test: &str, protos: &[&str]) -> Option<(PathBuf, PathBuf)> {
    let found = python_with(&["grpcio", "grpcio-tools"], "grpc, grpc_tools.protoc");
    let python = require(test, "python grpcio", found)?;
    let stubs = super::process::temp_dir("slidegate-grpc-stubs");
    grpc_python_stubs(&python, &stubs, protos);
    Some((python, stubs))
}

/// What a script said, already echoed to the test's log.
pub struct Said {
    /// It exited 0.
    pub success: bool,
    pub stdout: String,
    /// Its stdout, then its stderr.
    pub all: String,
}

/// Run `script` (a path in the repository) with `python` and `args`, at
/// most `limit` (see [`output_within`](super::process::output_within)).
#[allow(dead_code)]
pub fn run_python(python: &Path, script: &str, args: &[String], limit: Duration) -> Said {
    let mut command = Command::new(python);
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
        .args(args);
    let output = super::process::output_within(command, limit);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let all = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    eprintln!("{all}");
    Said {
        success: output.status.success(),
        stdout,
        all,
    }
}

/// Generate the Python gRPC stubs of `files` (paths under the vendored
/// `proto/`) into `out`, with `python`'s grpcio-tools and the well-known
/// types that ship with it.
#[allow(dead_code)]
pub fn grpc_python_stubs(python: &Path, out: &Path, files: &[&str]) {
    let well_known = Command::new(python)
        .args([
            "-c",
            "import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'))",
        ])
        .output()
        .expect("python runs");
    let well_known = String::from_utf8(well_known.stdout).expect("a path");
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("proto");
    let mut protoc = Command::new(python);
    protoc
        .args(["-m", "grpc_tools.protoc"])
        .arg(format!("-I{}", protos.display()))
        .arg(format!("-I{}", well_known.trim()))
        .arg(format!("--python_out={}", out.display()))
        .arg(format!("--grpc_python_out={}", out.display()))
        .args(files);
    super::process::succeed(protoc);
}

/// The mdBook version `.ci/run` and the book's test build with.
#[allow(dead_code)]
pub const MDBOOK_VERSION: &str = "0.5.4";

/// `mdbook`, from crates.io into `target/tools` when missing (as
/// `.ci/run` installs it): without default features, which serve and
/// watch the book and index it for search, none of which a build that
/// checks the book needs.
#[allow(dead_code)]
pub fn mdbook() -> Result<PathBuf, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .to_path_buf();
    let root = target.join("tools");
    let mdbook = root.join("bin/mdbook");
    let works = || {
        Command::new(&mdbook)
            .arg("--version")
            .output()
            .is_ok_and(|output| {
                output.status.success()
                    && String::from_utf8_lossy(&output.stdout).contains(MDBOOK_VERSION)
            })
    };
    if works() {
        return Ok(mdbook);
    }
    // One installer at a time across test binaries.
    let lock = std::fs::File::create(std::env::temp_dir().join("slidegate-mdbook.lock"))
        .map_err(|error| format!("lock: {error}"))?;
    lock.lock().map_err(|error| format!("lock: {error}"))?;
    if works() {
        return Ok(mdbook);
    }
    eprintln!(
        "mdbook {MDBOOK_VERSION} is not in {}: cargo install",
        root.display()
    );
    let install = Command::new(env!("CARGO"))
        .args(["install", "mdbook", "--locked", "--no-default-features"])
        .args(["--version", MDBOOK_VERSION, "--root"])
        .arg(&root)
        .output()
        .map_err(|error| format!("cannot run cargo install: {error}"))?;
    if !install.status.success() || !works() {
        return Err(format!(
            "cargo install mdbook {MDBOOK_VERSION} failed: {}",
            String::from_utf8_lossy(&install.stderr)
        ));
    }
    Ok(mdbook)
}
