//! The recipes of the README and the book run as printed.
//!
//! A shell block a reader would copy is marked by the line before it:
//! `<!-- recipe -->` starts a session, `<!-- recipe: continued -->` goes on
//! in the session of the recipe before it on the same page (as a reader
//! who ran that one), and `<!-- not run: WHY -->` says why a block cannot
//! run here (a cluster, a cloud account). In the pages a reader copies
//! from (the README, getting started, the HTTP API, the proxies, the
//! library, and every operations page but Kubernetes) every `sh` block
//! carries one of the three.
//!
//! Each session runs its blocks, in order, as one `bash -e` script, on a
//! host of its own: a network namespace with only a loopback (so the
//! printed ports are free and nothing is substituted, not even a port),
//! a process namespace (whatever the recipe started, daemons included, ends
//! with it) and a `/tmp` of its own, in a directory holding the
//! repository's `examples/`, as the repository's root does. What stands in
//! for the reader's machine, and nothing else: `cargo run --release` is the
//! `slidegate` binary this test run built (a `cargo` first on `PATH`
//! passes every other command to the real cargo, offline), and so are
//! `target/release/slidegate` and `slidegate`, as if built or installed; `sudo` runs its command as the root
//! the tests run as, but for `sudo apt-get install -y PACKAGES`: the
//! session has no network, so the tests' own installer installs them
//! first, and that line checks that they are installed (`dpkg -s`).
//!
//! A session fails when a command fails, when a curl is answered 400 or
//! 5xx or not at all (curl's configuration file writes each status to
//! stderr, so the commands stay as printed), or when what it printed
//! lacks, in order, what the recipe says it prints (`# → TEXT`, after a
//! command or on the line after it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::{process, tools};

/// The pages whose `sh` blocks are all marked.
const PAGES: [&str; 13] = [
    "README.md",
    "docs/src/getting-started.md",
    "docs/src/guide/http-api.md",
    "docs/src/guide/proxies.md",
    "docs/src/guide/library.md",
    "docs/src/operations/reloading.md",
    "docs/src/operations/failure-modes.md",
    "docs/src/operations/elasticache.md",
    "docs/src/operations/observability.md",
    "docs/src/operations/endpoints.md",
    "docs/src/operations/bounds.md",
    "docs/src/operations/api-tokens.md",
    "docs/src/operations/clock.md",
];

/// One at a time: sessions share the machine's two cores, and the test
/// processes' output is easier to read.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A run of marked blocks: where it starts, and its lines.
#[derive(Debug)]
struct Session {
    at: String,
    script: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The sessions of `page`, and the `sh` blocks it left unmarked.
fn sessions(page: &str) -> (Vec<Session>, Vec<String>) {
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut sessions: Vec<Session> = Vec::new();
    let mut unmarked = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at].trim_end();
        if !line.starts_with("```") {
            at += 1;
            continue;
        }
        let fence_at = at;
        let info = line.trim_start_matches('`').trim();
        let end = (at + 1..lines.len())
            .find(|&i| lines[i].trim_end() == "```")
            .unwrap_or_else(|| panic!("{page}:{}: unclosed block", at + 1));
        let body: Vec<String> = lines[at + 1..end].iter().map(|l| l.to_string()).collect();
        at = end + 1;
        if info != "sh" {
            continue;
        }
        let marker = fence_at
            .checked_sub(1)
            .map(|i| lines[i].trim())
            .unwrap_or_default();
        let where_ = format!("{page}:{}", fence_at + 1);
        match marker {
            "<!-- recipe -->" => sessions.push(Session {
                at: where_,
                script: body,
            }),
            "<!-- recipe: continued -->" => sessions
                .last_mut()
                .unwrap_or_else(|| panic!("{where_}: continues no recipe"))
                .script
                .extend(body),
            marker if marker.starts_with("<!-- not run: ") => {}
            _ => unmarked.push(where_),
        }
    }
    (sessions, unmarked)
}

/// What a session's lines say they print, in order.
fn expected(script: &[String]) -> Vec<String> {
    script
        .iter()
        .filter_map(|line| {
            line.split_once("# → ")
                .map(|(_, said)| said.trim().to_owned())
        })
        .collect()
}

/// The packages `apt-get install -y ...` lines name.
fn packages(script: &[String]) -> Vec<String> {
    script
        .iter()
        .filter_map(|line| line.split_once("apt-get install -y "))
        .flat_map(|(_, rest)| {
            rest.split('#')
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The programs a package gives (what the installer looks for).
fn program_of(package: &str) -> &str {
    match package {
        "memcached" | "nginx" | "caddy" | "curl" => package,
        other => panic!("a recipe installs {other}: teach tests/recipes.rs its program"),
    }
}

/// The stand-ins of the reader's machine (see the file's doc), in `bin`.
fn stand_ins(bin: &Path) {
    std::fs::create_dir_all(bin).unwrap();
    let slidegate = env!("CARGO_BIN_EXE_slidegate");
    let cargo = env!("CARGO");
    let scripts = [
        (
            "cargo",
            format!(
                "#!/bin/sh\n\
                 # `cargo run --release [-- ARGS]`: the binary this test run built.\n\
                 if [ \"$1\" = run ] && [ \"$2\" = --release ] && {{ [ $# = 2 ] || [ \"$3\" = -- ]; }}; then\n\
                 \tshift 2; [ \"$1\" = -- ] && shift\n\
                 \texec {slidegate} \"$@\"\n\
                 fi\n\
                 exec {cargo} \"$@\"\n"
            ),
        ),
        ("slidegate", format!("#!/bin/sh\nexec {slidegate} \"$@\"\n")),
        (
            "sudo",
            // The packages were installed before the session, which has no
            // network: an `apt-get install` of installed packages only
            // checks that they are.
            "#!/bin/sh\n\
             if [ \"$1 $2 $3\" = \"apt-get install -y\" ]; then\n\
             \tshift 3\n\
             \tfor package in \"$@\"; do dpkg -s \"$package\" >/dev/null || exit 1; done\n\
             \texit 0\n\
             fi\n\
             exec \"$@\"\n"
                .to_owned(),
        ),
    ];
    for (name, script) in scripts {
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    }
}

/// Run one session on a host of its own; panics naming what went wrong.
fn run(session: &Session) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let test = format!("recipe {}", session.at);
    for package in packages(&session.script) {
        let found = tools::debian(program_of(&package), &package);
        if tools::require(&test, &package, found).is_none() {
            return;
        }
    }
    let found = tools::debian("unshare", "util-linux").and_then(|_| {
        tools::debian("ip", "iproute2")
            .map(|_| ())
            .and_then(|()| namespaces_work())
    });
    if tools::require(&test, "network namespaces (unshare)", found).is_none() {
        return;
    }
    // Outside /tmp, which the session replaces with its own.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "recipes/{}-{}",
        std::process::id(),
        session.at.replace(['/', ':', '.'], "-")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.join("examples")).unwrap();
    // What `cargo run --release` leaves behind, for the recipes that name it.
    std::fs::create_dir_all(dir.join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_slidegate"),
        dir.join("target/release/slidegate"),
    )
    .unwrap();
    let bin = dir.join(".bin");
    stand_ins(&bin);
    std::fs::write(
        dir.join(".curlrc"),
        "write-out = \"%{stderr}@status %{http_code} %{url_effective}\\n\"\n",
    )
    .unwrap();
    let script = format!(
        "ip link set lo up\nmount -t tmpfs tmpfs /tmp\nset -x\n{}\n",
        session.script.join("\n")
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("unshare");
    command
        .args(["--net", "--pid", "--mount", "--fork", "--kill-child"])
        .args(["bash", "-e", "-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        // HOME is the session's (Caddy and curl write there); cargo and
        // rustup keep finding the reader's own homes.
        .env("CARGO_HOME", home_of("CARGO_HOME", ".cargo"))
        .env("RUSTUP_HOME", home_of("RUSTUP_HOME", ".rustup"))
        .env("HOME", &dir)
        .env("CURL_HOME", &dir)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TARGET_DIR", target_dir())
        .env("RUST_LOG", "warn")
        .env_remove("SLIDEGATE_CONFIG");
    let output = process::output_within(command, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let told = format!("{test}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(output.status.success(), "{told}\nexited {}", output.status);
    for status in stderr
        .lines()
        .filter_map(|line| line.strip_prefix("@status "))
    {
        let code: u16 = status
            .split_whitespace()
            .next()
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        assert!(
            code != 0 && code != 400 && code < 500,
            "{told}\na curl was answered {status}"
        );
    }
    // Whitespace-normalized: what curl prints has no newline of its own.
    let printed = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut from = 0;
    for said in expected(&session.script) {
        let said = said.split_whitespace().collect::<Vec<_>>().join(" ");
        match printed[from..].find(&said) {
            Some(at) => from += at + said.len(),
            None => panic!("{told}\ndid not print, in order: {said}"),
        }
    }
    eprintln!("{test}: ran as printed");
}

/// `variable`, or where it defaults to under the user's home.
fn home_of(variable: &str, default: &str) -> PathBuf {
    std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(default)
        })
}

/// The target directory this test was built in (its examples are there).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Whether this process may make the namespaces a session runs in (root,
/// or a kernel that lets a user make them).
fn namespaces_work() -> Result<(), String> {
    let output = Command::new("unshare")
        .args(["--net", "--pid", "--mount", "--fork", "--kill-child"])
        .args(["sh", "-c", "ip link set lo up && mount -t tmpfs tmpfs /tmp"])
        .output()
        .map_err(|error| format!("unshare: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "unshare --net --pid --mount: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn run_page(page: &str) {
    let (sessions, unmarked) = sessions(page);
    assert!(unmarked.is_empty(), "unmarked sh blocks: {unmarked:?}");
    assert!(!sessions.is_empty(), "{page}: no recipe");
    for session in &sessions {
        run(session);
    }
}

#[test]
fn every_sh_block_a_reader_copies_is_marked() {
    let mut unmarked = Vec::new();
    for page in PAGES {
        unmarked.extend(sessions(page).1);
    }
    assert!(
        unmarked.is_empty(),
        "sh blocks with no <!-- recipe --> or <!-- not run: ... --> before them: {unmarked:?}"
    );
}

#[test]
fn the_readme_recipes_run_as_printed() {
    run_page("README.md");
}

#[test]
fn the_getting_started_recipes_run_as_printed() {
    run_page("docs/src/getting-started.md");
}

#[test]
fn the_http_api_recipes_run_as_printed() {
    run_page("docs/src/guide/http-api.md");
}

#[test]
fn the_proxy_recipes_run_as_printed() {
    run_page("docs/src/guide/proxies.md");
}

#[test]
fn the_library_recipes_run_as_printed() {
    run_page("docs/src/guide/library.md");
}

#[test]
fn the_operations_recipes_run_as_printed() {
    for page in PAGES.iter().filter(|page| page.contains("/operations/")) {
        let (sessions, _) = sessions(page);
        for session in &sessions {
            run(session);
        }
    }
}

/// The parts above on a page made for them: markers, sessions, and what
/// a recipe says it prints.
#[test]
fn markers_make_sessions() {
    let lines = |text: &str| -> Vec<String> { text.lines().map(str::to_owned).collect() };
    assert_eq!(
        expected(&lines(
            "curl -s x   # → {\"a\":1}\nfor i in 1 2; do :; done\n# → 200 429\n"
        )),
        ["{\"a\":1}", "200 429"]
    );
    assert_eq!(
        packages(&lines(
            "sudo apt-get install -y memcached nginx   # Debian\n"
        )),
        ["memcached", "nginx"]
    );
}
