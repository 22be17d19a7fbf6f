//! A pool's decisions (issue 44): how many ephemeral runner processes (`runner start
//! --ephemeral --idle-exit …`, one job each) a host starts now, from what the server says waits
//! and what already runs here, between the operator's floor and ceiling. Pure: the caller reads
//! the queue and watches its processes, and does what [`decide`] says.
//!
//! The rule: each process takes one job, so the pool wants one process per job that waits
//! (queued on the server, not yet claimed) plus one per job its processes run, within
//! `[min, max]`; it starts the difference to what is alive (idle processes claim the waiting
//! jobs first), at most [`PoolLimits::starts_per_tick`] at once. It never stops a process:
//! an idle one leaves by its own `--idle-exit`, a busy one when its job ends, which is how the
//! pool scales down, to zero when `min` is 0. Processes that keep failing before they take a
//! job (a revoked identity, a server that refuses them) stop the starting for a while instead
//! of a restart loop.

use std::time::Duration;

/// What the operator set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Processes kept alive even with nothing queued (0: scale to zero).
    pub min: u32,
    /// Processes alive at most (a ceiling below the floor is the floor).
    pub max: u32,
    /// Processes started in one decision at most.
    pub starts_per_tick: u32,
    /// Failed starts in a row (a process that exited unsuccessfully before taking a job) after
    /// which the pool waits [`PoolLimits::back_off`] before starting again.
    pub failures_before_back_off: u32,
    pub back_off: Duration,
}

impl PoolLimits {
    /// `--min` and `--max` with the pool's defaults for the rest.
    pub fn new(min: u32, max: u32) -> Self {
        PoolLimits {
            min,
            max: max.max(min),
            starts_per_tick: 4,
            failures_before_back_off: 3,
            back_off: Duration::from_secs(30),
        }
    }
}

/// What the pool sees now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolView {
    /// Jobs waiting in the pool's queue (the server's `queued`, unclaimed).
    pub queued: u64,
    /// This host's processes that are alive (starting, waiting for a job, or running one).
    pub alive: u32,
    /// Of those, the ones running a job.
    pub busy: u32,
    /// Processes in a row that exited unsuccessfully before taking a job (0 after any that
    /// took one).
    pub failed_in_a_row: u32,
    /// How long ago the last of those failures was (`None`: none).
    pub since_last_failure: Option<Duration>,
}

/// What to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolStep {
    /// Start this many processes (at least 1).
    Start(u32),
    /// Enough are alive.
    Hold,
    /// Starts keep failing: start nothing for this long.
    BackOff(Duration),
}

/// How many processes the pool wants: one per waiting job and one per busy process, within
/// `[min, max]`.
pub fn wanted(limits: &PoolLimits, view: &PoolView) -> u32 {
    let jobs = view.queued.saturating_add(u64::from(view.busy));
    let jobs = u32::try_from(jobs).unwrap_or(u32::MAX);
    jobs.clamp(limits.min, limits.max.max(limits.min))
}

/// The pool's step now (see the module's documentation).
pub fn decide(limits: &PoolLimits, view: &PoolView) -> PoolStep {
    if view.failed_in_a_row >= limits.failures_before_back_off.max(1) {
        let waited = view.since_last_failure.unwrap_or(Duration::ZERO);
        if waited < limits.back_off {
            return PoolStep::BackOff(limits.back_off - waited);
        }
    }
    let missing = wanted(limits, view).saturating_sub(view.alive);
    match missing.min(limits.starts_per_tick.max(1)) {
        0 => PoolStep::Hold,
        n => PoolStep::Start(n),
    }
}

/// The pool's status line for a person, e.g.
/// `pool 0-8: 3 alive (2 busy) · 5 queued · wants 7 · starting 4`.
pub fn status(limits: &PoolLimits, view: &PoolView, step: PoolStep) -> String {
    let mut line = format!(
        "pool {}-{}: {} alive ({} busy) · {} queued · wants {}",
        limits.min,
        limits.max.max(limits.min),
        view.alive,
        view.busy,
        view.queued,
        wanted(limits, view)
    );
    match step {
        PoolStep::Start(n) => line.push_str(&format!(" · starting {n}")),
        PoolStep::Hold => {}
        PoolStep::BackOff(left) => line.push_str(&format!(
            " · {} starts failed in a row, next try in {} s",
            view.failed_in_a_row,
            left.as_secs().max(1)
        )),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(queued: u64, alive: u32, busy: u32) -> PoolView {
        PoolView {
            queued,
            alive,
            busy,
            ..PoolView::default()
        }
    }

    #[test]
    fn one_process_per_waiting_job_within_the_ceiling() {
        let limits = PoolLimits::new(0, 8);
        assert_eq!(decide(&limits, &view(3, 0, 0)), PoolStep::Start(3));
        // Past the ceiling: the ceiling, four at a time.
        assert_eq!(decide(&limits, &view(50, 0, 0)), PoolStep::Start(4));
        assert_eq!(decide(&limits, &view(50, 4, 4)), PoolStep::Start(4));
        assert_eq!(decide(&limits, &view(50, 8, 8)), PoolStep::Hold);
        assert_eq!(wanted(&limits, &view(50, 8, 8)), 8);
    }

    #[test]
    fn idle_processes_take_the_waiting_jobs_first() {
        let limits = PoolLimits::new(0, 8);
        // Two alive and idle, three waiting: one more.
        assert_eq!(decide(&limits, &view(3, 2, 0)), PoolStep::Start(1));
        // Two busy and three waiting: five wanted, two alive.
        assert_eq!(decide(&limits, &view(3, 2, 2)), PoolStep::Start(3));
    }

    #[test]
    fn the_floor_stays_alive_and_zero_is_a_floor_too() {
        let floor = PoolLimits::new(2, 8);
        assert_eq!(decide(&floor, &view(0, 0, 0)), PoolStep::Start(2));
        assert_eq!(decide(&floor, &view(0, 2, 0)), PoolStep::Hold);
        // Nothing waits and nothing runs: none wanted, and the idle ones leave on their own.
        let to_zero = PoolLimits::new(0, 8);
        assert_eq!(wanted(&to_zero, &view(0, 3, 0)), 0);
        assert_eq!(decide(&to_zero, &view(0, 3, 0)), PoolStep::Hold);
        assert_eq!(decide(&to_zero, &view(0, 0, 0)), PoolStep::Hold);
    }

    #[test]
    fn a_ceiling_below_the_floor_is_the_floor() {
        let limits = PoolLimits::new(3, 1);
        assert_eq!(limits.max, 3);
        assert_eq!(wanted(&limits, &view(10, 0, 0)), 3);
        assert_eq!(decide(&limits, &view(10, 0, 0)), PoolStep::Start(3));
    }

    #[test]
    fn starts_that_keep_failing_back_off_then_try_again() {
        let limits = PoolLimits::new(1, 4);
        let failing = |in_a_row, ago| PoolView {
            queued: 2,
            failed_in_a_row: in_a_row,
            since_last_failure: Some(Duration::from_secs(ago)),
            ..PoolView::default()
        };
        assert_eq!(decide(&limits, &failing(2, 0)), PoolStep::Start(2));
        assert_eq!(
            decide(&limits, &failing(3, 10)),
            PoolStep::BackOff(Duration::from_secs(20))
        );
        assert_eq!(decide(&limits, &failing(3, 30)), PoolStep::Start(2));
    }

    #[test]
    fn the_status_line_says_what_runs_waits_and_happens() {
        let limits = PoolLimits::new(0, 8);
        let now = view(5, 3, 2);
        assert_eq!(
            status(&limits, &now, decide(&limits, &now)),
            "pool 0-8: 3 alive (2 busy) · 5 queued · wants 7 · starting 4"
        );
        let held = view(0, 1, 1);
        assert_eq!(
            status(&limits, &held, decide(&limits, &held)),
            "pool 0-8: 1 alive (1 busy) · 0 queued · wants 1"
        );
        let failing = PoolView {
            failed_in_a_row: 3,
            since_last_failure: Some(Duration::from_secs(5)),
            ..view(2, 0, 0)
        };
        assert_eq!(
            status(&limits, &failing, decide(&limits, &failing)),
            "pool 0-8: 0 alive (0 busy) · 2 queued · wants 2 · 3 starts failed in a row, next try in 25 s"
        );
    }
}
