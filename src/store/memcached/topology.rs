//! The nodes in use: the topology that routing reads whole and discovery
//! swaps whole, and what the metrics and `/readyz` are told of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::conn::{ConnectionStates, Node, Settings, Target};
use super::dial::Dialer;
use super::discovery::{ClusterConfig, PollResult};
use super::route::{self, DigestRendezvous};
use crate::store::KeyDigest;

/// A key's replicas, highest score first.
pub(super) type ReplicaNodes = smallvec::SmallVec<[Arc<Node>; route::MAX_REPLICAS]>;

/// The nodes in use, in one consistent piece: routing reads it whole.
pub(crate) struct Topology {
    pub(super) nodes: Vec<Arc<Node>>,
    /// Each node's identity (`host:port`), in `nodes` order.
    pub(super) names: Vec<String>,
    /// Each node's part of the rendezvous score, in `nodes` order.
    pub(super) node_hashes: Vec<u64>,
    /// The cluster config version it came from (discovery only).
    pub(super) version: Option<u64>,
}

impl Topology {
    pub(super) fn empty() -> Topology {
        Topology {
            nodes: Vec::new(),
            names: Vec::new(),
            node_hashes: Vec::new(),
            version: None,
        }
    }

    pub(super) fn of_servers(
        servers: &[String],
        dialer: &Arc<Dialer>,
        settings: &Arc<Settings>,
    ) -> Topology {
        let mut topology = Topology::empty();
        for server in servers {
            let target = Target {
                addr: server.clone(),
                server_name: None,
            };
            topology.push(
                server.clone(),
                Node::spawn(target, settings.clone(), dialer.clone()).into(),
            );
        }
        topology
    }

    /// The topology of `config`: nodes it keeps stay as they are (their
    /// connections and in-flight requests untouched), new ones are dialled,
    /// and removed ones close once their last caller is done with them.
    pub(super) fn following(
        current: &Topology,
        config: &ClusterConfig,
        dialer: &Arc<Dialer>,
        settings: &Arc<Settings>,
    ) -> Topology {
        let mut next = Topology::empty();
        next.version = Some(config.version);
        for entry in &config.nodes {
            let name = entry.name();
            if next.names.contains(&name) {
                continue;
            }
            let target = Target {
                addr: entry.dial_addr(),
                server_name: Some(entry.server_name().to_owned()),
            };
            let known = current.names.iter().position(|known| *known == name);
            let node = match known.map(|at| &current.nodes[at]) {
                Some(node) if *node.target() == target => node.clone(),
                // Replaced by ElastiCache: same name (so the same share of
                // keys), new address. The old connections close once their
                // last caller is done with them.
                Some(node) => {
                    tracing::warn!(node = %name, from = %node.target().addr, to = %target.addr, "memcached node moved; dialling its new address");
                    let moved = Arc::new(node.moved(target, settings.clone(), dialer.clone()));
                    moved.doubt();
                    moved
                }
                None => {
                    let node = Arc::new(Node::spawn(target, settings.clone(), dialer.clone()));
                    // A node that joins a list in use takes over keys it
                    // holds no count of; the first list is believed.
                    if !current.nodes.is_empty() {
                        node.doubt();
                    }
                    node
                }
            };
            next.push(name, node);
        }
        next
    }

    pub(super) fn push(&mut self, name: String, node: Arc<Node>) {
        self.node_hashes.push(route::node_hash(&name));
        self.names.push(name);
        self.nodes.push(node);
    }
}

/// The topology in use, swapped whole when discovery finds a newer one.
pub(crate) struct TopologyCell {
    pub(super) current: ArcSwap<Topology>,
    pub(super) dialer: Arc<Dialer>,
    pub(super) settings: Arc<Settings>,
    pub(super) status: DiscoveryStatus,
}

impl TopologyCell {
    pub(super) fn load(&self) -> Arc<Topology> {
        self.current.load_full()
    }

    /// The nodes that hold a key's counters with `replicas` copies, highest
    /// score first (fewer when fewer nodes are known); `None` with no node
    /// known. The hot path of every call: the topology is borrowed, not
    /// locked or counted (a read lock's count, like an `Arc`'s, is a line
    /// both cores write on every call); only the nodes' handles are cloned.
    pub(super) fn replicas_for(&self, digest: &KeyDigest, replicas: usize) -> Option<ReplicaNodes> {
        let topology = self.current.load();
        if topology.nodes.is_empty() {
            return None;
        }
        if replicas == 1 {
            // Without replicas (the default), every check: the one node,
            // with no list of indices made and collected.
            let at = DigestRendezvous::pick_digest(digest, &topology.node_hashes);
            let mut one = ReplicaNodes::new();
            one.push(topology.nodes[at].clone());
            return Some(one);
        }
        Some(
            DigestRendezvous::replicas_of_digest(digest, &topology.node_hashes, replicas)
                .into_iter()
                .map(|at| topology.nodes[at].clone())
                .collect(),
        )
    }

    /// Use `topology` from now on. A node it no longer has is kept until
    /// it owes nothing (see [`Node::keep_until_it_owes_nothing`]), at most
    /// until a reply would count as stalled and its connection's drain
    /// ran out, and a little more.
    pub(super) fn store(&self, topology: Topology) {
        let left: Vec<Arc<Node>> = self
            .current
            .load()
            .nodes
            .iter()
            .filter(|node| !topology.nodes.iter().any(|kept| Arc::ptr_eq(kept, node)))
            .cloned()
            .collect();
        self.current.store(Arc::new(topology));
        let within =
            self.settings.stall_timeout + self.settings.drain_timeout + Duration::from_secs(1);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            for node in left {
                runtime.spawn(node.keep_until_it_owes_nothing(within));
            }
        }
    }
}

/// Discovery's counters, for the metrics.
#[derive(Default)]
pub(crate) struct DiscoveryStatus {
    pub(super) polls: [AtomicU64; 4],
}

impl DiscoveryStatus {
    pub(super) fn poll(&self, result: PollResult) {
        self.polls[result as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// What the store is connected to now, for the metrics and `/readyz`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologySnapshot {
    pub nodes: Vec<NodeSnapshot>,
    /// The cluster config version in use (discovery only).
    pub version: Option<u64>,
    /// Discovery polls by result (`applied`, `ignored`, `malformed`,
    /// `failed`).
    pub polls: Vec<(&'static str, u64)>,
    pub tls: bool,
    /// TLS handshakes that failed, the discovery endpoint's included.
    pub tls_failures: u64,
}

/// One node's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSnapshot {
    /// `host:port`, from the configuration or the cluster config.
    pub name: String,
    /// Where its connections are dialled (the address discovery gave).
    pub addr: String,
    /// Its connections by state (ready, overdue, down, draining).
    pub states: ConnectionStates,
    /// Its redials by reason (`failed`, `stalled`, `overdue`, `moved`).
    pub redials: Vec<(&'static str, u64)>,
    /// Counted requests taken back from a reply that came after their
    /// connection was given up as stalled.
    pub late_take_backs: u64,
    /// Counted requests whose reply never came, their connection ended
    /// first: what they added, if applied, stays counted.
    pub lost_replies: u64,
}

impl NodeSnapshot {
    /// Connections open now: ready, overdue, or draining.
    pub fn live(&self) -> usize {
        self.states.ready + self.states.overdue + self.states.draining
    }
}

/// A handle on the store's topology that outlives borrowing the store:
/// what a metrics collector reads at each scrape.
#[derive(Clone)]
pub struct TopologySource(pub(super) Arc<TopologyCell>);

impl std::fmt::Debug for TopologySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TopologySource")
            .field(&self.snapshot())
            .finish()
    }
}

impl TopologySource {
    pub fn snapshot(&self) -> TopologySnapshot {
        let cell = &self.0;
        let topology = cell.load();
        TopologySnapshot {
            nodes: topology
                .names
                .iter()
                .zip(&topology.nodes)
                .map(|(name, node)| NodeSnapshot {
                    name: name.clone(),
                    addr: node.target().addr.clone(),
                    states: node.connection_states(),
                    redials: node.redials().to_vec(),
                    late_take_backs: node.late_replies().taken_back(),
                    lost_replies: node.late_replies().lost(),
                })
                .collect(),
            version: topology.version,
            polls: PollResult::ALL
                .iter()
                .map(|result| {
                    (
                        result.as_str(),
                        cell.status.polls[*result as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            tls: cell.dialer.is_tls(),
            tls_failures: cell.dialer.tls_failures(),
        }
    }
}
