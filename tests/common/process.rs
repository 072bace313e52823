//! Real programs the tests run beside slidegate (nginx, Caddy, the
//! slidegate binary, examples): installed with apt-get when missing, started
//! on loopback, killed when dropped or when the test process dies.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) when dropped; PR_SET_PDEATHSIG kills
/// it too if the thread that started it ends first.
pub struct Daemon {
    child: Child,
    pub name: String,
    log: PathBuf,
}

impl Daemon {
    /// Start `command`, its stdout and stderr into `log`.
    pub fn start(name: &str, mut command: Command, log: &Path) -> Daemon {
        let file = std::fs::File::create(log).expect("create the log file");
        let err = file.try_clone().expect("clone the log file");
        command
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err));
        // SAFETY: prctl is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {name}: {error}"));
        Daemon {
            child,
            name: name.to_owned(),
            log: log.to_owned(),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Wait until `addr` accepts connections; panics with the log if the
    /// process exits or 20 s pass.
    pub fn wait_for(&mut self, addr: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}):\n{}", self.name, self.log());
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {addr} within 20 s:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Daemon {
    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then wait for the exit (at most `within`); `None` if it
    /// did not exit in time (the drop then kills it).
    pub fn terminate(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address for a daemon to listen on (see [`free_port`]).
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// Where the ports handed out for daemons lie: below the kernel's
/// ephemeral range (32768-60999 by default), which the source port of
/// every client connection is taken from. A port the kernel picked for a
/// bind to port 0 is from that range, so between the moment it was free
/// and the moment a daemon bound it, any connection the tests opened could
/// take it (Caddy, listening on every address, then failed to start).
const DAEMON_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port free now, that no other test of this process was given and no
/// client connection takes as its source: the next from [`DAEMON_PORTS`],
/// starting at a place set by the process id (test binaries run one after
/// another, so the place only spreads their ports), that binds on every
/// address.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(DAEMON_PORTS.end - DAEMON_PORTS.start);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = DAEMON_PORTS.start + offset as u16;
        // Bound on every address, the check fails if anything holds the
        // port on any of them, a client connection included.
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {DAEMON_PORTS:?}");
}

/// The path of `binary`, installing Debian's `package` with apt-get when it
/// is missing (the tests run as root, as CI does). `None` only when the
/// install is impossible; the caller then skips, loudly.
pub fn installed(binary: &str, package: &str) -> Option<PathBuf> {
    if let Some(found) = find(binary) {
        return Some(found);
    }
    // One apt-get at a time across test binaries.
    let lock = std::fs::File::create(std::env::temp_dir().join("slidegate-apt.lock")).ok()?;
    lock.lock().ok()?;
    if let Some(found) = find(binary) {
        return Some(found);
    }
    eprintln!("{binary} is not installed: running apt-get install -y {package}");
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "-q", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|status| status.success())
    };
    if !install() {
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        install();
    }
    find(binary)
}

fn find(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            "/usr/bin".into(),
            "/usr/sbin".into(),
            "/usr/local/bin".into(),
        ])
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
}

/// A fresh directory under `slidegate-tests/<this process>/` in the
/// system's temporary one. Each test process removes, once, the
/// directories of test processes that have ended: a run leaves its files
/// for a look after it (a failed test's logs and configurations) until the
/// next run, and no run adds to `/tmp` for good.
pub fn temp_dir(name: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    let root = std::env::temp_dir().join("slidegate-tests");
    SWEPT.call_once(|| remove_ended_processes_dirs(&root));
    let dir = root
        .join(std::process::id().to_string())
        .join(format!("{name}-{}", super::unique_namespace()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// Remove every `root/<pid>` whose process has ended.
fn remove_ended_processes_dirs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let ended = name
            .to_str()
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new("/proc").join(pid.to_string()).exists());
        if ended {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Run `command` (a tool that makes files, say) to its end and require
/// success; its output. A failure panics with the command and its stderr.
pub fn succeed(mut command: Command) -> std::process::Output {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Run `command` (a script, say) to its end, its stdout and stderr
/// captured, killed and failed past `limit`: a hung server must fail the
/// test, not hang it.
pub fn output_within(mut command: Command, limit: Duration) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait for the script").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("the script's output")
}
