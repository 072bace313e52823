use super::*;

const BOUNDS: Bounds = Bounds {
    overdue_after_us: 50_000,
    stall_after_us: 1_000_000,
};

/// A manual clock: microseconds since the node's epoch.
const NOW: u64 = 10_000_000;

fn up(written_ago_us: Option<u64>, extra: bool) -> View {
    let phase = Phase::Up;
    View {
        phase,
        state: state(phase, written_ago_us.map(|ago| NOW - ago), NOW, BOUNDS),
        extra,
    }
}

fn at_rest(phase: Phase, extra: bool) -> View {
    View {
        phase,
        state: state(phase, None, NOW, BOUNDS),
        extra,
    }
}

const READY: Option<u64> = None;
const OVERDUE: Option<u64> = Some(200_000);

#[test]
fn a_reply_older_than_the_timeout_is_overdue_and_past_the_bound_stalled() {
    let of = |ago: Option<u64>| state(Phase::Up, ago.map(|ago| NOW - ago), NOW, BOUNDS);
    assert_eq!(of(None), Some(State::Ready));
    assert_eq!(
        of(Some(50_000)),
        Some(State::Ready),
        "at the timeout, not past it"
    );
    assert_eq!(of(Some(50_001)), Some(State::Overdue));
    assert_eq!(of(Some(1_000_000)), Some(State::Overdue));
    assert_eq!(of(Some(1_000_001)), Some(State::Stalled));
    assert_eq!(state(Phase::Dialling, None, NOW, BOUNDS), Some(State::Down));
    assert_eq!(state(Phase::Idle, Some(0), NOW, BOUNDS), None);
    // A request written "after now" (another thread's clock read) is fresh.
    assert_eq!(
        state(Phase::Up, Some(NOW + 5), NOW, BOUNDS),
        Some(State::Ready)
    );
}

#[test]
fn ready_connections_take_requests_in_turn_and_overdue_ones_none() {
    let views = [
        up(READY, false),
        up(OVERDUE, false),
        up(READY, false),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(pick(&views, 0), Pick::Use(0));
    assert_eq!(pick(&views, 1), Pick::Use(2), "the overdue one is skipped");
    assert_eq!(pick(&views, 2), Pick::Use(0));
    assert_eq!(pick(&views, 3), Pick::Use(2));
    // Wrapping round the counter is still in turn.
    assert_eq!(pick(&views, usize::MAX), Pick::Use(2));
    assert_eq!(pick(&views, usize::MAX.wrapping_add(1)), Pick::Use(0));
}

/// Requests spread evenly over the ready connections, however many
/// slots at rest (extras) or overdue lie between them: a slot after a
/// run of unready ones must not take the turns of all of them.
#[test]
fn requests_spread_evenly_over_the_ready_connections() {
    let spread = |views: &[View]| {
        let mut taken = vec![0usize; views.len()];
        for start in 0..1_200 {
            match pick(views, start) {
                Pick::Use(index) => taken[index] += 1,
                other => panic!("{other:?}"),
            }
        }
        taken
    };
    let two_and_extras = [
        up(READY, false),
        up(READY, false),
        at_rest(Phase::Idle, true),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(spread(&two_and_extras), [600, 600, 0, 0]);
    let one_overdue = [
        up(READY, false),
        up(OVERDUE, false),
        up(READY, false),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(spread(&one_overdue), [600, 0, 600, 0]);
    let an_extra_up = [
        up(OVERDUE, false),
        up(READY, false),
        up(READY, true),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(spread(&an_extra_up), [0, 600, 600, 0]);
}

#[test]
fn every_connection_overdue_dials_an_extra_then_sends_there_while_it_dials() {
    let mut views = [
        up(OVERDUE, false),
        up(OVERDUE, false),
        at_rest(Phase::Idle, true),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(pick(&views, 0), Pick::Activate(2));
    views[2] = at_rest(Phase::Dialling, true);
    assert_eq!(pick(&views, 1), Pick::Use(2));
    views[2] = up(READY, true);
    assert_eq!(pick(&views, 1), Pick::Use(2));
    // That one overdue too: the next extra.
    views[2] = up(OVERDUE, true);
    assert_eq!(pick(&views, 0), Pick::Activate(3));
}

#[test]
fn with_no_extra_left_an_overdue_node_fails_at_once() {
    let views = [up(OVERDUE, false), up(Some(2_000_000), true)];
    assert_eq!(pick(&views, 0), Pick::Exhausted);
    assert_eq!(pick_any_up(&views, 1), Some(1), "a rollback still goes out");
}

#[test]
fn a_node_with_nothing_up_queues_on_its_own_connections_not_extras() {
    let views = [
        at_rest(Phase::Dialling, false),
        at_rest(Phase::Dialling, false),
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(pick(&views, 0), Pick::Use(0));
    assert_eq!(pick(&views, 1), Pick::Use(1));
    assert_eq!(pick(&views, 2), Pick::Use(0));
    assert_eq!(pick_any_up(&views, 0), None);
    assert_eq!(pick(&[], 0), Pick::Exhausted);
}

#[test]
fn a_closing_extra_takes_no_new_requests() {
    let views = [
        up(OVERDUE, false),
        View {
            phase: Phase::Closing,
            ..up(READY, true)
        },
        at_rest(Phase::Idle, true),
    ];
    assert_eq!(pick(&views, 1), Pick::Activate(2));
}

#[test]
fn an_extra_closes_once_the_configured_number_besides_it_are_ready() {
    let views = [
        up(READY, false),
        up(OVERDUE, false),
        up(READY, true),
        up(READY, true),
    ];
    // Two configured: slot 2 sees slots 0 and 3 ready, so it may close;
    // once it has, slot 3 sees only slot 0 and stays.
    assert!(extra_may_close(&views, 2, 2));
    let after = [views[0], views[1], at_rest(Phase::Idle, true), views[3]];
    assert!(!extra_may_close(&after, 3, 2));
    let drained = [up(READY, false), up(READY, false), after[2], after[3]];
    assert!(extra_may_close(&drained, 3, 2));
}

#[test]
fn calm_must_hold_unbroken_for_the_whole_stretch() {
    let mut calm = Calm::default();
    assert!(!calm.observe(true, 1_000, 200));
    assert!(!calm.observe(true, 1_199, 200));
    assert!(calm.observe(true, 1_200, 200));
    // One look where it does not hold starts the stretch again.
    assert!(!calm.observe(false, 1_300, 200));
    assert!(!calm.observe(true, 1_400, 200));
    assert!(calm.observe(true, 1_600, 200));
    assert!(Calm::default().observe(true, 5, 0), "no stretch asked for");
}

#[test]
fn phases_survive_their_atomic_encoding() {
    for phase in Phase::ALL {
        assert_eq!(Phase::from_u8(phase.as_u8()), phase);
    }
}

/// A stalled connection that owes an addition drains, unless its slot
/// already drains one: then it is kept as it is, so that a slot never has
/// more than one connection draining beside its own. One that owes none,
/// or with draining off, is closed as before.
#[test]
fn a_stalled_connection_drains_what_it_owes_one_drain_a_slot() {
    assert_eq!(give_up(true, true, false), GiveUp::Drain);
    assert_eq!(give_up(true, true, true), GiveUp::Keep);
    for slot_drains in [false, true] {
        assert_eq!(give_up(false, true, slot_drains), GiveUp::Close);
        assert_eq!(give_up(true, false, slot_drains), GiveUp::Close);
    }
}
