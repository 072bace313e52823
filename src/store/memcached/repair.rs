//! Which replicas may hold less than they should, and raising them: read
//! repair, an addition of the difference, never a set, so nothing added
//! meanwhile is lost (see `exchange.rs`).

use std::time::Duration;

use smallvec::SmallVec;

use super::MemcachedStore;
use super::conn::{Commands, Delivery, Node};
use super::route::MAX_REPLICAS;
use super::topology::ReplicaNodes;
use super::wire::{self, Command};
use crate::join::start_now;
use crate::store::{BatchCounts, CounterBatch, CounterKey, StoreError, bucket_ttl_secs};

impl MemcachedStore {
    /// Raise each suspect replica that answered lower than the first,
    /// believed one: started now, waited for by nobody.
    pub(super) fn raise_suspects(
        &self,
        nodes: &ReplicaNodes,
        answers: &[Option<Result<BatchCounts, StoreError>>],
        suspect: &[bool],
        first: &BatchCounts,
        batch: &CounterBatch,
    ) {
        let counters = batch.reads.iter().chain(&batch.adds);
        let believed: Vec<u64> = first.read.iter().chain(&first.added).copied().collect();
        for ((node, answer), &suspect) in nodes.iter().zip(answers).zip(suspect).skip(1) {
            let Some(Ok(counts)) = answer else { continue };
            if !suspect {
                continue;
            }
            let found = counts.read.iter().chain(&counts.added);
            let raises = counters
                .clone()
                .zip(found)
                .zip(&believed)
                .filter(|&((_, found), believed)| believed > found)
                .map(|((&counter, found), believed)| (counter, believed - found));
            raise(
                node,
                raises,
                batch.now_ms,
                "raising a doubted replica to the first",
            );
        }
    }

    /// Raise each replica found lower than the highest (see the module's
    /// notes): started now, waited for by nobody.
    pub(super) fn repair(
        &self,
        nodes: &ReplicaNodes,
        lows: &[Option<Vec<u64>>],
        batch: &CounterBatch,
        tries: usize,
    ) {
        let counters = batch
            .reads
            .iter()
            .map(|c| (c, true))
            .chain(batch.adds.iter().map(|c| (c, false)));
        let counters: Vec<(&CounterKey, bool)> = counters.collect();
        for (node, low) in nodes.iter().zip(lows) {
            let Some(low) = low else { continue };
            let raises = counters
                .iter()
                .zip(low)
                .filter(|&(&(_, read), &by)| {
                    // A counter still added to is repaired only from a
                    // difference seen on more than one try. An older
                    // bucket read beside an addition is settled.
                    by > 0 && by != u64::MAX && (tries > 1 || (read && !batch.adds.is_empty()))
                })
                .map(|(&(&counter, _), &by)| (counter, by));
            raise(
                node,
                raises,
                batch.now_ms,
                "raising a replica found lower than the others",
            );
        }
    }
}

/// Raise `node`'s copy of each counter by its amount (an addition with
/// the counter's TTL, never a set): started now, waited for by nobody.
fn raise(
    node: &Node,
    raises: impl Iterator<Item = (CounterKey, u64)>,
    now_ms: u64,
    why: &'static str,
) {
    let commands: Commands = raises
        .map(|(counter, amount)| Command::Add {
            counter,
            amount,
            ttl: wire::ttl(bucket_ttl_secs(counter.window), now_ms),
        })
        .collect();
    if !commands.is_empty() {
        tracing::debug!(node = %node.target().addr, counters = commands.len(), "{why}");
        start_now(node.call(commands, Delivery::Always));
    }
}

/// Which replicas may hold less than they should (their counts are only a
/// floor): one doubted within the counters' lifetime (a connection lost, a
/// call failed), one whose birth is not known, and one born within it
/// later than another replica that answered (it restarted or was replaced
/// since: the other holds counts it never saw). Births a second apart are
/// one: replicas asked first together are born together.
pub(super) fn suspects(
    nodes: &ReplicaNodes,
    answers: &[Option<Result<BatchCounts, StoreError>>],
    lifetime: Duration,
    lifetime_s: u64,
    now_s: u64,
) -> SmallVec<[bool; MAX_REPLICAS]> {
    let births: SmallVec<[Option<u64>; MAX_REPLICAS]> = nodes
        .iter()
        .zip(answers)
        .map(|(node, answer)| match answer {
            Some(Ok(_)) => node.born().0,
            _ => None,
        })
        .collect();
    let eldest = births.iter().flatten().min().copied();
    nodes
        .iter()
        .zip(&births)
        .map(|(node, born)| match (born, eldest) {
            (Some(born), Some(eldest)) => {
                node.doubted_within(lifetime)
                    || (*born > eldest + 1 && born.saturating_add(lifetime_s) > now_s)
            }
            _ => true,
        })
        .collect()
}
