//! The quota arithmetic, pure: what is still free in a bucket's window, the
//! fleet's demand, and one client's demand in; that client's assignment out.
//! No clock, no store, no stream: the service gathers the figures.
//!
//! The free quota `limit - estimate` (the shared sliding window, with every
//! report's allowed requests counted) is what the whole fleet may still
//! admit. The fleet's rate is that quota spread over the client's horizon
//! (the time until its next report), but never more than the limit's own
//! rate (`limit / window`): handing a free window out at once would admit
//! it in a burst, and a burst leaves the window a window later in one
//! piece, so the fleet would admit in pulses, and every client's
//! admissions not yet reported would be handed out again. At the limit's
//! rate the window fills evenly and frees as fast as it fills.
//!
//! That rate is split in proportion to demand (allowed + denied per
//! second): equal demand, equal shares; an idle client's share goes to the
//! busy ones (work-conserving); no client's share exceeds its part of the
//! total demand, so all of them together stay within the fleet's rate.

/// The figures of one bucket for one client's report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// The bucket's limit per window.
    pub limit: u64,
    /// The bucket's window, in seconds.
    pub window_s: f64,
    /// The window's estimate, this report counted.
    pub estimate: f64,
    /// How long until the window admits one more request (0 while it does).
    pub next_unit_ms: u64,
    /// This client's demand, requests per second.
    pub own_demand: f64,
    /// Every client's demand together (this one's included), requests per
    /// second.
    pub total_demand: f64,
    /// Clients known to share the bucket, this one included (at least 1):
    /// splits the quota evenly when nobody demands anything.
    pub clients: usize,
    /// Seconds until this client's next report: what it is given is for that
    /// long (at least 1).
    pub horizon_s: f64,
}

/// What one client may admit until its next assignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignment {
    /// `tokens_per_fill` every `fill_interval_s` seconds, at most
    /// `max_tokens` at once. Envoy enforces a token bucket; it drops a
    /// `requests_per_time_unit`.
    TokenBucket {
        max_tokens: u32,
        tokens_per_fill: u32,
        fill_interval_s: u32,
    },
    /// The window is full: deny everything for `ttl_s` seconds, when it
    /// has room for one request again (or the next report comes first).
    DenyAll { ttl_s: u64 },
}

/// Envoy reads a token bucket's fill interval in whole seconds, and keeps
/// its bucket when only the interval changes: always one second.
pub const FILL_INTERVAL_S: u32 = 1;

/// One client's assignment.
pub fn assign(figures: &Figures) -> Assignment {
    let free = figures.limit as f64 - figures.estimate;
    if free < 1.0 {
        let ttl_s = figures.next_unit_ms.div_ceil(1000).max(1);
        return Assignment::DenyAll { ttl_s };
    }
    let share = share(figures);
    let horizon_s = figures.horizon_s.max(1.0);
    let fleet_rate = (free / horizon_s).min(figures.limit as f64 / figures.window_s.max(1e-3));
    let rate = share * fleet_rate;
    // At least one request a second while the window has room: a client
    // with no demand yet (a new one, an idle one) can still start, and then
    // reports its demand.
    let tokens = (rate.floor() as u64).clamp(1, u64::from(u32::MAX)) as u32;
    Assignment::TokenBucket {
        // One second's tokens: a refreshed bucket admits at most a second's
        // burst beyond its rate.
        max_tokens: tokens,
        tokens_per_fill: tokens,
        fill_interval_s: FILL_INTERVAL_S,
    }
}

/// This client's part of the free quota, from 0 to 1.
pub fn share(figures: &Figures) -> f64 {
    let clients = figures.clients.max(1) as f64;
    let own = figures.own_demand.max(0.0);
    // The total can lag (a shared average over a window) or be only this
    // instance's: never below this client's own demand.
    let total = figures.total_demand.max(own);
    if total <= 0.0 {
        return 1.0 / clients;
    }
    (own / total).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn figures(estimate: f64, own: f64, total: f64) -> Figures {
        Figures {
            limit: 600,
            window_s: 10.0,
            estimate,
            next_unit_ms: 0,
            own_demand: own,
            total_demand: total,
            clients: 4,
            horizon_s: 1.0,
        }
    }

    fn tokens(assignment: Assignment) -> u32 {
        match assignment {
            Assignment::TokenBucket {
                tokens_per_fill, ..
            } => tokens_per_fill,
            Assignment::DenyAll { .. } => 0,
        }
    }

    #[test]
    fn a_full_window_denies_until_it_frees() {
        let full = Figures {
            next_unit_ms: 1_500,
            ..figures(600.0, 10.0, 40.0)
        };
        assert_eq!(assign(&full), Assignment::DenyAll { ttl_s: 2 });
        let almost = Figures {
            next_unit_ms: 10,
            ..figures(599.5, 10.0, 40.0)
        };
        assert_eq!(assign(&almost), Assignment::DenyAll { ttl_s: 1 });
    }

    #[test]
    fn equal_demand_gets_equal_shares_of_what_is_free() {
        // 60 free over the next second, four clients of equal demand.
        assert_eq!(tokens(assign(&figures(540.0, 40.0, 160.0))), 15);
        // 20 free: a quarter each.
        assert_eq!(tokens(assign(&figures(580.0, 40.0, 160.0))), 5);
    }

    #[test]
    fn a_free_window_is_handed_out_at_the_limits_rate_not_at_once() {
        // 600 free; 600 per 10 s is 60 a second, however much is free.
        assert_eq!(tokens(assign(&figures(0.0, 40.0, 40.0))), 60);
        assert_eq!(tokens(assign(&figures(0.0, 40.0, 160.0))), 15);
    }

    #[test]
    fn an_idle_clients_share_goes_to_the_busy_one() {
        let busy = figures(570.0, 40.0, 40.0);
        let idle = figures(570.0, 0.0, 40.0);
        assert_eq!(tokens(assign(&busy)), 30);
        // The idle one keeps a trickle, to start with.
        assert_eq!(tokens(assign(&idle)), 1);
    }

    #[test]
    fn a_new_client_gets_a_non_zero_share_at_once() {
        // Its first report: one request, beside busy clients.
        assert!(tokens(assign(&figures(300.0, 1.0, 121.0))) >= 1);
        // Nobody has demanded anything yet: an even split.
        assert_eq!(tokens(assign(&figures(0.0, 0.0, 0.0))), 15);
    }

    #[test]
    fn the_horizon_spreads_the_free_quota() {
        let later = Figures {
            horizon_s: 5.0,
            ..figures(550.0, 10.0, 10.0)
        };
        assert_eq!(tokens(assign(&later)), 10);
        let never_below_a_second = Figures {
            horizon_s: 0.0,
            ..figures(590.0, 10.0, 10.0)
        };
        assert_eq!(tokens(assign(&never_below_a_second)), 10);
    }

    proptest! {
        /// What all clients may admit over the horizon stays within the
        /// free quota and the limit's rate, but for the one-request floor
        /// each client keeps.
        #[test]
        fn the_shares_never_hand_out_more_than_is_free(
            limit in 1u64..100_000,
            window_s in 1.0f64..3_600.0,
            used in 0.0f64..1.2,
            demands in proptest::collection::vec(0.0f64..10_000.0, 1..12),
            horizon_s in 1.0f64..30.0,
        ) {
            let estimate = limit as f64 * used;
            let total: f64 = demands.iter().sum();
            let mut given = 0.0;
            for &own in &demands {
                let figures = Figures {
                    limit,
                    window_s,
                    estimate,
                    next_unit_ms: 1,
                    own_demand: own,
                    total_demand: total,
                    clients: demands.len(),
                    horizon_s,
                };
                given += f64::from(tokens(assign(&figures))) * horizon_s;
            }
            let free = (limit as f64 - estimate).max(0.0);
            let floors = demands.len() as f64 * horizon_s;
            prop_assert!(given <= free + floors, "given {given}, free {free}");
            let at_the_limits_rate = limit as f64 / window_s * horizon_s;
            prop_assert!(given <= at_the_limits_rate + floors, "given {given} over {horizon_s} s");
            if free < 1.0 {
                prop_assert_eq!(given, 0.0);
            }
        }

        /// More demand never gets a smaller share, and the shares of all
        /// clients add up to at most the whole.
        #[test]
        fn shares_follow_demand(
            own in 0.0f64..1_000.0,
            more in 0.0f64..1_000.0,
            others in proptest::collection::vec(0.0f64..1_000.0, 0..10),
        ) {
            let total = own + (own + more) + others.iter().sum::<f64>();
            let share_of = |demand: f64| share(&Figures {
                own_demand: demand,
                total_demand: total,
                clients: others.len() + 2,
                ..figures(0.0, 0.0, 0.0)
            });
            prop_assert!(share_of(own) <= share_of(own + more));
            let all: f64 = [own, own + more].iter().chain(&others).map(|&d| share_of(d)).sum();
            prop_assert!(all <= 1.0 + 1e-9, "shares add up to {all}");
        }
    }
}
