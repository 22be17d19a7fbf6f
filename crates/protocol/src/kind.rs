//! What the edge's stored records are of, by the names the schema and the API carry: the
//! kinds of evidence a completion takes into custody, the kinds of events on a job's
//! timeline and in the audit trail, how a runner proves who it is, and an API key's role.

use crate::wire_name::wire_names;

wire_names! {
    /// A kind of evidence row (`completion_evidence.evidence_kind`, and `kind` of a job's
    /// evidence links in the API). Each names its table: `evaluation_run` rows live in
    /// `evaluation_runs`, and so on. The schema's CHECK constraint lists the same names.
    pub enum EvidenceKind: "an evidence kind" {
        /// The evaluation run a completion reports; the other kinds belong to one.
        EvaluationRun = "evaluation_run",
        /// One test's result in an evaluation run.
        TestResult = "test_result",
        /// One cost (in micro-units of a currency) of an evaluation run.
        CostRecord = "cost_record",
        /// One model call an evaluation run made.
        ModelCall = "model_call",
        /// One trace of an evaluation run.
        Trace = "trace",
    }
}

wire_names! {
    /// A kind of event (`job_events.type`, and `type` of an event in the API): dotted, lower
    /// case, subject first. The schema checks the shape only, so that a new kind needs no
    /// migration; this list is every kind the edge writes.
    pub enum EventKind: "an event kind" {
        /// A job was enqueued (written with the job, atomically).
        JobEnqueued = "job.enqueued",
        /// A runner was granted a claim on the job.
        JobClaimed = "job.claimed",
        /// The claim's first heartbeat: the job runs.
        JobStarted = "job.started",
        /// Cancellation was asked of a job a runner holds; it learns so on its next heartbeat.
        JobCancelRequested = "job.cancel_requested",
        /// The job ended cancelled: asked while nobody held it, its lease lapsed after a
        /// cancellation request, or its attempts ran out.
        JobCancelled = "job.cancelled",
        /// The active claim's lease lapsed without a heartbeat.
        JobLeaseLost = "job.lease_lost",
        /// Recovery put the job back in the queue for another attempt.
        JobRequeued = "job.requeued",
        /// The runner handed its claim back.
        JobReleased = "job.released",
        /// An accepted completion finished the job.
        JobCompleted = "job.completed",
        /// A completion repeated the accepted one; recorded, nothing changed.
        JobCompletionDuplicate = "job.completion_duplicate",
        /// A completion contradicted the accepted one; recorded and refused.
        JobCompletionConflict = "job.completion_conflict",
        /// A completion came from an attempt that no longer held the job; recorded and refused.
        JobCompletionStale = "job.completion_stale",
        /// The job holds as many refused completion decisions as it stores; later ones are
        /// counted on the job from here on.
        JobCompletionDecisionsCapped = "job.completion_decisions_capped",
        /// An admin registered a bootstrap-token runner.
        RunnerRegistered = "runner.registered",
        /// A key-pair runner enrolled itself (it waits for approval).
        RunnerEnrolled = "runner.enrolled",
        /// An admin approved a pending runner.
        RunnerApproved = "runner.approved",
        /// An admin returned a draining or lost runner to service.
        RunnerActivated = "runner.activated",
        /// An admin stopped new work going to the runner.
        RunnerDrained = "runner.drained",
        /// An admin revoked the runner, permanently.
        RunnerRevoked = "runner.revoked",
        /// An admin changed the runner's tags.
        RunnerTagsChanged = "runner.tags_changed",
        /// An admin rotated the runner's bootstrap token.
        RunnerRotated = "runner.rotated",
        /// A runner waiting for approval was revoked, not approved in time.
        RunnerEnrollmentExpired = "runner.enrollment_expired",
        /// An API key was created.
        ApiKeyCreated = "api_key.created",
        /// An API key was revoked.
        ApiKeyRevoked = "api_key.revoked",
        /// An admin set the organization's enrollment policy.
        EnrollmentPolicySet = "enrollment.policy_set",
        /// An admin created an enrollment token.
        EnrollmentTokenCreated = "enrollment.token_created",
        /// An admin revoked an enrollment token.
        EnrollmentTokenRevoked = "enrollment.token_revoked",
        /// An admin set how many days the organization keeps its finished jobs.
        RetentionSet = "retention.set",
        /// A retention pass deleted jobs of the organization (how many, in its detail).
        RetentionPass = "retention.pass",
        /// An admin held a finished job: retention passes it by (the job's id in its detail).
        JobHeld = "job.held",
        /// An admin released a held job: retention applies to it again.
        JobHoldReleased = "job.hold_released",
        /// A release version was promoted to an environment.
        ReleasePromoted = "release.promoted",
    }
}

wire_names! {
    /// Where an evaluation run is (`evaluation_runs.status`, `status` of a run in the API). The
    /// schema's CHECK constraint lists the same names.
    pub enum RunStatus: "an evaluation run status" {
        /// Created, not finished: where every run starts.
        Running = "running",
        /// Finished.
        Completed = "completed",
        /// Finished with a failure.
        Failed = "failed",
        /// Stopped before it finished.
        Cancelled = "cancelled",
    }
}

wire_names! {
    /// A test result's outcome (`test_results.status`, `status` of a test result in the API;
    /// `passed` is true exactly for `passed`). The schema's CHECK constraint lists the same
    /// names.
    pub enum TestStatus: "a test result status" {
        Passed = "passed",
        Failed = "failed",
        /// The test could not run to a verdict.
        Error = "error",
        Skipped = "skipped",
    }
}

wire_names! {
    /// How a model call ended (`model_calls.status`, `status` of a model call in the API). The
    /// schema's CHECK constraint lists the same names.
    pub enum ModelCallStatus: "a model call status" {
        Succeeded = "succeeded",
        Failed = "failed",
    }
}

wire_names! {
    /// What a cost was spent on (`cost_records.category`, `category` of a cost record in the
    /// API; `other` when not given). The schema's CHECK constraint lists the same names.
    pub enum CostCategory: "a cost category" {
        Model = "model",
        Sandbox = "sandbox",
        Tool = "tool",
        Other = "other",
    }
}

wire_names! {
    /// How a runner proves who it is (`runners.identity_model`, `identityModel` in the API).
    /// The schema's CHECK constraint lists the same names.
    pub enum IdentityModel: "an identity model" {
        /// Registered by an admin; exchanges a bootstrap token for sessions.
        Bootstrap = "bootstrap",
        /// Enrolled itself with an ed25519 key; answers challenges for sessions.
        Keypair = "keypair",
    }
}

wire_names! {
    /// An API key's role (`api_keys.role`, `role` in the API). The schema's CHECK constraint
    /// lists the same names.
    pub enum Role: "a role" {
        /// May administer runners, besides what its scopes allow.
        Admin = "admin",
        /// What its scopes allow.
        Member = "member",
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::wire_name::assert_round_trips;

    #[test]
    fn evidence_kinds_round_trip_by_name() {
        assert_round_trips(EvidenceKind::ALL, EvidenceKind::as_str, EvidenceKind::parse);
        assert_eq!(EvidenceKind::parse("evaluationRun"), None);
    }

    #[test]
    fn identity_models_and_roles_round_trip_by_name() {
        assert_round_trips(
            IdentityModel::ALL,
            IdentityModel::as_str,
            IdentityModel::parse,
        );
        assert_round_trips(Role::ALL, Role::as_str, Role::parse);
        assert_round_trips(RunStatus::ALL, RunStatus::as_str, RunStatus::parse);
        assert_round_trips(TestStatus::ALL, TestStatus::as_str, TestStatus::parse);
        assert_round_trips(CostCategory::ALL, CostCategory::as_str, CostCategory::parse);
        assert_round_trips(
            ModelCallStatus::ALL,
            ModelCallStatus::as_str,
            ModelCallStatus::parse,
        );
    }

    #[test]
    fn event_kinds_round_trip_by_name() {
        assert_round_trips(EventKind::ALL, EventKind::as_str, EventKind::parse);
        assert_eq!(EventKind::parse("job.completion_recorded"), None);
    }

    /// `job_events.type`'s CHECK (migrations/0006_free_hand_backs.sql): `GLOB '[a-z]*.[a-z]*'
    /// AND NOT GLOB '*[^a-z0-9_.]*'`.
    #[test]
    fn every_event_kind_has_the_shape_the_schema_checks() {
        for kind in EventKind::ALL {
            let name = kind.as_str();
            let (subject, what) = name.split_once('.').expect("dotted");
            assert!(
                subject.starts_with(|c: char| c.is_ascii_lowercase())
                    && what.starts_with(|c: char| c.is_ascii_lowercase())
                    && name.chars().all(|c| c.is_ascii_lowercase()
                        || c.is_ascii_digit()
                        || c == '_'
                        || c == '.'),
                "{name}"
            );
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn evidence_kinds_are_the_schemas_and_the_documents() {
        let names: Vec<&str> = EvidenceKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            crate::documents::check_list("completion_evidence", "evidence_kind"),
            names
        );
        assert_eq!(
            crate::documents::schema_enum("JobEvidenceLink", "kind"),
            names
        );
    }

    /// The document lists the runner events in `RunnerEvent`'s description.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn the_runner_events_are_the_ones_the_document_lists() {
        let document = crate::documents::openapi();
        let description = document["components"]["schemas"]["RunnerEvent"]["description"]
            .as_str()
            .expect("RunnerEvent has a description");
        let listed: Vec<&str> = description
            .split(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == '.'))
            .filter(|word| word.starts_with("runner.") && word.len() > "runner.".len())
            .collect();
        let ours: Vec<&str> = EventKind::ALL
            .iter()
            .map(|k| k.as_str())
            .filter(|name| name.starts_with("runner."))
            .collect();
        assert_eq!(listed, ours);
    }
}
