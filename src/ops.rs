//! What the edge (and one object another) asks a Durable Object to do: one serde variant per
//! operation, with typed fields, so that a missing or mistyped field is an error at the
//! object's door, never a default. Externally tagged (`{"heartbeat": {…}}`): the variant is
//! read before its fields, so a chunk's or a completion's JSON (whose number lexemes the
//! protocol hashes) reaches the object unbuffered and intact.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dispatch_do::Stamp;

/// An operation of a job's object (`JobObject`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum JobOp {
    /// A runner's object's alarm, at the first lease of a claim it granted: does this object
    /// watch that lease now (it wrote since, and its alarm is set, or the claim is over)? If
    /// not, recovery looks at the lease.
    Watch { job_id: String, attempt: i64 },
    Heartbeat {
        job_id: String,
        holder: Holder,
        claim_id: String,
        extend_seconds: i64,
    },
    /// A chunk as the runner sent it.
    Stream {
        job_id: String,
        holder: Holder,
        chunk: Value,
    },
    /// A completion as the runner sent it.
    Complete {
        job_id: String,
        holder: Holder,
        completion: Value,
    },
    /// The holder hands its claim back.
    Release {
        job_id: String,
        holder: Holder,
        claim_id: String,
        reason: String,
    },
    Cancel {
        job_id: String,
        organization_id: String,
        actor: String,
        reason: String,
    },
    /// Recovery's look at the lease (the alarm, the cron pass, an admin's reap).
    Recover { job_id: String, actor: String },
}

impl JobOp {
    pub(crate) fn job_id(&self) -> &str {
        match self {
            JobOp::Watch { job_id, .. }
            | JobOp::Heartbeat { job_id, .. }
            | JobOp::Stream { job_id, .. }
            | JobOp::Complete { job_id, .. }
            | JobOp::Release { job_id, .. }
            | JobOp::Cancel { job_id, .. }
            | JobOp::Recover { job_id, .. } => job_id,
        }
    }

    /// The runner a runner's operation comes from.
    pub(crate) fn holder(&self) -> Option<&Holder> {
        match self {
            JobOp::Heartbeat { holder, .. }
            | JobOp::Stream { holder, .. }
            | JobOp::Complete { holder, .. }
            | JobOp::Release { holder, .. } => Some(holder),
            JobOp::Watch { .. } | JobOp::Cancel { .. } | JobOp::Recover { .. } => None,
        }
    }

    /// The operation's name, for the request path and logs.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            JobOp::Watch { .. } => "watch",
            JobOp::Heartbeat { .. } => "heartbeat",
            JobOp::Stream { .. } => "stream",
            JobOp::Complete { .. } => "complete",
            JobOp::Release { .. } => "release",
            JobOp::Cancel { .. } => "cancel",
            JobOp::Recover { .. } => "recover",
        }
    }
}

/// The runner a credential names, as the edge verified it (signature and expiry) without
/// reading D1; its generation is checked against the runner's row by the job's object.
#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Holder {
    pub(crate) runner_id: String,
    pub(crate) organization_id: String,
    pub(crate) generation: i64,
}

/// An operation of a runner's object (`RunnerObject`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum RunnerOp {
    Claim {
        organization_id: String,
        runner_id: String,
        generation: i64,
        served_targets: Option<Value>,
        /// The runner's idempotency key: the same key again answers the same claim.
        request_id: Option<String>,
        /// How long the claim may wait for a job (the body's `waitSeconds`), 0 to answer at once.
        /// The edge does the waiting; the object only makes sure a long poll has a stamp to wait on.
        #[serde(default)]
        wait_ms: u32,
        /// The organization's queue stamp as the edge just looked at it (a woken long poll).
        #[serde(default)]
        stamp: Option<Stamp>,
    },
    /// The benchmark floor (the `bench-floor` build only).
    Floor,
}

impl RunnerOp {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RunnerOp::Claim { .. } => "claim",
            RunnerOp::Floor => "floor",
        }
    }
}

/// An operation of an organization's dispatcher (`Dispatcher`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum DispatchOp {
    /// The organization's claimable work may have changed.
    Touch { organization_id: String },
    /// The stamp now, or once it is no longer `known` (at most `wait_ms` later). With
    /// `pass_on`, the caller was woken at `known` and its runner found nothing: the wake goes
    /// on to another waiting claim (see `dispatch_do`).
    Look {
        organization_id: String,
        known: Option<Stamp>,
        wait_ms: u32,
        #[serde(default)]
        pass_on: bool,
    },
}

impl DispatchOp {
    pub(crate) fn organization_id(&self) -> &str {
        match self {
            DispatchOp::Touch { organization_id }
            | DispatchOp::Look {
                organization_id, ..
            } => organization_id,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            DispatchOp::Touch { .. } => "touch",
            DispatchOp::Look { .. } => "look",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chunk_keeps_its_number_lexemes_through_the_operation() {
        let chunk: Value = serde_json::from_str(r#"{"payload":{"t":1.000,"x":0.10}}"#).unwrap();
        let sent = chunk.to_string();
        assert!(sent.contains("1.000") && sent.contains("0.10"), "{sent}");
        let op = JobOp::Stream {
            job_id: "job_1".into(),
            holder: Holder {
                runner_id: "run_1".into(),
                organization_id: "org_1".into(),
                generation: 1,
            },
            chunk,
        };
        let text = serde_json::to_string(&op).unwrap();
        let back: JobOp = serde_json::from_str(&text).unwrap();
        let JobOp::Stream { chunk, .. } = back else {
            panic!("not a stream operation: {text}");
        };
        assert_eq!(chunk.to_string(), sent);
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_default() {
        let refused = serde_json::from_value::<JobOp>(
            json!({ "heartbeat": { "jobId": "job_1", "claimId": "job_1-a1", "extendSeconds": 60 } }),
        );
        assert!(refused.is_err());
        let refused = serde_json::from_value::<RunnerOp>(
            json!({ "claim": { "organizationId": "org_1", "runnerId": "run_1", "requestId": null } }),
        );
        assert!(refused.is_err());
    }
}
