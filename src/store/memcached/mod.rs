//! The Memcached store, on the meta protocol (memcached >= 1.6, every
//! supported ElastiCache engine).
//!
//! A batch goes out as one pipelined write: an `mg <key> v` per counter read
//! and an `ma <key> N<ttl> J<n> D<n> v` per addition, which creates a missing
//! counter holding `n` (auto-vivify) or adds `n` atomically, and answers the
//! value after. Every counter of one key lives on one node (routing is on
//! the key digest), so a batch is one round trip.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the [`Store`] impl: a batch in, counts out; readiness node by node |
//! | `readiness` | every node pinged at once: ready while any answers; one round in flight, its answer shared and reused while the connections stay as they were |
//! | `options` | how to reach Memcached: servers or discovery, TLS, namespace, timeout, drain bound, connections |
//! | `topology` | the node list in use, swapped whole, and its snapshot for metrics and `/readyz` |
//! | `conn` | multiplexed, pipelined connections: queue, reader, slots, the drain of a stalled one, and the overdue/stall/extra policy |
//! | `dial` | plain TCP or TLS (rustls) connections |
//! | [`discovery`] | ElastiCache Auto Discovery: `config get cluster`, polled |
//! | [`wire`] | keys, meta commands and replies as bytes, no I/O |
//! | [`route`] | the rendezvous hash that picks a key's node |
//! | [`clock`] | the shared clock: the first node's second, watched as it ticks |

pub mod clock;
mod conn;
mod dial;
pub mod discovery;
mod options;
mod readiness;
pub mod route;
mod topology;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use self::conn::ConnectionStates;
use self::conn::{Additions, Commands, Delivery, Node, Settings};
use self::dial::Dialer;
use self::wire::{Command, Reply};
use super::{
    BatchCounts, CounterBatch, CounterKey, Counters, Readiness, Store, StoreError, Values,
    bucket_ttl_secs,
};
use crate::join::start_now;
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

    /// The node that holds every counter of `counters`' key.
    fn node_of(&self, counters: &[CounterKey]) -> Result<Arc<Node>, StoreError> {
        let Some(first) = counters.first() else {
            return Err(unexpected("an empty batch"));
        };
        if counters
            .iter()
            .any(|counter| counter.digest != first.digest)
        {
            return Err(unexpected("a batch must hold the counters of one key"));
        }
        self.cell
            .node_for(&first.digest)
            .ok_or_else(|| self.no_nodes())
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
        let mut commands = Commands::new();
        commands.extend(batch.reads.iter().copied().map(Command::Read));
        commands.extend(batch.adds.iter().map(|&counter| Command::Add {
            counter,
            amount: batch.amount,
            ttl: wire::ttl(bucket_ttl_secs(counter.window), batch.now_ms),
        }));
        let node = match (batch.reads.first(), batch.adds.first()) {
            (Some(_), _) => self.node_of(&batch.reads)?,
            (None, Some(_)) => self.node_of(&batch.adds)?,
            (None, None) => {
                return Ok(BatchCounts {
                    read: Values::new(),
                    added: Values::new(),
                });
            }
        };
        if !batch.reads.is_empty() && !batch.adds.is_empty() {
            // Same node for both halves: one key.
            self.node_of(&[batch.reads[0], batch.adds[0]])?;
        }
        // An addition whose caller gives up after it was applied is taken
        // back, so Memcached counts only what was reported as counted.
        let additions = Additions {
            counters: &batch.adds,
            amount: batch.amount,
            first_reply: batch.reads.len(),
        };
        let replies = node
            .call_counted(commands, additions, batch.deadline)
            .await?;
        let (read, added) = replies.split_at(batch.reads.len().min(replies.len()));
        if read.len() != batch.reads.len() || added.len() != batch.adds.len() {
            return Err(unexpected("answers missing from a batch"));
        }
        let counts = batch_counts(read, added);
        if counts.is_err() {
            // One command failed (memcached refused it, or a counter holds
            // text): the check is not counted, so what its other commands
            // added is taken back. Started now and not waited for: the
            // caller gets its error as soon as it is known.
            let applied: Counters = batch
                .adds
                .iter()
                .zip(added)
                .filter(|(_, reply)| matches!(reply, Reply::Value(_)))
                .map(|(&counter, _)| counter)
                .collect();
            if !applied.is_empty() {
                start_now(self.subtract(&applied, batch.amount, batch.now_ms));
            }
        }
        counts
    }

    async fn subtract(
        &self,
        counters: &[CounterKey],
        amount: u64,
        _now_ms: u64,
    ) -> Result<Vec<Option<u64>>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let commands = counters
            .iter()
            .map(|&counter| Command::Subtract { counter, amount })
            .collect();
        // A rollback is sent even if its caller stops waiting: the
        // addition it takes back has certainly happened.
        let replies = self
            .node_of(counters)?
            .call(commands, Delivery::Always)
            .await?;
        replies.iter().map(subtracted).collect()
    }

    /// Every key's rollback, grouped by node: one exchange per node carries
    /// all of its subtractions, however many keys a refused request had.
    async fn subtract_many<'a>(
        &'a self,
        takes: &'a [(&'a [CounterKey], u64)],
        _now_ms: u64,
    ) -> Vec<Result<Vec<Option<u64>>, StoreError>> {
        let mut results: Vec<Option<Result<Vec<Option<u64>>, StoreError>>> =
            takes.iter().map(|_| None).collect();
        // (node, the takes it carries, in order)
        let mut groups: Vec<(Arc<Node>, Vec<usize>)> = Vec::new();
        for (at, &(counters, _)) in takes.iter().enumerate() {
            if counters.is_empty() {
                results[at] = Some(Ok(Vec::new()));
                continue;
            }
            match self.node_of(counters) {
                Ok(node) => match groups
                    .iter_mut()
                    .find(|(known, _)| Arc::ptr_eq(known, &node))
                {
                    Some((_, members)) => members.push(at),
                    None => groups.push((node, vec![at])),
                },
                Err(error) => results[at] = Some(Err(error)),
            }
        }
        let calls = groups
            .iter()
            .map(|(node, members)| {
                let commands: Commands = members
                    .iter()
                    .flat_map(|&at| {
                        let (counters, amount) = takes[at];
                        counters
                            .iter()
                            .map(move |&counter| Command::Subtract { counter, amount })
                    })
                    .collect();
                // Sent even if the caller stops waiting, like every rollback.
                node.call(commands, Delivery::Always)
            })
            .collect();
        let answers = crate::join::join_all(calls).await;
        for ((_, members), answer) in groups.iter().zip(answers) {
            let mut replies = answer.as_ref().map(|replies| replies.iter());
            for &at in members {
                let wanted = takes[at].0.len();
                results[at] = Some(match &mut replies {
                    Ok(replies) => replies
                        .by_ref()
                        .take(wanted)
                        .map(subtracted)
                        .collect::<Result<Vec<_>, _>>()
                        .and_then(|values| {
                            (values.len() == wanted)
                                .then_some(values)
                                .ok_or_else(|| unexpected("answers missing from a rollback"))
                        }),
                    Err(error) => Err(error.clone()),
                });
            }
        }
        results
            .into_iter()
            .map(|result| result.unwrap_or_else(|| Err(unexpected("a rollback was not sent"))))
            .collect()
    }

    async fn remove(&self, counters: &[CounterKey], _now_ms: u64) -> Result<usize, StoreError> {
        if counters.is_empty() {
            return Ok(0);
        }
        let commands = counters.iter().copied().map(Command::Remove).collect();
        // Sent even if the caller stops waiting: an operator who asked for
        // a reset wants it done, and a delete done twice is done once.
        let replies = self
            .node_of(counters)?
            .call(commands, Delivery::Always)
            .await?;
        replies.iter().try_fold(0, |removed, reply| match reply {
            Reply::Value(_) => Ok(removed + 1),
            Reply::Missing => Ok(removed),
            other => Err(failed(other)),
        })
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

/// A subtraction's answer: the value after, or `None` for a counter that
/// no longer exists.
fn subtracted(reply: &Reply) -> Result<Option<u64>, StoreError> {
    match reply {
        Reply::Value(value) => Ok(Some(*value)),
        Reply::Missing => Ok(None),
        other => Err(failed(other)),
    }
}

/// A batch's counts from its replies: its reads', then its additions'.
fn batch_counts(read: &[Reply], added: &[Reply]) -> Result<BatchCounts, StoreError> {
    Ok(BatchCounts {
        read: read
            .iter()
            .map(|reply| match reply {
                Reply::Value(value) => Ok(*value),
                Reply::Missing => Ok(0),
                other => Err(failed(other)),
            })
            .collect::<Result<_, _>>()?,
        added: added
            .iter()
            .map(|reply| match reply {
                Reply::Value(value) => Ok(*value),
                other => Err(failed(other)),
            })
            .collect::<Result<_, _>>()?,
    })
}

fn failed(reply: &Reply) -> StoreError {
    match reply {
        Reply::Failed(message) => StoreError::Protocol(message.clone()),
        other => StoreError::Protocol(format!("unexpected answer {other:?}")),
    }
}

fn unexpected(what: &str) -> StoreError {
    StoreError::Protocol(what.to_owned())
}
