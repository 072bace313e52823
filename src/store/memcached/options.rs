//! How to reach Memcached: the options a [`MemcachedStore`](super::MemcachedStore)
//! connects with.

use std::time::Duration;

use super::TlsOptions;
use crate::store::{DEFAULT_CONNECTIONS, DEFAULT_DISCOVERY_INTERVAL};

/// Requests that may wait for one connection before calls fail at once.
pub const DEFAULT_QUEUE_DEPTH: usize = 4096;

/// How long a connection given up as stalled still reads its late replies
/// when nothing else is set: a node frozen this long (stopped, swapping, a
/// paused VM) still has the additions it applied for nobody taken back.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach Memcached.
#[derive(Clone, Debug)]
pub struct MemcachedOptions {
    /// `host:port` of each server (ignored when `discovery` is set).
    pub servers: Vec<String>,
    /// An ElastiCache configuration endpoint (`host:port`): the node list
    /// comes from it and follows its changes, instead of `servers`.
    pub discovery: Option<String>,
    /// How often to ask the configuration endpoint.
    pub discovery_interval: Duration,
    /// Encryption in transit: every connection, the discovery endpoint's
    /// included, is TLS, and a certificate that does not verify is a store
    /// failure, never a fallback to plaintext.
    pub tls: Option<TlsOptions>,
    /// Prefix of every key, so several deployments can share a cluster.
    pub namespace: String,
    /// The limiter's bound on each call. The store uses it for `ping`; a
    /// connection whose oldest reply is later than it is overdue and takes
    /// no new requests; and one 20 times as late (at least a second) is
    /// given up as stalled. Held within 1 ms and an hour
    /// ([`bounded_timeout`](crate::store::bounded_timeout)).
    pub timeout: Duration,
    /// How long a connection given up as stalled, that owes an addition,
    /// still reads its late replies, so that what a frozen node applies
    /// once it runs again, for callers told it was not counted, is taken
    /// back. Past it the connection closes, and what it still owes stays
    /// counted if it was applied (erring towards refusing). Zero closes a
    /// stalled connection at once. Held to an hour.
    pub drain_timeout: Duration,
    /// Multiplexed connections per server. Each carries any number of
    /// concurrent requests, so a few are enough. While every one of a
    /// node's connections is overdue, up to as many extra ones are dialled.
    pub connections: usize,
    /// Requests that may wait for one connection; past it a call fails at
    /// once (a store error: the failure mode decides) instead of queueing
    /// without bound.
    pub queue_depth: usize,
    /// On how many nodes each counter lives (1 to
    /// [`MAX_REPLICAS`](super::route::MAX_REPLICAS), and no more than the
    /// servers given): the nodes of its key's highest rendezvous scores.
    /// A check adds to each in the same round trip and the highest count
    /// decides, so a node that dies or comes back empty costs no key its
    /// count while another replica answers.
    pub replicas: usize,
}

impl Default for MemcachedOptions {
    fn default() -> MemcachedOptions {
        MemcachedOptions {
            servers: vec!["127.0.0.1:11211".to_owned()],
            discovery: None,
            discovery_interval: DEFAULT_DISCOVERY_INTERVAL,
            tls: None,
            namespace: "sg".to_owned(),
            timeout: Duration::from_millis(50),
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            connections: DEFAULT_CONNECTIONS,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            replicas: 1,
        }
    }
}
