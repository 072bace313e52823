//! The figures, as text for the terminal and as markdown for
//! docs/src/design/accuracy.md.

use std::fmt::Write;

use crate::judge::Tally;
use crate::replay::{EVERY_REQUEST, LABELS, Outcome};

pub fn percent(value: f64) -> String {
    if value == 0.0 {
        "0".to_owned()
    } else if value < 0.001 {
        format!("{value:.5} %")
    } else if value < 0.1 {
        format!("{value:.4} %")
    } else {
        format!("{value:.2} %")
    }
}

fn over(tally: &Tally, limit: u64) -> String {
    format!(
        "{:+} ({:.1} % of the limit)",
        tally.most_over,
        100.0 * tally.most_over as f64 / limit as f64
    )
}

/// Wrongly admitted plus wrongly rejected, in % of requests.
pub fn wrongly_decided(tally: &Tally) -> f64 {
    tally.percent(tally.wrongly_admitted + tally.wrongly_rejected)
}

/// One trace's table, in markdown.
pub fn table(outcome: &Outcome) -> String {
    let trace = &outcome.trace;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### `{}`: {}\n\n{} requests; limit {} per {} s.\n",
        trace.name,
        trace.about,
        thousands(outcome.requests),
        trace.limit,
        trace.window_ms / 1000
    );
    out.push_str(
        "| decider | admitted | wrongly admitted | wrongly rejected | wrongly decided | mean error | max error | worst over-admission | differs from the independent exact log |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for (index, (label, tally)) in LABELS.iter().zip(&outcome.tallies).enumerate() {
        let worst = if index == EVERY_REQUEST {
            "n/a (rejected requests count too)".to_owned()
        } else {
            over(tally, trace.limit)
        };
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} | {worst} | {} |",
            percent(tally.percent(tally.admitted)),
            percent(tally.percent(tally.wrongly_admitted)),
            percent(tally.percent(tally.wrongly_rejected)),
            percent(wrongly_decided(tally)),
            percent(100.0 * tally.mean_error()),
            percent(100.0 * tally.error_max),
            percent(tally.percent(tally.differs)),
        );
    }
    let _ = writeln!(
        out,
        "\nThe near-cache answered {} rejects at precision 1 and changed {} decisions (a twin limiter without near-cache decided every request the same way).\n",
        thousands(outcome.near_cache_hits),
        outcome.near_cache_changed
    );
    out
}

/// The figures the targets name, from the outcomes at hand.
pub fn summary(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    let find = |name: &str| outcomes.iter().find(|outcome| outcome.trace.name == name);
    if let Some(attack) = find("attack") {
        let p1 = &attack.tallies[0];
        let _ = writeln!(
            out,
            "- Attack mix ({} requests), precision 1, counting admitted requests (slidegate's model): {} of decisions wrong against the exact log of the same admitted history ({} wrongly admitted, {} wrongly rejected); {} differ from an independent exact log.",
            thousands(attack.requests),
            percent(wrongly_decided(p1)),
            thousands(p1.wrongly_admitted),
            thousands(p1.wrongly_rejected),
            percent(p1.percent(p1.differs)),
        );
        let every = &attack.tallies[EVERY_REQUEST];
        let _ = writeln!(
            out,
            "- Attack mix, precision 1, counting every request (Cloudflare's model, `Limiter::report`): {} of decisions wrong ({} wrongly admitted, {} wrongly rejected); mean error {} of the limit, {} of the real rate (Cloudflare: 6 %).",
            percent(wrongly_decided(every)),
            thousands(every.wrongly_admitted),
            thousands(every.wrongly_rejected),
            percent(100.0 * every.mean_error()),
            percent(100.0 * every.mean_rate_error()),
        );
    }
    let steady: Vec<&Outcome> = outcomes
        .iter()
        .filter(|outcome| outcome.trace.name.starts_with("steady-"))
        .collect();
    if !steady.is_empty() {
        let ratios: Vec<String> = steady
            .iter()
            .map(|outcome| {
                let (p1, p10) = (&outcome.tallies[0], &outcome.tallies[2]);
                format!(
                    "`{}` {:.1}x ({} → {}; max {:.1}x)",
                    outcome.trace.name,
                    p1.mean_error() / p10.mean_error(),
                    percent(100.0 * p1.mean_error()),
                    percent(100.0 * p10.mean_error()),
                    p1.error_max / p10.error_max,
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "- Mean error of the estimate (of the limit), precision 1 over precision 10: {}.",
            ratios.join(", ")
        );
    }
    if let Some(straddle) = find("straddle") {
        let (p1, p10, fixed) = (
            &straddle.tallies[0],
            &straddle.tallies[2],
            &straddle.tallies[3],
        );
        let ratio = if p1.most_over > 0 && fixed.most_over > 0 {
            format!(
                " ({:.1}x smaller)",
                fixed.most_over as f64 / p1.most_over as f64
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "- Straddling bursts, worst over-admission in any window: fixed window {:+}, precision 1 {:+}{ratio}, precision 10 {:+}.",
            fixed.most_over, p1.most_over, p10.most_over,
        );
    }
    let changed: u64 = outcomes
        .iter()
        .map(|outcome| outcome.near_cache_changed)
        .sum();
    let hits: u64 = outcomes.iter().map(|outcome| outcome.near_cache_hits).sum();
    let _ = writeln!(
        out,
        "- Near-cache: {} rejects answered without the store over all traces, {changed} decisions changed by it.",
        thousands(hits)
    );
    out
}

/// One line per decider, for the terminal.
pub fn terminal(outcome: &Outcome) -> String {
    let mut out = format!(
        "{} ({} requests, {:.1} s)\n",
        outcome.trace.name,
        thousands(outcome.requests),
        outcome.elapsed.as_secs_f64()
    );
    for (index, (label, tally)) in LABELS.iter().zip(&outcome.tallies).enumerate() {
        // Rejected requests count too on that row: no over-admission to give.
        let worst = if index == EVERY_REQUEST {
            "n/a".to_owned()
        } else {
            format!("{:+}", tally.most_over)
        };
        let _ = writeln!(
            out,
            "  {label:<24} wrongly admitted {:>10}  wrongly rejected {:>10}  mean error {:>9}  max error {:>9}  worst over-admission {worst:>5}  differs {:>9}",
            percent(tally.percent(tally.wrongly_admitted)),
            percent(tally.percent(tally.wrongly_rejected)),
            percent(100.0 * tally.mean_error()),
            percent(100.0 * tally.error_max),
            percent(tally.percent(tally.differs)),
        );
    }
    let _ = writeln!(
        out,
        "  near-cache: {} hits, {} decisions changed",
        outcome.near_cache_hits, outcome.near_cache_changed
    );
    out
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Replace what lies between `<!-- generated:NAME -->` and
/// `<!-- /generated:NAME -->` in `document` with `content`.
pub fn splice(document: &str, name: &str, content: &str) -> Result<String, String> {
    let open = format!("<!-- generated:{name} -->");
    let close = format!("<!-- /generated:{name} -->");
    let start = document
        .find(&open)
        .ok_or_else(|| format!("no {open} marker"))?
        + open.len();
    let end = document[start..]
        .find(&close)
        .ok_or_else(|| format!("no {close} marker"))?
        + start;
    Ok(format!(
        "{}\n{}\n{}",
        &document[..start],
        content.trim(),
        &document[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_between_its_markers() {
        let document = "a\n<!-- generated:x -->\nold\n<!-- /generated:x -->\nb\n";
        assert_eq!(
            splice(document, "x", "new").unwrap(),
            "a\n<!-- generated:x -->\nnew\n<!-- /generated:x -->\nb\n"
        );
        assert!(splice(document, "y", "new").is_err());
        assert_eq!(thousands(11_712_345), "11,712,345");
        assert_eq!(thousands(999), "999");
    }
}
