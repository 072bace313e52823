//! The command line: flags with their defaults, and the check that load
//! goes to loopback only.

use std::path::PathBuf;

use crate::measure;

pub struct Args {
    pub memcached: String,
    pub slidegate: PathBuf,
    pub checks: u64,
    pub seconds: u64,
    pub memory_keys: u64,
    /// Multiplexed connections per node for the library phases.
    pub connections: usize,
    /// Only the ceilings and the library phases (for a quick look).
    pub library_only: bool,
    /// Callers of the library phases.
    pub callers: Vec<usize>,
    /// Only the distinct-keys memory phase.
    pub memory_only: bool,
    /// Library phases with same-key coalescing off.
    pub no_coalesce: bool,
}

pub fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        memcached: "127.0.0.1:11211".to_owned(),
        slidegate: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/slidegate"),
        checks: 300_000,
        seconds: 5,
        memory_keys: 1_000_000,
        connections: slidegate::MemcachedOptions::default().connections,
        library_only: false,
        callers: vec![1, 16, 64, 256],
        memory_only: false,
        no_coalesce: false,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--memcached" => args.memcached = value()?,
            "--slidegate" => args.slidegate = value()?.into(),
            "--checks" => args.checks = value()?.parse().map_err(|e| format!("--checks: {e}"))?,
            "--seconds" => {
                args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?
            }
            "--connections" => {
                args.connections = value()?
                    .parse()
                    .map_err(|e| format!("--connections: {e}"))?
            }
            "--library-only" => args.library_only = true,
            "--memory-only" => args.memory_only = true,
            "--no-coalesce" => args.no_coalesce = true,
            "--memcached-pid" => measure::watch_memcached(
                value()?
                    .parse()
                    .map_err(|e| format!("--memcached-pid: {e}"))?,
            ),
            "--callers" => {
                args.callers = value()?
                    .split(',')
                    .map(|n| n.parse().map_err(|e| format!("--callers: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--memory-keys" => {
                args.memory_keys = value()?
                    .parse()
                    .map_err(|e| format!("--memory-keys: {e}"))?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let host = args.memcached.rsplit_once(':').map_or("", |(host, _)| host);
    if !(host.starts_with("127.") || host == "localhost" || host == "[::1]") {
        return Err("load goes to loopback only: give --memcached 127.x.x.x:PORT".to_owned());
    }
    Ok(args)
}
