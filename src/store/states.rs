//! The protocol's sets of states as statement parameters: a statement that tests a row's state
//! against a set binds it from here (`state IN (SELECT value FROM json_each(?N))`) rather than
//! writing the names, so the set is written once, in the protocol crate. Each set is pinned
//! below as its exact JSON, and the schema tests bind the same text (`tests/schema/harness.py`,
//! which the tests read), as `runners.rs` does for the runner machine.

use serde_json::Value;

use edgerunner_protocol::envelope::Environment;
use edgerunner_protocol::state::JobState;

/// `["name", …]` of `names`, in their order.
fn array<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    Value::Array(names.into_iter().map(Value::from).collect()).to_string()
}

/// The job states in which a runner holds the job ([`JobState::is_active`]), in
/// [`JobState::ALL`] order.
pub(crate) fn held_job_states() -> String {
    array(
        JobState::ALL
            .into_iter()
            .filter(|state| state.is_active())
            .map(JobState::as_str),
    )
}

/// The job states no input moves on ([`JobState::is_terminal`]), in [`JobState::ALL`] order.
pub(crate) fn terminal_job_states() -> String {
    array(
        JobState::ALL
            .into_iter()
            .filter(|state| state.is_terminal())
            .map(JobState::as_str),
    )
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
}
