//! Finding a request descriptor's rule in the compiled tree, the way
//! envoyproxy/ratelimit's `GetLimit` does.

use super::{Rule, RuleSet};

/// The rule of one descriptor, and the values its counters are named by.
#[derive(Debug)]
pub struct Found<'a> {
    pub rule: &'a Rule,
    /// For each entry, the wildcard pattern that stands for its value when
    /// the entry matched a `share_threshold` wildcard (all values share one
    /// counter), else `None`.
    pub shared: Vec<Option<&'a str>>,
}

impl RuleSet {
    /// The rule for a descriptor's entries, as envoyproxy/ratelimit finds it:
    /// at each level `key_value` first, then a matching wildcard, then `key`
    /// alone; a rule applies only at the descriptor's last entry; a level
    /// with nothing under it ends the walk.
    pub fn find<'a>(&'a self, domain: &str, entries: &[(&str, &str)]) -> Option<Found<'a>> {
        let mut node = self.domains.get(domain)?;
        let mut shared = Vec::with_capacity(entries.len());
        let mut found = None;
        for (index, (key, value)) in entries.iter().enumerate() {
            let key_value = format!("{key}_{value}");
            let mut next = node.children.get(&key_value);
            let mut pattern = None;
            if next.is_none()
                && let Some((wildcard, _)) = node
                    .wildcards
                    .iter()
                    .find(|(_, parts)| wildcard_match(parts, &key_value))
            {
                next = node.children.get(wildcard);
                pattern = next
                    .filter(|child| child.share_threshold)
                    .and_then(|_| wildcard.strip_prefix(&format!("{key}_")));
            }
            let next = next.or_else(|| node.children.get(*key));
            shared.push(pattern);
            let Some(next) = next else { break };
            if let Some(rule) = next.rule
                && index == entries.len() - 1
            {
                found = Some(&self.rules[rule]);
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        shared.resize(entries.len(), None);
        found.map(|rule| Found { rule, shared })
    }
}

/// envoyproxy/ratelimit's `wildcardMatch`: the parts of a pattern split on
/// `*` appear in order, the first at the start and the last at the end.
pub(super) fn wildcard_match(parts: &[String], value: &str) -> bool {
    let Some((first, rest)) = parts.split_first() else {
        return false;
    };
    let Some(mut remaining) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return remaining.is_empty();
    };
    for part in middle {
        match remaining.find(part.as_str()) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.ends_with(last.as_str())
}
