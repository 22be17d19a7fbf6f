//! Counters (migration 0017): what each organization's jobs did, added to in the batch that
//! did it (last, after its guarded writes and behind its assertions), and the deployment's own
//! passes. `/metrics` reads them; nothing else writes them.

use worker::D1PreparedStatement;

use super::{stmt, Arg, Db};
use crate::error::ApiResult;

/// One of an organization's counters (the schema's CHECK lists the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counter {
    ClaimsGranted,
    /// An accepted completion, by the state it left the job in, or a refused one by decision.
    Completions(&'static str),
    LeasesLost,
    Requeues,
    AttemptsExhausted,
    StreamBytes,
}

/// What a completion with `outcome` counts as (`succeeded`, `failed`, `cancelled`,
/// `duplicate`, `conflict`, `stale`); `None` for any other text.
pub(crate) fn completion(outcome: &str) -> Option<Counter> {
    COMPLETION_OUTCOMES
        .iter()
        .find(|known| **known == outcome)
        .map(|known| Counter::Completions(known))
}

/// The outcomes completions are counted by.
pub(crate) const COMPLETION_OUTCOMES: [&str; 6] = [
    "succeeded",
    "failed",
    "cancelled",
    "duplicate",
    "conflict",
    "stale",
];

impl Counter {
    pub(crate) fn name(self) -> String {
        match self {
            Counter::ClaimsGranted => "claims_granted".to_owned(),
            Counter::Completions(outcome) => format!("completions_{outcome}"),
            Counter::LeasesLost => "leases_lost".to_owned(),
            Counter::Requeues => "requeues".to_owned(),
            Counter::AttemptsExhausted => "attempts_exhausted".to_owned(),
            Counter::StreamBytes => "stream_bytes".to_owned(),
        }
    }
}

/// `n` more of `counter` for organization `org`.
pub(crate) fn add(db: &Db, org: &str, counter: Counter, n: i64) -> ApiResult<D1PreparedStatement> {
    let name = counter.name();
    stmt(
        db,
        include_str!("queries/counters/add.sql"),
        &[org.into(), name.as_str().into(), Arg::Int(n.max(0))],
    )
}

/// One more pass of the deployment's reaper.
pub(crate) fn reaper_pass(db: &Db) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/counters/add_deployment.sql"),
        &["reaper_passes".into()],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_a_name_the_schema_knows() {
        let schema = include_str!("../../migrations/0017_counters.sql");
        let mut all = vec![
            Counter::ClaimsGranted,
            Counter::LeasesLost,
            Counter::Requeues,
            Counter::AttemptsExhausted,
            Counter::StreamBytes,
        ];
        all.extend(COMPLETION_OUTCOMES.iter().filter_map(|o| completion(o)));
        assert_eq!(all.len(), 11);
        for counter in all {
            assert!(
                schema.contains(&format!("'{}'", counter.name())),
                "{counter:?}"
            );
        }
        assert_eq!(completion("accepted"), None);
    }
}
