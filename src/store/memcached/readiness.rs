//! The store's readiness: every node pinged at once, each one's answer
//! reported, and the store ready while any node answers. With replicas
//! (`memcached.replicas` = N >= 2), ready while every key keeps a replica
//! that answers: fewer than N nodes down. One down is then degraded (its
//! keys are counted by their other replicas), not down.
//!
//! `/readyz` needs no token, and a ping goes on the queues the checks use,
//! so what probes cost Memcached is bounded whoever sends them: one round
//! of pings is in flight at a time, every caller that comes meanwhile
//! shares its answer, and the answer is reused for [`READINESS_REUSE`]
//! while the node list and every node's connections stay as they were
//! (the same states, no redial). N concurrent probes cost one no-op per
//! node. A connection that drops or turns overdue ends the reuse at once,
//! so a node killed is named down at the next probe; one that stops
//! answering but keeps its connection, with no check to notice, is named
//! down within [`READINESS_REUSE`] and the timeout.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::conn::{Commands, ConnectionStates, Delivery};
use super::topology::Topology;
use super::wire::Command;
use super::{MemcachedStore, unexpected};
use crate::store::{NodeReadiness, Readiness, StoreError};

/// How long a readiness answer is reused while nothing it was asked under
/// changes. Long enough that a probe flood costs Memcached next to
/// nothing, short against an orchestrator's probe period.
pub const READINESS_REUSE: Duration = Duration::from_secs(1);

/// The last round of pings and the one in flight, shared by every caller.
#[derive(Default)]
pub(super) struct Probes {
    rounds: Mutex<Rounds>,
}

#[derive(Default)]
struct Rounds {
    last: Option<Arc<Round>>,
    /// Where the round in flight will give its answer.
    in_flight: Option<watch::Receiver<Option<Arc<Round>>>>,
}

/// One round's answer, and what it was asked under.
struct Round {
    began: Instant,
    /// Weak: a node list that discovery replaced must not be kept open
    /// for its answer's sake.
    topology: Weak<Topology>,
    connections: Vec<Connections>,
    readiness: Readiness,
}

/// What a node's connection layer tracks that a ping's answer depends on:
/// a connection that drops, is redialled or has a reply overdue changes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Connections {
    states: ConnectionStates,
    redials: u64,
}

impl Connections {
    fn of(topology: &Topology) -> Vec<Connections> {
        topology
            .nodes
            .iter()
            .map(|node| Connections {
                states: node.connection_states(),
                redials: node.redials().iter().map(|(_, count)| count).sum(),
            })
            .collect()
    }
}

impl Round {
    /// Whether this answer still holds for `topology` with `connections`.
    fn holds(&self, topology: &Arc<Topology>, connections: &[Connections]) -> bool {
        self.began.elapsed() < READINESS_REUSE
            && std::ptr::eq(self.topology.as_ptr(), Arc::as_ptr(topology))
            && self.connections == connections
    }
}

impl MemcachedStore {
    /// Every node's state, from the last round of pings while it holds,
    /// else from the round in flight, else from a round started now.
    pub(super) async fn shared_readiness(&self) -> Readiness {
        let topology = self.cell.load();
        if topology.nodes.is_empty() {
            return Readiness {
                result: Err(self.no_nodes()),
                nodes: Vec::new(),
            };
        }
        let connections = Connections::of(&topology);
        let mut answer = {
            let mut rounds = self
                .probes
                .rounds
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(last) = &rounds.last
                && last.holds(&topology, &connections)
            {
                return last.readiness.clone();
            }
            match &rounds.in_flight {
                // Its sender gone, the round ended without an answer (its
                // runtime shut down): start another.
                Some(answer) if answer.has_changed().is_ok() => answer.clone(),
                _ => {
                    let (give, answer) = watch::channel(None);
                    rounds.in_flight = Some(answer.clone());
                    // A task of its own, so that its answer is kept and
                    // shared even when the caller that started it stops
                    // waiting.
                    tokio::spawn(run_round(
                        self.probes.clone(),
                        topology,
                        connections,
                        self.timeout,
                        self.replicas,
                        give,
                    ));
                    answer
                }
            }
        };
        let given = answer.wait_for(Option::is_some).await.ok();
        given
            .and_then(|round| round.as_ref().map(|round| round.readiness.clone()))
            .unwrap_or_else(|| Readiness {
                result: Err(unexpected("the readiness round ended without an answer")),
                nodes: Vec::new(),
            })
    }
}

/// Ping every node of `topology`, keep the answer as the last round's, and
/// give it to the callers waiting for it.
async fn run_round(
    probes: Arc<Probes>,
    topology: Arc<Topology>,
    connections: Vec<Connections>,
    timeout: Duration,
    replicas: usize,
    give: watch::Sender<Option<Arc<Round>>>,
) {
    let began = Instant::now();
    let readiness = ping_every_node(&topology, timeout, replicas).await;
    let round = Arc::new(Round {
        began,
        topology: Arc::downgrade(&topology),
        connections,
        readiness,
    });
    {
        let mut rounds = probes.rounds.lock().unwrap_or_else(PoisonError::into_inner);
        rounds.last = Some(round.clone());
        rounds.in_flight = None;
    }
    give.send_replace(Some(round));
}

/// Every node pinged at once; ready while any answers. A lost node costs
/// only its own keys, so it does not take the service's readiness away (a
/// load balancer would drop every replica at once). With replicas, not
/// ready once as many nodes as a key has replicas are down: some key then
/// has none left.
async fn ping_every_node(topology: &Topology, timeout: Duration, replicas: usize) -> Readiness {
    let mut pings = tokio::task::JoinSet::new();
    for (at, node) in topology.nodes.iter().enumerate() {
        let node = node.clone();
        pings.spawn(async move {
            let call = node.call(Commands::from_slice(&[Command::Noop]), Delivery::Plain);
            let answered = match tokio::time::timeout(timeout, call).await {
                Ok(answered) => answered.map(drop),
                Err(_) => Err(StoreError::Timeout(timeout.as_millis() as u64)),
            };
            (at, answered)
        });
    }
    let mut answers: Vec<Option<Result<(), StoreError>>> =
        topology.nodes.iter().map(|_| None).collect();
    while let Some(joined) = pings.join_next().await {
        if let Ok((at, answered)) = joined {
            answers[at] = Some(answered);
        }
    }
    let nodes: Vec<NodeReadiness> = topology
        .names
        .iter()
        .zip(&answers)
        .map(|(name, answer)| NodeReadiness {
            node: name.clone(),
            up: matches!(answer, Some(Ok(()))),
        })
        .collect();
    let copies = replicas.min(topology.nodes.len());
    let down = nodes.iter().filter(|node| !node.up).count();
    if copies >= 2 && down >= copies {
        let error = answers
            .iter()
            .flatten()
            .find_map(|answer| answer.as_ref().err().cloned())
            .unwrap_or_else(|| unexpected("no node's ping finished"));
        return Readiness {
            result: Err(StoreError::Unreachable(format!(
                "{down} of {} nodes down: some keys have none of their {copies} replicas left ({error})",
                nodes.len()
            ))),
            nodes,
        };
    }
    let mut first_error = None;
    for answer in answers {
        match answer {
            Some(Ok(())) => {
                return Readiness {
                    result: Ok(()),
                    nodes,
                };
            }
            Some(Err(error)) => {
                first_error.get_or_insert(error);
            }
            None => {}
        }
    }
    Readiness {
        result: Err(first_error.unwrap_or_else(|| unexpected("no node's ping finished"))),
        nodes,
    }
}
