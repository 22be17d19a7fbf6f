//! The claim query's plan on local D1: the run fails unless it is an index search.

use std::path::Path;

use serde_json::{json, Value};

use super::{Bench, RUNTIME};
use crate::error::{BenchError, Res};

/// The claim's matching query planned by local D1 itself: it must search jobs_queue and never
/// scan the jobs table.
pub(crate) fn explain_claim(bench: &Bench, query: &Path) -> Res<Value> {
    let text = std::fs::read_to_string(query).map_err(BenchError::io("read the claim query"))?;
    let mut sql: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join(" ");
    for (param, literal) in [
        ("?7", "10".to_owned()),
        ("?6", "''".to_owned()),
        ("?5", "0".to_owned()),
        ("?4", "0".to_owned()),
        ("?3", format!("'{RUNTIME}'")),
        ("?2", "'prompt'".to_owned()),
        ("?1", format!("'{}'", bench.db.org())),
    ] {
        sql = sql.replace(param, &literal);
    }
    let details = bench.db.plan(&sql)?;
    let uses_index = details.iter().any(|d| d.contains("USING INDEX jobs_queue"));
    let scans = details.iter().any(|d| d.contains("SCAN jobs"));
    if !uses_index || scans {
        return Err(BenchError::unexpected(format!(
            "the claim query's plan on local D1 is not an index search: {details:?}"
        )));
    }
    Ok(json!({ "plan": details, "usesJobsQueue": uses_index, "scansJobs": scans }))
}
