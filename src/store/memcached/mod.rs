//! The Memcached store, on the meta protocol (memcached >= 1.6, every
//! supported ElastiCache engine).
//!
//! A batch goes out as one pipelined write: an `mg <key> v` per counter read
//! and an `ma <key> N<ttl> J<n> D<n> v` per addition, which creates a missing
//! counter holding `n` (auto-vivify) or adds `n` atomically, and answers the
//! value after. Every counter of one key lives on one node (routing is on
//! the key digest), so a batch is one round trip. With replicas
//! (`memcached.replicas`), on each of the key's N nodes of highest score,
//! asked at once: still one round trip in time (see `exchange`).
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the [`Store`] impl: a batch in, counts out; readiness node by node |
//! | `exchange` | a batch on one node, or on every replica: who decides, the tries of replicas that disagree, read repair |
//! | `repair` | which replicas may hold less than they should, and raising them (read repair) |
//! | `fanout` | take-backs and resets on every replica, and what their answers come to |
//! | `readiness` | every node pinged at once: ready while any answers (with replicas, while every key keeps one); one round in flight, its answer shared and reused while the connections stay as they were |
//! | `options` | how to reach Memcached: servers or discovery, TLS, namespace, timeout, drain bound, connections |
//! | `topology` | the node list in use, swapped whole, and its snapshot for metrics and `/readyz` |
//! | `conn` | multiplexed, pipelined connections: queue, reader, slots, the drain of a stalled one, and the overdue/stall/extra policy |
//! | `dial` | plain TCP or TLS (rustls) connections |
//! | [`discovery`] | ElastiCache Auto Discovery: `config get cluster`, polled |
//! | [`wire`] | keys, meta commands and replies as bytes, no I/O |
//! | [`route`] | the rendezvous hash that picks a key's node, and its replicas |
//! | [`clock`] | the shared clock: the first node's second, watched as it ticks |

pub mod clock;
mod conn;
mod dial;
pub mod discovery;
mod exchange;
mod fanout;
mod options;
mod readiness;
mod repair;
pub mod route;
mod topology;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use self::conn::ConnectionStates;
use self::conn::{Commands, Delivery, Settings};
use self::dial::Dialer;
use self::topology::ReplicaNodes;
use self::wire::{Command, Reply};
use super::{BatchCounts, CounterBatch, CounterKey, Readiness, Store, StoreError, Values};
use crate::join::join_all;
use crate::policy::{PLAIN_NAME_RULE, is_plain_name};

pub use self::clock::MemcachedClock;
pub use self::dial::{TlsOptions, check_tls};
pub use self::options::{DEFAULT_DRAIN_TIMEOUT, DEFAULT_QUEUE_DEPTH, MemcachedOptions};
pub use self::readiness::READINESS_REUSE;
pub use self::route::DigestRendezvous;
pub(crate) use self::topology::{DiscoveryStatus, Topology, TopologyCell};
pub use self::topology::{NodeSnapshot, TopologySnapshot, TopologySource};

pub struct MemcachedStore {
    cell: Arc<TopologyCell>,
    namespace: String,
    timeout: Duration,
    /// `/readyz`'s rounds of pings, shared by every caller.
    probes: Arc<readiness::Probes>,
    /// On how many nodes each counter lives.
    replicas: usize,
    discovery: Option<(String, tokio::task::JoinHandle<()>)>,
}

impl Drop for MemcachedStore {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.discovery {
            task.abort();
        }
    }
}

impl MemcachedStore {
    /// Start the connections to every server, or the discovery of the node
    /// list. Connections are dialled in the background, so a server (or an
    /// endpoint) that is down now does not stop the start;
    /// [`ping`](Store::ping) tells whether the store answers.
    pub async fn connect(options: &MemcachedOptions) -> Result<MemcachedStore, StoreError> {
        if !is_plain_name(&options.namespace) {
            return Err(StoreError::Protocol(format!(
                "namespace {:?} must be {PLAIN_NAME_RULE}",
                options.namespace
            )));
        }
        if options.servers.is_empty() && options.discovery.is_none() {
            return Err(StoreError::Unreachable("no server given".to_owned()));
        }
        check_replicas(options)?;
        let timeout = crate::store::bounded_timeout(options.timeout);
        let connect_timeout = timeout.max(Duration::from_secs(1));
        let dialer = Arc::new(
            Dialer::new(connect_timeout, options.tls.as_ref()).map_err(StoreError::Protocol)?,
        );
        let settings = Arc::new(Settings {
            namespace: Arc::from(options.namespace.as_str()),
            connections: options.connections.max(1),
            queue_depth: options.queue_depth.max(1),
            overdue_after: timeout,
            stall_timeout: (timeout * 20).max(Duration::from_secs(1)),
            drain_timeout: options.drain_timeout.min(crate::store::MAX_TIMEOUT),
        });
        let topology = match &options.discovery {
            Some(_) => Topology::empty(),
            None => Topology::of_servers(&options.servers, &dialer, &settings),
        };
        let cell = Arc::new(TopologyCell {
            current: ArcSwap::from_pointee(topology),
            dialer: dialer.clone(),
            settings,
            status: DiscoveryStatus::default(),
        });
        let discovery = options.discovery.as_ref().map(|endpoint| {
            let task = tokio::spawn(discovery::run(
                endpoint.clone(),
                options.discovery_interval,
                connect_timeout,
                dialer,
                Arc::downgrade(&cell),
            ));
            (endpoint.clone(), task)
        });
        Ok(MemcachedStore {
            cell,
            namespace: options.namespace.clone(),
            timeout,
            probes: Arc::default(),
            replicas: options.replicas,
            discovery,
        })
    }

    /// The Memcached key of a counter.
    pub fn wire_key(&self, counter: &CounterKey) -> String {
        wire::key_string(&self.namespace, counter)
    }

    /// The node list in use, its connections and discovery's counters.
    pub fn topology(&self) -> TopologySnapshot {
        self.topology_source().snapshot()
    }

    pub fn topology_source(&self) -> TopologySource {
        TopologySource(self.cell.clone())
    }

    /// The `host:port` of the node that holds `digest`'s counters now.
    pub fn node_name_of(&self, digest: &super::KeyDigest) -> Option<String> {
        let topology = self.cell.load();
        (!topology.nodes.is_empty()).then(|| {
            topology.names[DigestRendezvous::pick_digest(digest, &topology.node_hashes)].clone()
        })
    }

    /// The `host:port` of each node that holds `digest`'s counters now,
    /// highest score first (one without replicas).
    pub fn replica_names_of(&self, digest: &super::KeyDigest) -> Vec<String> {
        let topology = self.cell.load();
        DigestRendezvous::replicas_of_digest(digest, &topology.node_hashes, self.replicas)
            .into_iter()
            .map(|at| topology.names[at].clone())
            .collect()
    }

    /// On how many nodes each counter lives.
    pub fn replicas(&self) -> usize {
        self.replicas
    }

    /// The replicas of a key's counters, highest score first.
    fn replicas_of(&self, digest: &super::KeyDigest) -> Result<ReplicaNodes, StoreError> {
        self.cell
            .replicas_for(digest, self.replicas)
            .ok_or_else(|| self.no_nodes())
    }

    /// The replicas of `counters`, which must all be one key's.
    fn replicas_for_counters(&self, counters: &[CounterKey]) -> Result<ReplicaNodes, StoreError> {
        let Some(first) = counters.first() else {
            return Err(unexpected("an empty batch"));
        };
        if counters
            .iter()
            .any(|counter| counter.digest != first.digest)
        {
            return Err(unexpected("a batch must hold the counters of one key"));
        }
        self.replicas_of(&first.digest)
    }

    fn no_nodes(&self) -> StoreError {
        match &self.discovery {
            Some((endpoint, _)) => StoreError::Unreachable(format!(
                "no Memcached node known yet: discovery at {endpoint} has not answered"
            )),
            None => StoreError::Unreachable("no server given".to_owned()),
        }
    }
}

impl Store for MemcachedStore {
    async fn read_and_add(&self, batch: &CounterBatch) -> Result<BatchCounts, StoreError> {
        let digest = match (batch.reads.first(), batch.adds.first()) {
            (Some(first), _) | (None, Some(first)) => first.digest,
            (None, None) => {
                return Ok(BatchCounts {
                    read: Values::new(),
                    added: Values::new(),
                });
            }
        };
        // Every counter of a batch is one key's: they live on the same
        // node (or replicas).
        if batch
            .reads
            .iter()
            .chain(&batch.adds)
            .any(|counter| counter.digest != digest)
        {
            return Err(unexpected("a batch must hold the counters of one key"));
        }
        let nodes = self.replicas_of(&digest)?;
        match &nodes[..] {
            [node] => Self::exchange_one(node, batch).await,
            // Boxed: its tries and read repair would otherwise make every
            // check's future (moved whole at each level) the size of its
            // own, replicas or not.
            _ => Box::pin(self.exchange_replicated(&nodes, batch)).await,
        }
    }

    /// Sent to every replica; each counter's highest value after.
    async fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        _now_ms: u64,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let nodes = self.replicas_for_counters(counters)?;
        // A rollback is sent even if its caller stops waiting: the
        // addition it takes back has certainly happened.
        let calls = nodes
            .iter()
            .map(|node| node.call(exchange::take_back_of(counters, amount), Delivery::Always))
            .collect();
        fanout::highest_after(join_all(calls).await, counters.len())
    }

    /// Every key's rollback, grouped by node: one exchange per node carries
    /// all of its subtractions (each key's on each of its replicas),
    /// however many keys a refused request had.
    async fn subtract_many<'a>(
        &'a self,
        takes: &'a [(&'a [CounterKey], u64)],
        _now_ms: u64,
    ) -> Vec<Result<Vec<Option<u64>>, StoreError>> {
        self.subtract_grouped(takes).await
    }

    /// Sent to every replica: a reset leaves no copy to be read back.
    async fn remove(&self, counters: &[CounterKey], _now_ms: u64) -> Result<usize, StoreError> {
        if counters.is_empty() {
            return Ok(0);
        }
        let nodes = self.replicas_for_counters(counters)?;
        let commands: Commands = counters.iter().copied().map(Command::Remove).collect();
        // Sent even if the caller stops waiting: an operator who asked for
        // a reset wants it done, and a delete done twice is done once.
        let calls = nodes
            .iter()
            .map(|node| node.call(commands.clone(), Delivery::Always))
            .collect();
        fanout::most_removed(join_all(calls).await)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.readiness().await.result
    }

    /// Every node pinged at once; ready while any answers. Callers share
    /// the pings, so a flood of them costs a bounded number (see
    /// `readiness.rs`).
    async fn readiness(&self) -> Readiness {
        self.shared_readiness().await
    }

    fn kind(&self) -> &'static str {
        "memcached"
    }

    /// A counted call's deadline is kept by its connection slot's sweep.
    fn keeps_deadlines(&self) -> bool {
        true
    }
}

/// A batch's counts from its replies: its reads', then its additions'.
pub(super) fn batch_counts(read: &[Reply], added: &[Reply]) -> Result<BatchCounts, StoreError> {
    // Pushed one by one: collected through `Result`, the two lists cost a
    // lone check 180 instructions.
    let mut counts = BatchCounts {
        read: Values::new(),
        added: Values::new(),
    };
    for reply in read {
        counts.read.push(match reply {
            Reply::Value(value) => *value,
            Reply::Missing => 0,
            other => return Err(failed(other)),
        });
    }
    for reply in added {
        counts.added.push(match reply {
            Reply::Value(value) => *value,
            other => return Err(failed(other)),
        });
    }
    Ok(counts)
}

/// Replicas from 1 to [`route::MAX_REPLICAS`], and no more than the
/// servers given (discovery's list may grow or shrink: a key then has as
/// many as there are nodes, up to the number asked).
fn check_replicas(options: &MemcachedOptions) -> Result<(), StoreError> {
    let replicas = options.replicas;
    if !(1..=route::MAX_REPLICAS).contains(&replicas) {
        return Err(StoreError::Protocol(format!(
            "replicas must be from 1 to {}, got {replicas}",
            route::MAX_REPLICAS
        )));
    }
    let distinct = options
        .servers
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if options.discovery.is_none() && replicas > distinct {
        return Err(StoreError::Protocol(format!(
            "replicas ({replicas}) must not be more than the servers given ({distinct})"
        )));
    }
    Ok(())
}

pub(super) fn failed(reply: &Reply) -> StoreError {
    match reply {
        Reply::Failed(message) => StoreError::Protocol(message.clone()),
        other => StoreError::Protocol(format!("unexpected answer {other:?}")),
    }
}

fn unexpected(what: &str) -> StoreError {
    StoreError::Protocol(what.to_owned())
}
