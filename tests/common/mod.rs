//! Test harness: real `memcached` servers on loopback, started (and, when
//! missing, installed) by the tests themselves, a counting proxy, and
//! helpers shared by the test files.
//!
//! Each test binary uses only part of this module.
#![allow(dead_code)]

pub mod http;
#[cfg(feature = "server")]
pub mod in_process;
pub mod metrics;
pub mod process;
pub mod proxy;
#[cfg(feature = "server")]
pub mod service;
pub mod tools;
pub mod wait;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use slidegate::store::Store;
use slidegate::{Decision, Limiter, LimiterBuilder, MemcachedOptions, MemcachedStore, Policy};

/// A memcached process on 127.0.0.1, killed when dropped (and, through
/// PR_SET_PDEATHSIG, when the thread that started it ends, so a test
/// process that dies never leaves one behind).
pub struct Memcached {
    child: Option<Child>,
    pub port: u16,
    extra: Vec<String>,
}

impl Memcached {
    /// Start a memcached on a free loopback port.
    pub fn start() -> Memcached {
        Memcached::start_with(&[])
    }

    /// The same with more arguments (TLS, say).
    #[allow(dead_code)]
    pub fn start_with(extra: &[String]) -> Memcached {
        let binary = memcached_binary();
        let mut last_error = String::new();
        // The port is free when asked for but may be taken before memcached
        // binds it: try a few.
        for _ in 0..5 {
            let port = process::free_port();
            match spawn(binary, port, extra) {
                Ok(child) => {
                    return Memcached {
                        child: Some(child),
                        port,
                        extra: extra.to_vec(),
                    };
                }
                Err(error) => last_error = error,
            }
        }
        panic!("could not start memcached: {last_error}");
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stop the server, as an outage would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freeze the server (SIGSTOP), as a host that stops scheduling it
    /// would: its sockets still accept and buffer what is sent, and it
    /// applies all of it once resumed. Killed when dropped all the same.
    ///
    /// Returns once every thread of it has stopped: a stop signal takes
    /// effect as each thread next passes through the kernel, and on a
    /// loaded machine a request sent just after `kill` was still answered
    /// (a test that expected its call to hang failed a few times in ten).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        let pid = self.child.as_ref().expect("memcached is not running").id();
        wait::wait_for_blocking("memcached to stop", Duration::from_secs(5), || {
            every_thread_stopped(pid)
        });
    }

    /// Let a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        let child = self.child.as_ref().expect("memcached is not running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: a signal to the child this harness started and still holds.
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "kill({pid}, {signal})"
        );
    }

    /// Start it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match spawn(memcached_binary(), self.port, &self.extra) {
                Ok(child) => {
                    self.child = Some(child);
                    return;
                }
                // The old socket may linger for a moment.
                Err(error) if Instant::now() > deadline => {
                    panic!("could not restart memcached: {error}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Send raw protocol text and read until `terminator` ends the answer.
    pub fn raw(&self, request: &str, terminator: &str) -> String {
        let mut stream = TcpStream::connect(self.addr()).expect("connect to memcached");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut answer = String::new();
        while !answer.ends_with(terminator) {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            answer.push_str(&line);
        }
        answer
    }

    /// The server's `stats`, as name → value.
    pub fn stats(&self) -> std::collections::HashMap<String, u64> {
        self.raw("stats\r\n", "END\r\n")
            .lines()
            .filter_map(|line| {
                let mut fields = line.strip_prefix("STAT ")?.split(' ');
                let name = fields.next()?.to_owned();
                Some((name, fields.next()?.parse().ok()?))
            })
            .collect()
    }

    /// Commands that touched items: reads, increments, decrements.
    pub fn item_commands(&self) -> u64 {
        let stats = self.stats();
        [
            "cmd_get",
            "cmd_set",
            "incr_hits",
            "incr_misses",
            "decr_hits",
            "decr_misses",
            "cmd_touch",
        ]
        .iter()
        .map(|name| stats.get(*name).copied().unwrap_or(0))
        .sum()
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One memcached shared by every test of a binary. Started from a thread
/// that never ends, so PR_SET_PDEATHSIG fires only when the process exits.
pub fn shared_memcached() -> &'static Memcached {
    static SHARED: OnceLock<Memcached> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            sender.send(Memcached::start()).unwrap();
            loop {
                std::thread::park();
            }
        });
        receiver.recv().expect("memcached starter thread")
    })
}

/// A namespace no other test (or earlier run) uses, so tests sharing a
/// memcached cannot see each other's counters.
pub fn unique_namespace() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "t{}-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn memcached_options(servers: Vec<String>) -> MemcachedOptions {
    MemcachedOptions {
        servers,
        namespace: unique_namespace(),
        // Generous: tests share two cores with the compiler and each other;
        // the default (50 ms) is exercised by the failure tests.
        timeout: Duration::from_millis(2_000),
        ..MemcachedOptions::default()
    }
}

/// A limiter that waits for its store as long as a loaded machine needs.
/// The limiter's own default (50 ms) is for production: in a test on two
/// busy cores a call can take longer, and a check that times out is
/// decided by the failure mode, not the store the test asserts on. Only a
/// test about the timeout itself sets a short one.
pub fn patient_limiter<S: Store>(store: S) -> LimiterBuilder<S> {
    slidegate::Limiter::builder(store).timeout(Duration::from_secs(2))
}

/// `count` checks of one unit of `key`, each in a task of its own, all
/// spawned at once; their handles, to await when the test is ready.
pub fn spawn_checks<S: Store>(
    limiter: &Arc<Limiter<S>>,
    key: &str,
    policy: &Arc<Policy>,
    count: usize,
) -> Vec<tokio::task::JoinHandle<Decision>> {
    (0..count)
        .map(|_| {
            let (limiter, policy, key) = (limiter.clone(), policy.clone(), key.to_owned());
            tokio::spawn(async move { limiter.check(&key, &policy, 1).await.unwrap() })
        })
        .collect()
}

/// `repetitions` bursts, each of `callers` simultaneous checks of one unit
/// of a fresh key (`{prefix}-{repetition}`), spread over `instances` in
/// turn and released together by a barrier: how many each burst admitted.
pub async fn admitted_per_burst<S: Store>(
    instances: &[Arc<Limiter<S>>],
    policy: &Arc<Policy>,
    callers: usize,
    repetitions: usize,
    prefix: &str,
) -> Vec<usize> {
    let mut admitted_per_burst = Vec::new();
    for repetition in 0..repetitions {
        let key = Arc::new(format!("{prefix}-{repetition}"));
        let start = Arc::new(tokio::sync::Barrier::new(callers));
        let tasks: Vec<_> = (0..callers)
            .map(|caller| {
                let limiter = instances[caller % instances.len()].clone();
                let (policy, key, start) = (policy.clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    limiter.check(&key, &policy, 1).await.unwrap().allowed
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += usize::from(task.await.unwrap());
        }
        admitted_per_burst.push(admitted);
    }
    admitted_per_burst
}

/// A store on the shared memcached, in a fresh namespace.
pub async fn memcached_store() -> MemcachedStore {
    MemcachedStore::connect(&memcached_options(vec![shared_memcached().addr()]))
        .await
        .expect("connect to the test memcached")
}

/// The start of the current UTC day, in ms: tests place their manual clocks
/// at known offsets from it, so bucket boundaries fall where they expect,
/// while absolute Memcached expiry times stay in the future.
pub fn today_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    now - now % 86_400_000
}

/// Whether every thread of process `pid` is stopped (state `T` in
/// `/proc/PID/task/TID/stat`, read after the command name's closing
/// parenthesis).
fn every_thread_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        state.is_some_and(|state| state.starts_with('T') || state.starts_with('t'))
    })
}

fn spawn(binary: &Path, port: u16, extra: &[String]) -> Result<Child, String> {
    let mut command = Command::new(binary);
    command
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-m",
            "64",
            "-t",
            "2",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // memcached refuses to run as root unless told which user to be.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]);
    }
    // SAFETY: prctl is async-signal-safe; it asks the kernel to kill the
    // child when the thread that spawned it exits.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("{}: {error}", binary.display()))?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            return Err(format!("memcached exited ({status}): {stderr}"));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return Ok(child);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("memcached did not listen within 10 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The memcached binary, installed with apt-get when missing (we run as
/// root on the CI machines).
fn memcached_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        process::installed("memcached", "memcached").expect(
            "memcached is missing and `apt-get install -y memcached` did not install it; install it and run the tests again",
        )
    })
}
