//! The traces of docs/src/design/accuracy.md. `scale` multiplies every duration (1.0
//! for the published figures; smaller for a quick look or for Memcached).

use crate::trace::{Pattern, Rng, Source, Trace};

/// One window and limit for every trace: 120 requests per minute.
pub const WINDOW_MS: u64 = 60_000;
pub const LIMIT: u64 = 120;
/// 2027-01-15 08:00 UTC: a whole number of windows after the epoch.
pub const START_MS: u64 = 1_800_000_000_000;
const MINUTE: u64 = 60_000;

fn gap_at(share_of_limit: f64) -> f64 {
    WINDOW_MS as f64 / (LIMIT as f64 * share_of_limit)
}

fn seed(trace: u64, source: usize) -> u64 {
    trace.wrapping_mul(0x1000_0000_01b3) ^ (source as u64).wrapping_mul(0x9e37_79b9)
}

fn trace(name: &str, about: String, minutes: u64, scale: f64, sources: Vec<Source>) -> Trace {
    Trace {
        name: name.to_owned(),
        about,
        window_ms: WINDOW_MS,
        limit: LIMIT,
        start_ms: START_MS,
        duration_ms: ((minutes * MINUTE) as f64 * scale).max(1.0) as u64,
        sources,
    }
}

/// 50 clients, each Poisson at `percent` % of the limit, for 2 hours.
pub fn steady(percent: u64, scale: f64) -> Trace {
    let id = 100 + percent;
    let sources = (0..50)
        .map(|client| {
            let pattern = Pattern::Poisson {
                mean_gap_ms: gap_at(percent as f64 / 100.0),
            };
            Source::new(client, 1, pattern, seed(id, client as usize))
        })
        .collect();
    trace(
        &format!("steady-{percent}"),
        format!("50 clients, each Poisson at {percent} % of the limit, 2 hours"),
        120,
        scale,
        sources,
    )
}

/// 50 clients that send at 4x the limit for ~20 s, then pause ~100 s.
pub fn bursty(scale: f64) -> Trace {
    let sources = (0..50)
        .map(|client| {
            let pattern = Pattern::OnOff {
                mean_gap_ms: gap_at(4.0),
                mean_on_ms: 20_000.0,
                mean_off_ms: 100_000.0,
            };
            Source::new(client, 1, pattern, seed(2, client as usize))
        })
        .collect();
    trace(
        "bursty",
        "50 on/off clients: Poisson at 4x the limit for ~20 s (exponential), then silent for ~100 s, 2 hours".to_owned(),
        120,
        scale,
        sources,
    )
}

/// 50 clients, each sending the limit in the 2 s before a window
/// boundary and the limit again in the 2 s after it, every 3 windows,
/// over a background at 20 % of the limit.
pub fn straddle(scale: f64) -> Trace {
    let mut sources = Vec::new();
    for client in 0..50u32 {
        let pattern = Pattern::Straddle {
            per_side: LIMIT,
            half_width_ms: 2_000.0,
            every_ms: 3 * WINDOW_MS,
            // Clients take turns at the boundaries, one window apart.
            phase_ms: u64::from(client % 3) * WINDOW_MS,
        };
        sources.push(Source::new(
            client,
            1,
            pattern,
            seed(3, 2 * client as usize),
        ));
        let background = Pattern::Poisson {
            mean_gap_ms: gap_at(0.2),
        };
        sources.push(Source::new(
            client,
            1,
            background,
            seed(3, 2 * client as usize + 1),
        ));
    }
    trace(
        "straddle",
        "50 clients, each sending the limit in the 2 s before a window boundary and the limit again in the 2 s after it, every 3 windows, over Poisson background traffic at 20 % of the limit, 2 hours".to_owned(),
        120,
        scale,
        sources,
    )
}

/// Like Cloudflare's sample: 4,000 well-behaved clients, each Poisson
/// at 5-80 % of the limit, and 40 attackers at 10-100x it, for 25
/// minutes: about 11.3 million requests.
pub fn attack(scale: f64) -> Trace {
    let mut trace = attack_mix(4_000, 40, 0.8, scale);
    trace.name = "attack".to_owned();
    trace
}

/// The attack mix with `well_behaved` clients at 5 % to `ceiling` of the
/// limit and `attackers` at 10-100x it. Client `n` draws the same uniform
/// number and seed whatever the ceiling, so mixes that differ only in it
/// differ only in how fast their well-behaved clients send.
pub fn attack_mix(well_behaved: u32, attackers: u32, ceiling: f64, scale: f64) -> Trace {
    let mut rng = Rng::new(0xa77ac);
    let mut sources = Vec::new();
    for client in 0..well_behaved + attackers {
        let share = if client < well_behaved {
            rng.between(0.05, ceiling)
        } else {
            rng.between(10.0, 100.0)
        };
        let pattern = Pattern::Poisson {
            mean_gap_ms: gap_at(share),
        };
        sources.push(Source::new(client, 1, pattern, seed(4, client as usize)));
    }
    let ceiling = (ceiling * 100.0).round();
    trace(
        &format!("attack-{well_behaved}-{ceiling}"),
        format!(
            "{} well-behaved clients, each Poisson at 5-{ceiling} % of the limit, and {attackers} attackers at 10-100x it, 25 minutes",
            crate::report::thousands(u64::from(well_behaved))
        ),
        25,
        scale,
        sources,
    )
}

/// Every trace of docs/src/design/accuracy.md, in the order of its tables.
pub fn all(scale: f64) -> Vec<Trace> {
    let mut traces: Vec<Trace> = [50, 90, 100, 110, 200]
        .into_iter()
        .map(|percent| steady(percent, scale))
        .collect();
    traces.push(bursty(scale));
    traces.push(straddle(scale));
    traces.push(attack(scale));
    traces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(trace: &Trace) -> Vec<f64> {
        trace
            .sources
            .iter()
            .map(|source| match source.pattern {
                Pattern::Poisson { mean_gap_ms } => gap_at(1.0) / mean_gap_ms,
                _ => panic!("the attack mix is Poisson only"),
            })
            .collect()
    }

    #[test]
    fn attack_mixes_differ_only_in_their_well_behaved_ceiling() {
        let low = shares(&attack_mix(30, 3, 0.5, 1.0));
        let high = shares(&attack_mix(30, 3, 0.8, 1.0));
        for (client, (low, high)) in low.iter().zip(&high).enumerate() {
            if client < 30 {
                assert!((0.05..=0.5).contains(low), "{client}: {low}");
                // The same uniform draw, stretched to the higher ceiling.
                let expected = 0.05 + (low - 0.05) * (0.8 - 0.05) / (0.5 - 0.05);
                assert!(
                    (high - expected).abs() < 1e-9,
                    "{client}: {high} vs {expected}"
                );
            } else {
                assert_eq!(low, high, "attacker {client}");
                assert!((10.0..=100.0).contains(low));
            }
        }
        // The published trace is this mix at full size.
        assert_eq!(
            shares(&attack(1.0)),
            shares(&attack_mix(4_000, 40, 0.8, 1.0))
        );
    }
}
