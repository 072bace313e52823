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
//! | `mod.rs` | the [`Store`] impl: a batch in, counts out |
//! | [`conn`] | multiplexed, pipelined connections: writer, reader, in-flight queue, stall and redial |
//! | [`wire`] | keys, meta commands and replies as bytes, no I/O |
//! | [`route`] | the rendezvous hash that picks a key's node |
//! | [`clock`] | the shared clock: the first node's second, watched as it ticks |

pub mod clock;
mod conn;
pub mod route;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use self::conn::{Commands, Delivery, Node, Settings};
use self::wire::{Command, Reply};
use super::{
    BatchCounts, CounterBatch, CounterKey, DEFAULT_CONNECTIONS, Store, StoreError, bucket_ttl_secs,
};
use crate::policy::{PLAIN_NAME_RULE, is_plain_name};

pub use self::clock::MemcachedClock;
pub use self::route::DigestRendezvous;

/// Requests that may wait for one connection before calls fail at once.
pub const DEFAULT_QUEUE_DEPTH: usize = 4096;

/// How to reach Memcached.
#[derive(Clone, Debug)]
pub struct MemcachedOptions {
    /// `host:port` of each server.
    pub servers: Vec<String>,
    /// Prefix of every key, so several deployments can share a cluster.
    pub namespace: String,
    /// The limiter's bound on each call. The store uses it for `ping`, and
    /// derives from it how late a reply may be before its connection is
    /// dropped as stalled (20 times it, at least a second).
    pub timeout: Duration,
    /// Multiplexed connections per server. Each carries any number of
    /// concurrent requests, so a few are enough.
    pub connections: usize,
    /// Requests that may wait for one connection; past it a call fails at
    /// once (a store error: the failure mode decides) instead of queueing
    /// without bound.
    pub queue_depth: usize,
}

impl Default for MemcachedOptions {
    fn default() -> MemcachedOptions {
        MemcachedOptions {
            servers: vec!["127.0.0.1:11211".to_owned()],
            namespace: "sg".to_owned(),
            timeout: Duration::from_millis(50),
            connections: DEFAULT_CONNECTIONS,
            queue_depth: DEFAULT_QUEUE_DEPTH,
        }
    }
}

pub struct MemcachedStore {
    nodes: Vec<Node>,
    /// Each node's part of the rendezvous score, in `nodes` order.
    node_hashes: Vec<u64>,
    namespace: String,
    timeout: Duration,
}

impl MemcachedStore {
    /// Start the connections to every server. They are dialled in the
    /// background, so a server that is down now does not stop the start;
    /// [`ping`](Store::ping) tells whether it answers.
    pub async fn connect(options: &MemcachedOptions) -> Result<MemcachedStore, StoreError> {
        if !is_plain_name(&options.namespace) {
            return Err(StoreError::Protocol(format!(
                "namespace {:?} must be {PLAIN_NAME_RULE}",
                options.namespace
            )));
        }
        if options.servers.is_empty() {
            return Err(StoreError::Unreachable("no server given".to_owned()));
        }
        let settings = Arc::new(Settings {
            namespace: Arc::from(options.namespace.as_str()),
            connections: options.connections.max(1),
            queue_depth: options.queue_depth.max(1),
            connect_timeout: options.timeout.max(Duration::from_secs(1)),
            stall_timeout: (options.timeout * 20).max(Duration::from_secs(1)),
        });
        Ok(MemcachedStore {
            nodes: options
                .servers
                .iter()
                .map(|server| Node::spawn(server.clone(), settings.clone()))
                .collect(),
            node_hashes: options
                .servers
                .iter()
                .map(|s| route::node_hash(s))
                .collect(),
            namespace: options.namespace.clone(),
            timeout: options.timeout,
        })
    }

    /// The Memcached key of a counter.
    pub fn wire_key(&self, counter: &CounterKey) -> String {
        wire::key_string(&self.namespace, counter)
    }

    /// The node that holds every counter of `counters`' key.
    fn node_of(&self, counters: &[CounterKey]) -> Result<&Node, StoreError> {
        let Some(first) = counters.first() else {
            return Err(unexpected("an empty batch"));
        };
        if counters
            .iter()
            .any(|counter| counter.digest != first.digest)
        {
            return Err(unexpected("a batch must hold the counters of one key"));
        }
        Ok(&self.nodes[DigestRendezvous::pick_digest(&first.digest, &self.node_hashes)])
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
                    read: Vec::new(),
                    added: Vec::new(),
                });
            }
        };
        if !batch.reads.is_empty() && !batch.adds.is_empty() {
            // Same node for both halves: one key.
            self.node_of(&[batch.reads[0], batch.adds[0]])?;
        }
        // An addition whose caller gives up after it was applied is taken
        // back, so Memcached counts only what was reported as counted.
        let replies = node.call(commands, Delivery::UndoIfUnclaimed).await?;
        let (read, added) = replies.split_at(batch.reads.len().min(replies.len()));
        if read.len() != batch.reads.len() || added.len() != batch.adds.len() {
            return Err(unexpected("answers missing from a batch"));
        }
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
        replies
            .iter()
            .map(|reply| match reply {
                Reply::Value(value) => Ok(Some(*value)),
                Reply::Missing => Ok(None),
                other => Err(failed(other)),
            })
            .collect()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        for node in &self.nodes {
            let call = node.call(Commands::from_slice(&[Command::Noop]), Delivery::Plain);
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => return Err(error),
                Err(_) => return Err(StoreError::Timeout(self.timeout.as_millis() as u64)),
            }
        }
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "memcached"
    }
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
