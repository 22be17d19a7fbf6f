//! The protocol's sets of states as statement parameters: a statement that tests a row's state
//! against a set binds it from here (`state IN (SELECT value FROM json_each(?N))`) rather than
//! writing the names, so the set is written once, in the protocol crate. Each set is pinned
//! below as its exact JSON, and the schema tests bind the same text (`tests/schema/harness.py`,
//! which the tests read), as `runners.rs` does for the runner machine.

use serde_json::Value;

use edgerunner_protocol::envelope::Environment;
use edgerunner_protocol::state::JobState;

/// `["name", …]` of `names`, in their order: a set as a statement binds it.
pub(crate) fn array<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    Value::Array(names.into_iter().map(Value::from).collect()).to_string()
}

/// The names of the job states that satisfy `rule`, in [`JobState::ALL`] order.
fn job_states_where(rule: fn(JobState) -> bool) -> Vec<&'static str> {
    JobState::ALL
        .into_iter()
        .filter(|state| rule(*state))
        .map(JobState::as_str)
        .collect()
}

/// The job states in which a runner holds the job ([`JobState::is_active`]).
pub(crate) fn held_job_states() -> String {
    array(job_states_where(JobState::is_active))
}

/// The job states no input moves on ([`JobState::is_terminal`]).
pub(crate) fn terminal_job_states() -> String {
    array(job_states_where(JobState::is_terminal))
}

/// The release environments in promotion order ([`Environment::ALL`]): a promotion's place is
/// its environment's index here (`releases/promotions_of_*.sql`).
pub(crate) fn environment_order() -> String {
    array(Environment::ALL.into_iter().map(Environment::as_str))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::{environment_order, held_job_states, terminal_job_states};

    const SCHEMA_TESTS: &str = include_str!("../../tests/schema/harness.py");

    /// The schema tests bind `name` to exactly `value` (a Python string literal).
    pub(crate) fn assert_schema_tests_bind(name: &str, value: &str) {
        let line = format!("\n{name} = '{value}'\n");
        assert!(
            SCHEMA_TESTS.contains(&line),
            "tests/schema/harness.py must bind {name} = '{value}'"
        );
    }

    #[test]
    fn a_runner_holds_a_claimed_running_or_cancel_requested_job() {
        assert_eq!(
            held_job_states(),
            r#"["claimed","running","cancel_requested"]"#
        );
        assert_schema_tests_bind("HELD_JOB_STATES", &held_job_states());
    }

    #[test]
    fn a_job_ends_succeeded_failed_or_cancelled() {
        assert_eq!(
            terminal_job_states(),
            r#"["succeeded","failed","cancelled"]"#
        );
        assert_schema_tests_bind("TERMINAL_JOB_STATES", &terminal_job_states());
    }

    #[test]
    fn environments_are_promoted_dev_staging_prod() {
        assert_eq!(environment_order(), r#"["dev","staging","prod"]"#);
        assert_schema_tests_bind("ENVIRONMENT_ORDER", &environment_order());
    }

    /// The quoted names in `sql`'s code (its `--` comments left out), in the order written.
    fn literals(sql: &str) -> Vec<&str> {
        sql.lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .flat_map(|code| code.split('\'').skip(1).step_by(2))
            .collect()
    }

    /// The quota's charge for an evidence row picks the row's view by its kind's name (one
    /// statement for every kind, so that a batch holds it whatever it inserted): its names are
    /// the protocol's kinds, in their order.
    #[test]
    fn the_evidence_charge_names_the_protocols_kinds() {
        use edgerunner_protocol::kind::EvidenceKind;

        let kinds: Vec<&str> = EvidenceKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            literals(include_str!("queries/usage/evidence_added.sql")),
            kinds
        );
    }

    /// The statements that must write the states they test: SQLite uses a partial index only
    /// for a WHERE that repeats its literal text (a bound state leaves `INDEXED BY` without a
    /// plan), so these names stay in the SQL. Each is checked here against the protocol's set,
    /// so that the set is still decided once: a state added to or moved out of a set fails
    /// this test until the statements (and their index, in a migration) follow.
    #[test]
    fn the_names_a_partial_index_needs_are_the_protocols_sets() {
        use edgerunner_protocol::archive::ArchiveState;
        use edgerunner_protocol::completion::Decision;
        use edgerunner_protocol::state::{ClaimState, JobState, RunnerState};

        let held = super::job_states_where(JobState::is_active);
        let terminal = super::job_states_where(JobState::is_terminal);
        let live: Vec<&str> = [JobState::Queued.as_str()]
            .into_iter()
            .chain(held.iter().copied())
            .collect();
        let archive_due: Vec<&str> = terminal
            .iter()
            .copied()
            .chain([ArchiveState::Pruned.as_str()])
            .collect();
        let revoked = vec![RunnerState::Revoked.as_str()];
        let statements: [(&str, &str, Vec<&str>); 13] = [
            (
                "claim_candidates",
                include_str!("queries/claim_candidates.sql"),
                vec![JobState::Queued.as_str()],
            ),
            (
                "expired_leases",
                include_str!("queries/expired_leases.sql"),
                held.clone(),
            ),
            (
                "expired_leases_in_org",
                include_str!("queries/expired_leases_in_org.sql"),
                held.clone(),
            ),
            ("queues/live", include_str!("queries/queues/live.sql"), live),
            (
                "archive_due",
                include_str!("queries/archive_due.sql"),
                archive_due,
            ),
            (
                "claim_by_request",
                include_str!("queries/claim_by_request.sql"),
                vec![ClaimState::Active.as_str()],
            ),
            (
                "jobs/select_accepted",
                include_str!("queries/jobs/select_accepted.sql"),
                vec![Decision::Accepted.as_str()],
            ),
            (
                "runners/spent_ephemeral",
                include_str!("queries/runners/spent_ephemeral.sql"),
                vec![RunnerState::Draining.as_str()],
            ),
            (
                "runners/delete_retired_ephemeral",
                include_str!("queries/runners/delete_retired_ephemeral.sql"),
                revoked.clone(),
            ),
            (
                "runners/delete_retired_ephemeral_challenges",
                include_str!("queries/runners/delete_retired_ephemeral_challenges.sql"),
                revoked.clone(),
            ),
            (
                "runners/delete_retired_ephemeral_credentials",
                include_str!("queries/runners/delete_retired_ephemeral_credentials.sql"),
                revoked.clone(),
            ),
            (
                "runners/delete_retired_ephemeral_events",
                include_str!("queries/runners/delete_retired_ephemeral_events.sql"),
                revoked.clone(),
            ),
            (
                "runners/delete_retired_ephemeral_files",
                include_str!("queries/runners/delete_retired_ephemeral_files.sql"),
                revoked,
            ),
        ];
        for (name, sql, expected) in statements {
            assert_eq!(literals(sql), expected, "{name}.sql");
        }
        // The reading itself: a comment's quotes are not code.
        assert_eq!(
            literals("-- 'x'\nSELECT 1 WHERE a = 'y' AND b IN ('z', 'w') -- 'v'"),
            ["y", "z", "w"]
        );
    }
}
