//! The `slidegate` binary as the tests run it: started with nothing from
//! the caller's `SLIDEGATE_*` environment, its log in a file, ready once
//! its listeners accept, and stopped (SIGTERM, then SIGKILL) when dropped,
//! so a test that panics never leaves one behind.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::metrics::{self, Exposition};
use super::process::{self, Daemon};

/// Every variable the binary reads, so a developer's shell changes nothing.
const ENVIRONMENT: &[&str] = &[
    "SLIDEGATE_CONFIG",
    "SLIDEGATE_LISTEN",
    "SLIDEGATE_MEMCACHED",
    "SLIDEGATE_MEMCACHED_REPLICAS",
    "SLIDEGATE_MEMCACHED_DISCOVERY",
    "SLIDEGATE_MEMCACHED_TLS",
    "SLIDEGATE_MEMCACHED_TLS_CA",
    "SLIDEGATE_NAMESPACE",
    "SLIDEGATE_FAILURE_MODE",
    "SLIDEGATE_TIMEOUT_MS",
    "SLIDEGATE_NEAR_CACHE_CAPACITY",
    "SLIDEGATE_NEAR_CACHE_REVALIDATE_MS",
    "SLIDEGATE_COALESCE",
    "SLIDEGATE_RLS_LISTEN",
    "SLIDEGATE_RLS_CONFIG",
    "SLIDEGATE_RLQS_LISTEN",
    "SLIDEGATE_API_TOKENS",
    "SLIDEGATE_MEMORY_CAPACITY",
    "SLIDEGATE_SHUTDOWN_DELAY_MS",
    "SLIDEGATE_DRAIN_TIMEOUT_MS",
    "SLIDEGATE_LOG_FORMAT",
    "SLIDEGATE_LOG_REFUSALS_PER_S",
];

/// How long a stop may take before the process is killed instead.
const STOP_WITHIN: Duration = Duration::from_secs(15);

/// A running `slidegate`.
pub struct Slidegate {
    daemon: Daemon,
    /// The HTTP API.
    pub addr: SocketAddr,
    /// A directory of its own: its log, and any file the test writes.
    pub dir: PathBuf,
}

impl Slidegate {
    /// The binary, with no `SLIDEGATE_*` variable inherited, logging at
    /// `info` without colours. Add flags and variables, then
    /// [`start`](Self::start) it.
    pub fn command() -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_slidegate"));
        for variable in ENVIRONMENT {
            command.env_remove(variable);
        }
        command.env("RUST_LOG", "info").env("NO_COLOR", "1");
        command
    }

    /// A fresh directory for a service's files, before it starts.
    pub fn dir(name: &str) -> PathBuf {
        process::temp_dir(&format!("slidegate-{name}"))
    }

    /// Start `command` with `--listen` on a free loopback port.
    pub fn start(name: &str, mut command: Command) -> Slidegate {
        let addr = process::free_addr();
        command.args(["--listen", &addr.to_string()]);
        Slidegate::start_in(Slidegate::dir(name), command, addr, &[])
    }

    /// Start the binary on `config` (a TOML file written into a fresh
    /// directory) with `flags`, its HTTP API on a free loopback port; ready
    /// once that and every address of `also` accept connections.
    pub fn start_with_file(
        name: &str,
        config: &str,
        flags: &[&str],
        also: &[SocketAddr],
    ) -> Slidegate {
        let dir = Slidegate::dir(name);
        let file = dir.join("slidegate.toml");
        std::fs::write(&file, config).expect("write the configuration");
        let addr = process::free_addr();
        let mut command = Slidegate::command();
        command
            .args(["--listen", &addr.to_string()])
            .args(flags)
            .arg("--config")
            .arg(&file);
        Slidegate::start_in(dir, command, addr, also)
    }

    /// Start `command`, whose HTTP API will be on `addr` (its file or its
    /// flags say so), in `dir`; ready once `addr` and every address of
    /// `also` (an RLS listener, say) accept connections.
    pub fn start_in(
        dir: PathBuf,
        command: Command,
        addr: SocketAddr,
        also: &[SocketAddr],
    ) -> Slidegate {
        let mut daemon = Daemon::start("slidegate", command, &dir.join("slidegate.log"));
        for ready in std::iter::once(&addr).chain(also) {
            daemon.wait_for(*ready);
        }
        Slidegate { daemon, addr, dir }
    }

    /// Run `command` until it exits (at most 20 s: a start that should
    /// have failed must fail the test, not hang it); its status and what
    /// it wrote to stdout and stderr.
    pub fn run_to_exit(mut command: Command) -> (ExitStatus, String) {
        let log =
            std::env::temp_dir().join(format!("slidegate-run-{}.log", super::unique_namespace()));
        let file = std::fs::File::create(&log).expect("create the log file");
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone the log file"))
            .stderr(file);
        let mut child = command.spawn().expect("start slidegate");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for slidegate") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "slidegate kept running:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        (status, output)
    }

    /// Everything it has logged so far.
    pub fn log(&self) -> String {
        self.daemon.log()
    }

    pub fn pid(&self) -> i32 {
        self.daemon.pid()
    }

    pub fn is_running(&mut self) -> bool {
        self.daemon.is_running()
    }

    /// Send `signal` (SIGHUP, say).
    pub fn signal(&self, signal: i32) {
        // SAFETY: a signal to the child this test started.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// Its `/metrics`, parsed.
    pub async fn metrics(&self) -> Exposition {
        metrics::scrape(self.addr).await
    }

    /// Stop it as an orchestrator would (SIGTERM), and require a clean
    /// exit; its whole log.
    pub fn stop(mut self) -> String {
        let status = self.daemon.terminate(STOP_WITHIN);
        let log = self.log();
        assert!(
            status.is_some_and(|status| status.success()),
            "slidegate did not exit cleanly on SIGTERM ({status:?}):\n{log}"
        );
        log
    }
}

impl Drop for Slidegate {
    fn drop(&mut self) {
        self.daemon.terminate(STOP_WITHIN);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
