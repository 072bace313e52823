//! Take-backs and resets on every replica of a key, and what their answers
//! come to: each counter's highest value after (what a later check would
//! read), and the most counters any replica removed.

use std::sync::Arc;

use super::conn::{Commands, Delivery, Node, Replies};
use super::exchange::take_back_of;
use super::wire::Reply;
use super::{MemcachedStore, failed, unexpected};
use crate::join::join_all;
use crate::store::{CounterKey, StoreError};

type Values = Vec<Option<u64>>;

impl MemcachedStore {
    /// [`Store::subtract_many`](crate::store::Store::subtract_many): each
    /// take goes to each of its key's replicas, and a node's share of
    /// them goes in one call.
    pub(super) async fn subtract_grouped(
        &self,
        takes: &[(&[CounterKey], u64)],
    ) -> Vec<Result<Values, StoreError>> {
        // Per take, its replicas' answers, or the error that kept it from
        // being sent.
        let mut sent: Vec<Result<Vec<(usize, usize)>, StoreError>> =
            takes.iter().map(|_| Ok(Vec::new())).collect();
        // (node, the takes it carries, in order)
        let mut groups: Vec<(Arc<Node>, Vec<usize>)> = Vec::new();
        for (at, &(counters, _)) in takes.iter().enumerate() {
            if counters.is_empty() {
                continue;
            }
            match self.replicas_for_counters(counters) {
                Ok(nodes) => {
                    for node in nodes {
                        let group = match groups
                            .iter()
                            .position(|(known, _)| Arc::ptr_eq(known, &node))
                        {
                            Some(group) => group,
                            None => {
                                groups.push((node, Vec::new()));
                                groups.len() - 1
                            }
                        };
                        let members = &mut groups[group].1;
                        members.push(at);
                        if let Ok(places) = &mut sent[at] {
                            places.push((group, members.len() - 1));
                        }
                    }
                }
                Err(error) => sent[at] = Err(error),
            }
        }
        let calls = groups
            .iter()
            .map(|(node, members)| {
                let commands: Commands = members
                    .iter()
                    .flat_map(|&at| take_back_of(takes[at].0, takes[at].1))
                    .collect();
                // Sent even if the caller stops waiting, like every rollback.
                node.call(commands, Delivery::Always)
            })
            .collect();
        let answers = join_all(calls).await;
        // Each group's answer, cut into its members' shares.
        let shares: Vec<Result<Vec<Replies>, StoreError>> = groups
            .iter()
            .zip(answers)
            .map(|((_, members), answer)| {
                let replies = answer?;
                let mut replies = replies.into_iter();
                let shares: Vec<Replies> = members
                    .iter()
                    .map(|&at| replies.by_ref().take(takes[at].0.len()).collect())
                    .collect();
                Ok(shares)
            })
            .collect();
        sent.into_iter()
            .zip(takes)
            .map(|(places, &(counters, _))| {
                let places = places?;
                let answers = places.iter().map(|&(group, share)| match &shares[group] {
                    Ok(shares) => Ok(shares[share].clone()),
                    Err(error) => Err(error.clone()),
                });
                highest_after(answers.collect(), counters.len())
            })
            .collect()
    }
}

/// Each counter's highest value after a subtraction on every replica, from
/// the replicas that answered; the first error when none did.
pub(super) fn highest_after(
    answers: Vec<Result<Replies, StoreError>>,
    wanted: usize,
) -> Result<Values, StoreError> {
    if wanted == 0 {
        return Ok(Vec::new());
    }
    let mut highest: Option<Values> = None;
    let mut first_error = None;
    for answer in answers {
        let values = answer.and_then(|replies| {
            let values = replies
                .iter()
                .map(subtracted)
                .collect::<Result<Values, _>>()?;
            (values.len() == wanted)
                .then_some(values)
                .ok_or_else(|| unexpected("answers missing from a rollback"))
        });
        match values {
            Ok(values) => {
                highest = Some(match highest {
                    None => values,
                    Some(known) => known
                        .into_iter()
                        .zip(values)
                        .map(|(a, b)| a.max(b))
                        .collect(),
                });
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    highest.ok_or_else(|| first_error.unwrap_or_else(|| unexpected("a rollback was not sent")))
}

/// How many counters a reset removed: the most any replica had.
pub(super) fn most_removed(answers: Vec<Result<Replies, StoreError>>) -> Result<usize, StoreError> {
    let mut most: Option<usize> = None;
    let mut first_error = None;
    for answer in answers {
        let removed = answer.and_then(|replies| {
            replies.iter().try_fold(0, |removed, reply| match reply {
                Reply::Value(_) => Ok(removed + 1),
                Reply::Missing => Ok(removed),
                other => Err(failed(other)),
            })
        });
        match removed {
            Ok(removed) => most = Some(most.unwrap_or(0).max(removed)),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    most.ok_or_else(|| first_error.unwrap_or_else(|| unexpected("a reset was not sent")))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(values: &[Option<u64>]) -> Result<Replies, StoreError> {
        Ok(values
            .iter()
            .map(|value| value.map_or(Reply::Missing, Reply::Value))
            .collect())
    }

    /// Each counter's highest value after, from the replicas that answered:
    /// what a later check reads. A counter gone on one replica and kept on
    /// another reads the kept one.
    #[test]
    fn a_take_back_answers_each_counter_s_highest() {
        let answers = vec![
            replies(&[Some(3), None]),
            Err(StoreError::Unreachable("down".to_owned())),
            replies(&[Some(5), Some(1)]),
        ];
        assert_eq!(highest_after(answers, 2).unwrap(), [Some(5), Some(1)]);
        let none = vec![
            Err(StoreError::Timeout(50)),
            Err(StoreError::Unreachable("down".to_owned())),
        ];
        assert!(matches!(
            highest_after(none, 1),
            Err(StoreError::Timeout(50))
        ));
        let short = vec![replies(&[Some(1)])];
        assert!(highest_after(short, 2).is_err());
    }

    /// A reset counts what the replica that had the most removed.
    #[test]
    fn a_reset_counts_the_most_any_replica_removed() {
        let answers = vec![
            Ok([Reply::Value(0), Reply::Missing].into_iter().collect()),
            Ok([Reply::Value(0), Reply::Value(0)].into_iter().collect()),
            Err(StoreError::Unreachable("down".to_owned())),
        ];
        assert_eq!(most_removed(answers).unwrap(), 2);
        assert!(most_removed(vec![Err(StoreError::Timeout(1))]).is_err());
    }
}
