//! Where a request's additions go back to when the reservation of them is
//! dropped unclaimed: subtractions queued on the slot that counted them
//! (see `store::reservation` for the rule, and `unclaimed` and `reader`
//! for who drops one).

use smallvec::SmallVec;

use super::Commands;
use super::queue::{Delivery, Queue, Request};
use crate::store::CounterKey;
use crate::store::memcached::wire::{Command, Reply};
use crate::store::reservation::{Amounts, Reservation, Returns};

/// The additions among a request's commands: `counters`, each added
/// `amount`, whose replies start at `first_reply`. Borrowed from the
/// caller, not carried with the answer: an answer is then a few dozen
/// bytes instead of a few hundred, moved three times per check.
#[derive(Clone, Copy, Debug)]
pub struct Additions<'a> {
    pub counters: &'a [CounterKey],
    pub amount: u64,
    pub first_reply: usize,
}

/// Where a request's additions go back to: subtractions queued ahead of
/// callers' requests on the slot that counted them, which keeps what is
/// owed across a redial. A group is one of the request's additions (or,
/// for the reader, which has only the request, one of its commands).
pub struct Queued<'a> {
    queue: &'a Queue,
    counters: Counters<'a>,
}

/// A group's counter: the request's additions, or each of its commands.
enum Counters<'a> {
    Added(&'a [CounterKey]),
    Commands(&'a [Command]),
}

impl Returns for Queued<'_> {
    fn give_back(&self, amounts: &[u64], _now_ms: u64) {
        let counter = |group: usize| match self.counters {
            Counters::Added(counters) => counters.get(group).copied(),
            Counters::Commands(commands) => commands
                .get(group)
                .and_then(|command| Some(command.addition()?.0)),
        };
        let owed = amounts.iter().enumerate();
        let commands =
            giving_back(owed.filter_map(|(group, &amount)| Some((counter(group)?, amount))));
        if !commands.is_empty() {
            self.queue
                .push_owed(Request::new(commands, Delivery::Always, None));
        }
    }
}

/// The subtractions that give back each counter's amount, leaving out
/// those with nothing to give: what a reservation of additions returns.
pub fn giving_back(owed: impl IntoIterator<Item = (CounterKey, u64)>) -> Commands {
    let mut commands = Commands::new();
    for (counter, amount) in owed {
        if amount > 0 {
            commands.push(Command::Subtract { counter, amount });
        }
    }
    commands
}

impl<'a> Queued<'a> {
    /// `additions`' reservation, from the replies to its request.
    pub(super) fn additions(
        queue: &'a Queue,
        additions: Additions<'a>,
        replies: &[Reply],
    ) -> Reservation<Self> {
        let applied_at = |index: usize| {
            replies
                .get(additions.first_reply + index)
                .is_some_and(applied)
        };
        // One addition (a check of one limit): in place.
        if additions.counters.len() == 1 {
            let amount = if applied_at(0) { additions.amount } else { 0 };
            let counters = Counters::Added(additions.counters);
            let amounts = SmallVec::from_buf_and_len([amount, 0], 1);
            return Reservation::new(Queued { queue, counters }, amounts, 0);
        }
        let mut amounts = Amounts::new();
        for index in 0..additions.counters.len() {
            amounts.push(if applied_at(index) {
                additions.amount
            } else {
                0
            });
        }
        let counters = Counters::Added(additions.counters);
        Reservation::new(Queued { queue, counters }, amounts, 0)
    }

    /// The reservation of a written request's additions, from its replies:
    /// the reader's, when no caller took them.
    pub(super) fn written(
        queue: &'a Queue,
        commands: &'a [Command],
        replies: &[Reply],
    ) -> Reservation<Self> {
        let amounts: Amounts = commands
            .iter()
            .zip(replies)
            .map(|(command, reply)| match command.addition() {
                Some((_, amount)) if applied(reply) => amount,
                _ => 0,
            })
            .collect();
        let counters = Counters::Commands(commands);
        Reservation::new(Queued { queue, counters }, amounts, 0)
    }
}

/// Whether an addition's reply says it was applied.
fn applied(reply: &Reply) -> bool {
    matches!(reply, Reply::Value(_))
}
