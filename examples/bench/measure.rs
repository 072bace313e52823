//! What every phase records: calls, time, a latency histogram, memcached's
//! command counters, and the peak RSS of the process that did the work.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use hdrhistogram::Histogram;

/// One row of the table.
pub struct Row {
    pub name: String,
    pub concurrency: String,
    pub calls: u64,
    pub elapsed: Duration,
    /// Microseconds.
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub commands_per_call: Option<f64>,
    pub peak_rss_kib: Option<u64>,
    /// CPU time (user + system) of the process that did the work, per call:
    /// on a 2-core machine shared with memcached and the load generator,
    /// this is what a throughput figure is mostly made of.
    pub cpu_us_per_call: Option<f64>,
    /// memcached's CPU time per call, when its process is known
    /// (`--memcached-pid`): the other half of what a ratio is made of.
    pub memcached_cpu_us_per_call: Option<f64>,
    /// Calls whose answer was not the one expected (an error, say).
    pub unexpected: u64,
}

impl Row {
    pub fn rate(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn from_histogram(
        name: impl Into<String>,
        concurrency: impl Into<String>,
        histogram: &Histogram<u64>,
        elapsed: Duration,
    ) -> Row {
        // Recorded in nanoseconds.
        let at = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
        Row {
            name: name.into(),
            concurrency: concurrency.into(),
            calls: histogram.len(),
            elapsed,
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            commands_per_call: None,
            peak_rss_kib: None,
            cpu_us_per_call: None,
            memcached_cpu_us_per_call: None,
            unexpected: 0,
        }
    }
}

pub fn histogram() -> Histogram<u64> {
    // 1 ns to 60 s at 2 significant digits (1 %): 30 KB. Every caller task
    // keeps its own, and at 3 digits 256 of them took 58 MB and enough
    // cache misses per record to show in the profile of the library phase.
    Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid histogram bounds")
}

/// memcached's `stats`.
pub fn memcached_stats(addr: &str) -> HashMap<String, u64> {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return HashMap::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(b"stats\r\n").is_err() {
        return HashMap::new();
    }
    let mut stats = HashMap::new();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if line == "END" {
            break;
        }
        let mut fields = line.split(' ').skip(1);
        if let (Some(name), Some(value)) = (fields.next(), fields.next())
            && let Ok(value) = value.parse()
        {
            stats.insert(name.to_owned(), value);
        }
    }
    stats
}

/// Commands that touched items: reads, arithmetic (the meta `ma` counts as
/// incr/decr), sets and touches.
pub fn item_commands(stats: &HashMap<String, u64>) -> u64 {
    [
        "cmd_get",
        "cmd_set",
        "cmd_touch",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
    ]
    .iter()
    .map(|name| stats.get(*name).copied().unwrap_or(0))
    .sum()
}

/// Reset the peak RSS of `pid` (the kernel's VmHWM), so the next reading
/// is the peak of one phase.
pub fn reset_peak_rss(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The peak RSS of `pid` since its last reset, in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// memcached's process, when the benchmark was told it.
static MEMCACHED_PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Measure memcached's CPU around each phase from now on.
pub fn watch_memcached(pid: u32) {
    let _ = MEMCACHED_PID.set(pid);
}

/// What a phase is measured by, taken before it and finished after it:
/// memcached's commands and CPU, and the CPU and peak RSS of the process
/// that does the work (`pid`).
pub struct Around<'a> {
    memcached: &'a str,
    pid: u32,
    commands: u64,
    cpu: Option<Duration>,
    memcached_cpu: Option<Duration>,
}

impl Around<'_> {
    pub fn start(memcached: &str, pid: u32) -> Around<'_> {
        reset_peak_rss(pid);
        Around {
            memcached,
            pid,
            commands: item_commands(&memcached_stats(memcached)),
            cpu: process_cpu(pid),
            memcached_cpu: MEMCACHED_PID.get().and_then(|&pid| process_cpu(pid)),
        }
    }

    /// Fill in `row`'s figures per call, and say the phase's rate.
    pub fn finish(self, row: &mut Row) {
        row.cpu_us_per_call = per_call(self.cpu, process_cpu(self.pid), row.calls);
        row.memcached_cpu_us_per_call = per_call(
            self.memcached_cpu,
            MEMCACHED_PID.get().and_then(|&pid| process_cpu(pid)),
            row.calls,
        );
        row.peak_rss_kib = peak_rss_kib(self.pid);
        let after = item_commands(&memcached_stats(self.memcached));
        row.commands_per_call = Some((after - self.commands) as f64 / row.calls.max(1) as f64);
        eprintln!(
            "{:<45} {:>10.0} checks/s",
            format!("{} ({})", row.name, row.concurrency),
            row.rate()
        );
    }
}

/// CPU microseconds per call between two readings.
pub fn per_call(before: Option<Duration>, after: Option<Duration>, calls: u64) -> Option<f64> {
    let spent = after?.checked_sub(before?)?;
    Some(spent.as_secs_f64() * 1e6 / calls.max(1) as f64)
}

/// CPU time (user + system) that `pid` has used so far.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / per_second))
}

/// The table, as Markdown.
pub fn table(rows: &[(Row, Option<(&str, f64)>)]) -> String {
    let mut out = String::from(
        "| phase | concurrency | checks/s | p50 µs | p99 µs | p99.9 µs | memcached cmds/check | ratio | CPU µs/check | memcached CPU µs/check | peak RSS MiB |\n\
         |---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    for (row, ratio) in rows {
        let commands = row
            .commands_per_call
            .map_or("-".to_owned(), |c| format!("{c:.2}"));
        let ratio = ratio.map_or("-".to_owned(), |(to, r)| format!("{r:.2}x {to}"));
        let rss = row
            .peak_rss_kib
            .map_or("-".to_owned(), |kib| format!("{:.1}", kib as f64 / 1024.0));
        let cpu = row
            .cpu_us_per_call
            .map_or("-".to_owned(), |us| format!("{us:.1}"));
        let memcached_cpu = row
            .memcached_cpu_us_per_call
            .map_or("-".to_owned(), |us| format!("{us:.1}"));
        let unexpected = if row.unexpected > 0 {
            format!(" ({} unexpected)", row.unexpected)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "| {}{unexpected} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {commands} | {ratio} | {cpu} | {memcached_cpu} | {rss} |\n",
            row.name,
            row.concurrency,
            row.rate(),
            row.p50,
            row.p99,
            row.p999,
        ));
    }
    out
}
