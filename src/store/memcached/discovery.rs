//! ElastiCache Auto Discovery: the node list of a cluster, asked of its
//! configuration endpoint with `config get cluster` (engines before 1.4.14:
//! `get AmazonElastiCache:cluster`), polled, and swapped in when its
//! version rises.
//!
//! The reply, as AWS documents it:
//!
//! ```text
//! CONFIG cluster 0 147\r\n
//! 12\n
//! host1|10.82.235.120|11211 host2|10.80.249.27|11211\n
//! \r\n
//! END\r\n
//! ```
//!
//! A poll that fails, a version that is not higher, an empty node list or a
//! malformed reply all keep the node list the store has.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Dialer, Topology, TopologyCell};

/// The command of engines from 1.4.14 on.
const CONFIG_GET: &[u8] = b"config get cluster\r\n";
/// The command of older engines, which keep the config as an item.
const LEGACY_GET: &[u8] = b"get AmazonElastiCache:cluster\r\n";
/// The longest reply accepted: a config of hundreds of nodes is a few KiB.
const MAX_REPLY: usize = 1024 * 1024;

/// One node of a cluster config: `host|ip|port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEntry {
    pub host: String,
    pub ip: String,
    pub port: u16,
}

impl NodeEntry {
    /// Where to connect: the IP when the config gives one (no DNS lookup
    /// per dial), else the host name.
    pub fn dial_addr(&self) -> String {
        let at = if self.ip.is_empty() {
            &self.host
        } else {
            &self.ip
        };
        join_host_port(at, self.port)
    }

    /// The node's identity for routing: its host name, which outlives an IP
    /// change, so a replaced node keeps its keys.
    pub fn name(&self) -> String {
        let host = if self.host.is_empty() {
            &self.ip
        } else {
            &self.host
        };
        join_host_port(host, self.port)
    }

    /// The name a TLS certificate must carry: ElastiCache's name hosts.
    pub fn server_name(&self) -> &str {
        if self.host.is_empty() {
            &self.ip
        } else {
            &self.host
        }
    }
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A cluster config: its version and its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    pub version: u64,
    pub nodes: Vec<NodeEntry>,
}

/// What the endpoint answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Config(ClusterConfig),
    /// The engine does not know `config get`: ask the legacy way.
    UnknownCommand,
}

/// Parse a whole reply. `Ok(None)`: more bytes are needed.
pub fn parse_reply(bytes: &[u8]) -> Result<Option<Answer>, String> {
    let Some(line_end) = find(bytes, b"\r\n") else {
        return if bytes.len() > 1024 {
            Err("no line end in the first KiB".to_owned())
        } else {
            Ok(None)
        };
    };
    let header =
        std::str::from_utf8(&bytes[..line_end]).map_err(|_| "the header is not text".to_owned())?;
    if header == "ERROR" || header.starts_with("CLIENT_ERROR") {
        return Ok(Some(Answer::UnknownCommand));
    }
    if header == "END" {
        return Err("the endpoint holds no cluster config".to_owned());
    }
    let words: Vec<&str> = header.split(' ').collect();
    let length = match words.as_slice() {
        ["CONFIG", "cluster", _flags, length] => length,
        ["VALUE", "AmazonElastiCache:cluster", _flags, length] => length,
        _ => return Err(format!("unexpected header {header:?}")),
    };
    let length: usize = length
        .parse()
        .map_err(|_| format!("bad length in header {header:?}"))?;
    // Said now, not after waiting for bytes that no reply may hold (and
    // never added to an offset: a length near usize::MAX overflowed).
    if length > MAX_REPLY {
        return Err(format!(
            "a length over {MAX_REPLY} bytes in header {header:?}"
        ));
    }
    let body_start = line_end + 2;
    let Some(body) = bytes.get(body_start..body_start + length) else {
        return Ok(None);
    };
    // The documented reply ends its data with "\n\r\n" and counts only
    // the data; accept a count that includes the CRLF too.
    let rest = &bytes[body_start + length..];
    for trailer in [&b"\r\nEND\r\n"[..], b"END\r\n"] {
        if rest.starts_with(trailer) {
            return parse_body(body).map(|config| Some(Answer::Config(config)));
        }
        if trailer.starts_with(rest) {
            return Ok(None);
        }
    }
    Err("the config does not end with END".to_owned())
}

/// The body: the version on one line, then the nodes, space separated.
pub fn parse_body(body: &[u8]) -> Result<ClusterConfig, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the config is not text".to_owned())?;
    let mut lines = text.split('\n').map(|line| line.trim_end_matches('\r'));
    let version_line = lines.next().unwrap_or_default().trim();
    let version: u64 = version_line
        .parse()
        .map_err(|_| format!("bad config version {version_line:?}"))?;
    let nodes_line = lines.next().unwrap_or_default();
    if let Some(extra) = lines.find(|line| !line.trim().is_empty()) {
        return Err(format!("unexpected line after the nodes: {extra:?}"));
    }
    let nodes = nodes_line
        .split_whitespace()
        .map(|entry| {
            let parts: Vec<&str> = entry.split('|').collect();
            let [host, ip, port] = parts.as_slice() else {
                return Err(format!("node {entry:?} is not host|ip|port"));
            };
            if host.is_empty() && ip.is_empty() {
                return Err(format!("node {entry:?} has neither host nor ip"));
            }
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|port| *port > 0)
                .ok_or_else(|| format!("node {entry:?} has a bad port"))?;
            Ok(NodeEntry {
                host: (*host).to_owned(),
                ip: (*ip).to_owned(),
                port,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ClusterConfig { version, nodes })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Why a poll brought no config.
enum PollError {
    /// The endpoint could not be reached, or did not answer in time.
    Failed(String),
    /// It answered something that is not a cluster config.
    Malformed(String),
}

/// Ask the endpoint once, within `timeout`.
async fn ask(
    endpoint: &str,
    legacy: bool,
    dialer: &Dialer,
    timeout: Duration,
) -> Result<Answer, PollError> {
    let exchange = async {
        let mut stream = dialer
            .dial(endpoint, None)
            .await
            .map_err(PollError::Failed)?;
        let command = if legacy { LEGACY_GET } else { CONFIG_GET };
        stream
            .write_all(command)
            .await
            .map_err(|error| PollError::Failed(format!("write to {endpoint}: {error}")))?;
        let mut reply = Vec::with_capacity(4096);
        loop {
            if let Some(answer) = parse_reply(&reply).map_err(PollError::Malformed)? {
                return Ok(answer);
            }
            if reply.len() > MAX_REPLY {
                return Err(PollError::Malformed(format!(
                    "a reply over {MAX_REPLY} bytes"
                )));
            }
            let read = stream
                .read_buf(&mut reply)
                .await
                .map_err(|error| PollError::Failed(format!("read from {endpoint}: {error}")))?;
            if read == 0 {
                return Err(PollError::Failed(format!(
                    "{endpoint} closed the connection mid-reply"
                )));
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(PollError::Failed(format!(
                "no reply from {endpoint} within {timeout:?}"
            )))
        })
}

/// Poll `endpoint` every `interval` until the store is dropped, swapping
/// in every config whose version is higher than the one in use.
pub(super) async fn run(
    endpoint: String,
    interval: Duration,
    timeout: Duration,
    dialer: Arc<Dialer>,
    cell: Weak<TopologyCell>,
) {
    let mut legacy = false;
    loop {
        let answer = ask(&endpoint, legacy, &dialer, timeout).await;
        let Some(cell) = cell.upgrade() else {
            return;
        };
        match answer {
            Ok(Answer::UnknownCommand) if !legacy => {
                tracing::info!(%endpoint, "`config get cluster` refused: asking `get AmazonElastiCache:cluster`");
                legacy = true;
                continue;
            }
            Ok(Answer::UnknownCommand) => {
                // Refused both ways: the `ERROR` that sent us to the legacy
                // command may have passed (a proxy, an engine mid-upgrade),
                // so the next poll asks `config get` again rather than stay
                // on a command this endpoint refuses.
                legacy = false;
                cell.status.poll(PollResult::Malformed);
                tracing::warn!(%endpoint, "the endpoint refuses both discovery commands");
            }
            Ok(Answer::Config(config)) => apply(&cell, config, &endpoint),
            Err(PollError::Malformed(error)) => {
                cell.status.poll(PollResult::Malformed);
                tracing::warn!(%endpoint, %error, "malformed cluster config; keeping the node list");
            }
            Err(PollError::Failed(error)) => {
                cell.status.poll(PollResult::Failed);
                tracing::warn!(%endpoint, %error, "discovery poll failed; keeping the node list");
            }
        }
        drop(cell);
        tokio::time::sleep(interval).await;
    }
}

fn apply(cell: &TopologyCell, config: ClusterConfig, endpoint: &str) {
    let current = cell.load();
    if config.nodes.is_empty() {
        cell.status.poll(PollResult::Ignored);
        tracing::warn!(%endpoint, version = config.version, "cluster config lists no node; keeping the node list");
        return;
    }
    if let Some(version) = current.version
        && config.version <= version
    {
        cell.status.poll(PollResult::Ignored);
        if config.version < version {
            tracing::warn!(%endpoint, seen = config.version, in_use = version, "cluster config version went back; keeping the node list");
        }
        return;
    }
    let next = Topology::following(&current, &config, &cell.dialer, &cell.settings);
    tracing::info!(
        %endpoint,
        version = config.version,
        nodes = ?next.names,
        "cluster config applied"
    );
    cell.store(next);
    cell.status.poll(PollResult::Applied);
}

/// How a poll ended, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollResult {
    Applied,
    /// Not newer, or no node: the list in use stays.
    Ignored,
    Malformed,
    Failed,
}

impl PollResult {
    pub const ALL: [PollResult; 4] = [
        PollResult::Applied,
        PollResult::Ignored,
        PollResult::Malformed,
        PollResult::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PollResult::Applied => "applied",
            PollResult::Ignored => "ignored",
            PollResult::Malformed => "malformed",
            PollResult::Failed => "failed",
        }
    }
}

#[cfg(test)]
mod tests;
