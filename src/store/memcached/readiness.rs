//! The store's readiness: every node pinged at once, each one's answer
//! reported, and the store ready while any node answers.

use super::conn::{Commands, Delivery};
use super::wire::Command;
use super::{MemcachedStore, unexpected};
use crate::store::{NodeReadiness, Readiness, StoreError};

impl MemcachedStore {
    /// Every node pinged at once; ready while any answers. A lost node
    /// costs only its own keys, so it does not take the service's
    /// readiness away (a load balancer would drop every replica at once).
    pub(super) async fn ping_every_node(&self) -> Readiness {
        let topology = self.cell.load();
        if topology.nodes.is_empty() {
            return Readiness {
                result: Err(self.no_nodes()),
                nodes: Vec::new(),
            };
        }
        let mut pings = tokio::task::JoinSet::new();
        for (at, node) in topology.nodes.iter().enumerate() {
            let (node, timeout) = (node.clone(), self.timeout);
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
        let nodes = topology
            .names
            .iter()
            .zip(&answers)
            .map(|(name, answer)| NodeReadiness {
                node: name.clone(),
                up: matches!(answer, Some(Ok(()))),
            })
            .collect();
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
}
