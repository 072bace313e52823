//! The README's HTTP API examples work right after its quick start, as
//! printed: the quick start's block and every `sh` block of the "HTTP API"
//! section are run in order, each `cargo run --release` as the real binary
//! (its flags as printed, on a free loopback port instead of the printed
//! one) and each `curl` line through `sh` as printed, but for the port.
//! No answer may be a 400 (an example naming what the service does not
//! have) or a 5xx.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::process;
use common::service::Slidegate;

/// The port the README's commands use when they name none.
const PRINTED_DEFAULT_PORT: u16 = 8080;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The lines of every ```sh block of the section `heading` (up to the
/// next `## `), in order; `first_only` stops after the first block.
fn sh_lines(readme: &str, heading: &str, first_only: bool) -> Vec<String> {
    let start = readme
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("the README has no section {heading:?}"));
    let section = &readme[start + heading.len() + 2..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut lines = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh") => in_block = true,
            (true, "```") => {
                in_block = false;
                if first_only {
                    break;
                }
            }
            (true, line) => lines.push(line.to_owned()),
            _ => {}
        }
    }
    assert!(!lines.is_empty(), "no sh block in {heading:?}");
    lines
}

/// `cargo run --release [-- FLAGS] &`: the flags, up to `&` or a comment.
fn cargo_run_flags(line: &str) -> Option<Vec<String>> {
    let rest = line.strip_prefix("cargo run --release")?;
    let rest = rest.trim_start().strip_prefix("--").unwrap_or("");
    Some(
        rest.split_whitespace()
            .take_while(|word| *word != "&" && !word.starts_with('#'))
            .map(str::to_owned)
            .collect(),
    )
}

/// The README's instances, started as printed: printed port -> the real
/// address and the process.
struct Instances {
    started: BTreeMap<u16, (SocketAddr, Slidegate)>,
    curl_home: std::path::PathBuf,
}

impl Instances {
    fn start(&mut self, mut flags: Vec<String>) {
        let addr = process::free_addr();
        let printed_port = match flags.iter().position(|flag| flag == "--listen") {
            Some(at) => {
                let printed: SocketAddr = flags[at + 1].parse().expect("--listen HOST:PORT");
                flags[at + 1] = addr.to_string();
                printed.port()
            }
            None => {
                flags.extend(["--listen".to_owned(), addr.to_string()]);
                PRINTED_DEFAULT_PORT
            }
        };
        let mut command = Slidegate::command();
        command.args(&flags).current_dir(env!("CARGO_MANIFEST_DIR"));
        let dir = Slidegate::dir(&format!("readme-{printed_port}"));
        let service = Slidegate::start_in(dir, command, addr, &[]);
        self.started.insert(printed_port, (addr, service));
    }

    /// Run a curl line as printed, to the instance it names; its status.
    fn curl(&self, line: &str) -> (String, u16, String) {
        let mut command_line = line.to_owned();
        for (printed, (addr, _)) in &self.started {
            command_line = command_line.replace(
                &format!("localhost:{printed}"),
                &format!("localhost:{}", addr.port()),
            );
        }
        assert_ne!(
            command_line, line,
            "{line}: names no instance the README started"
        );
        let mut sh = Command::new("sh");
        // The status, after whatever the example prints: from curl's own
        // configuration file, so the command stays as printed.
        sh.args(["-c", &command_line])
            .env("CURL_HOME", &self.curl_home);
        let output = process::output_within(sh, Duration::from_secs(30));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let status = stdout
            .trim_end()
            .lines()
            .last()
            .and_then(|last| last.parse().ok())
            .unwrap_or_else(|| panic!("{command_line}: no status in {stdout:?}"));
        (command_line, status, stdout)
    }
}

#[test]
fn the_readme_http_api_examples_work_after_the_quick_start() {
    let readme = readme();
    let mut lines = sh_lines(&readme, "## Try it", true);
    lines.extend(sh_lines(&readme, "## HTTP API", false));
    let curl_home = process::temp_dir("slidegate-readme-curl");
    std::fs::write(
        curl_home.join(".curlrc"),
        "write-out = \"\\n%{http_code}\\n\"\n",
    )
    .unwrap();
    let mut instances = Instances {
        started: BTreeMap::new(),
        curl_home,
    };
    let mut ran = 0;
    for line in &lines {
        if let Some(flags) = cargo_run_flags(line) {
            instances.start(flags);
        } else if line.starts_with("curl ") {
            let (command, status, said) = instances.curl(line);
            eprintln!("{command}\n  -> {status}");
            assert!(
                status != 0 && status != 400 && status < 500,
                "{line}\nanswered {status}: {said}"
            );
            // An answer printed beside the command is the answer.
            if let Some((_, printed)) = line.split_once("# {") {
                let body = said.lines().next().unwrap_or_default();
                assert_eq!(body, format!("{{{printed}"), "{line}");
            }
            ran += 1;
        }
    }
    assert!(
        ran >= 8,
        "the README's examples: only {ran} curl lines found"
    );
}
