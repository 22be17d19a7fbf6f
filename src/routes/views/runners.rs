//! The runner views: a runner record (with the admin actions its state allows), its files,
//! and its claims.

use std::collections::BTreeMap;

use edgerunner_protocol::capability::{ExecutionKind, LimitKind, Limits};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::IdentityModel;
use edgerunner_protocol::state::{ClaimState, RunnerInput, RunnerState};
use serde::Serialize;
use serde_json::Value;

use super::jobs::EventView;
use super::queues::OFFLINE_AFTER_MILLIS;
use super::stored_json;
use crate::error::ApiError;
use crate::platform::rfc3339;
use crate::store::runners::{FileMeta, RunnerClaimRow, RunnerRow};

/// `RunnerRecord`: a runner as admins (and the runner itself) see it. Never a secret or a
/// secret's hash.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunnerView<'a> {
    id: &'a str,
    organization_id: &'a str,
    identity_model: &'a str,
    name: &'a str,
    runner_key: Option<&'a str>,
    state: &'a str,
    /// What an administrator may do to the runner now ([`runner_actions`]).
    actions: Vec<&'static str>,
    state_reason: Option<&'a str>,
    product: Option<&'a str>,
    version: Option<&'a str>,
    fingerprint: Option<&'a str>,
    public_key: Option<&'a str>,
    key_id: Option<&'a str>,
    address: Option<&'a str>,
    machine: Option<Value>,
    capabilities: Value,
    #[serde(rename = "capabilityHash")]
    capabilities_hash: &'a str,
    protocol_version: &'a str,
    problem_types: Value,
    external: bool,
    /// Registered for one job: its grant drains it, and the cron pass then revokes it.
    ephemeral: bool,
    tags: Value,
    max_concurrent_jobs: i64,
    active_claims: i64,
    completed_jobs: i64,
    registered_at: Option<String>,
    /// When the bootstrap token stops exchanging (`null`: a key-pair runner, or a token issued
    /// before tokens had a default lifetime, valid until rotated).
    bootstrap_token_expires_at: Option<String>,
    approved_at: Option<String>,
    revoked_at: Option<String>,
    last_seen_at: Option<String>,
    last_heartbeat_at: Option<String>,
    /// Whether it talks to the server now, beside its admin `state`.
    connection: ConnectionView,
    files: Vec<FileView<'a>>,
}

/// Whether a runner talks to the server, beside its admin state (issue 45): `never_connected`
/// (no session, claim or heartbeat ever), `online` (seen within the last
/// [`OFFLINE_AFTER_MILLIS`]: an idle runner renews its credential at least every ten minutes,
/// a busy one heartbeats), or `offline` since it was last seen. The queues view counts a runner
/// offline by the same rule.
#[derive(Serialize, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConnectionView {
    status: &'static str,
    /// Since when it is offline (its last sight); `null` unless offline.
    since: Option<String>,
}

pub(crate) fn connection(
    state: RunnerState,
    last_seen_at: Option<i64>,
    now: i64,
) -> ConnectionView {
    // A revoked runner can open no session: never online, however lately it was seen.
    let revoked = state == RunnerState::Revoked;
    match last_seen_at {
        None => ConnectionView {
            status: "never_connected",
            since: None,
        },
        Some(at) if !revoked && now.saturating_sub(at) <= OFFLINE_AFTER_MILLIS => ConnectionView {
            status: "online",
            since: None,
        },
        Some(at) => ConnectionView {
            status: "offline",
            since: rfc3339(at),
        },
    }
}

/// The administrator's actions, in the order the panel offers them (the permanent one last):
/// each a command of the runner machine (`PATCH …/{id}` `status`), or the bootstrap token's
/// rotation (`POST …/{id}/rotate`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunnerAction {
    Command(RunnerInput),
    Rotate,
}

const RUNNER_ACTIONS: [RunnerAction; 5] = [
    RunnerAction::Command(RunnerInput::Approve),
    RunnerAction::Command(RunnerInput::Activate),
    RunnerAction::Command(RunnerInput::Drain),
    RunnerAction::Rotate,
    RunnerAction::Command(RunnerInput::Revoke),
];

impl RunnerAction {
    fn name(self) -> &'static str {
        match self {
            RunnerAction::Command(input) => input.as_str(),
            RunnerAction::Rotate => "rotate",
        }
    }

    /// A command applies when the runner machine takes it and it moves the runner (a legal
    /// no-op, like draining a draining runner, is not offered); rotation by the rotate route's
    /// own rule.
    fn applies(self, state: RunnerState, identity_model: &str) -> bool {
        match self {
            RunnerAction::Command(input) => state.transition(input).is_ok_and(|next| next != state),
            RunnerAction::Rotate => rotation_refusal(identity_model, state).is_none(),
        }
    }
}

/// The administrator's actions that apply to a runner in `state`, by name. A drained ephemeral
/// runner is spent (migration 0020's `runners_ephemeral_once_drained_stay_drained`): it is
/// never activated again.
pub(crate) fn runner_actions(
    state: RunnerState,
    identity_model: &str,
    ephemeral: bool,
) -> Vec<&'static str> {
    let spent = ephemeral && state == RunnerState::Draining;
    RUNNER_ACTIONS
        .into_iter()
        .filter(|action| action.applies(state, identity_model))
        .filter(|action| !(spent && *action == RunnerAction::Command(RunnerInput::Activate)))
        .map(RunnerAction::name)
        .collect()
}

impl<'a> RunnerView<'a> {
    /// The record with `files` (lists show none), its connection as of `now`.
    pub(crate) fn new(runner: &'a RunnerRow, files: &'a [FileMeta], now: i64) -> Self {
        let ephemeral = runner.ephemeral != 0;
        let actions = runner_actions(runner.state, runner.identity_model.as_str(), ephemeral);
        RunnerView {
            id: &runner.id,
            organization_id: &runner.organization_id,
            identity_model: runner.identity_model.as_str(),
            name: &runner.name,
            runner_key: runner.runner_key.as_deref(),
            state: runner.state.as_str(),
            actions,
            state_reason: runner.state_reason.as_deref(),
            product: runner.product.as_deref(),
            version: runner.version.as_deref(),
            fingerprint: runner.fingerprint.as_deref(),
            public_key: runner.public_key.as_deref(),
            key_id: runner.key_id.as_deref(),
            address: runner.address.as_deref(),
            machine: runner.machine.as_deref().map(stored_json),
            capabilities: stored_json(&runner.capabilities),
            capabilities_hash: &runner.capabilities_hash,
            protocol_version: &runner.protocol_version,
            problem_types: stored_json(&runner.problem_types),
            external: runner.external != 0,
            ephemeral,
            tags: stored_json(&runner.tags),
            max_concurrent_jobs: runner.max_concurrent_jobs,
            active_claims: runner.active_claims,
            completed_jobs: runner.completed_jobs,
            registered_at: rfc3339(runner.registered_at),
            bootstrap_token_expires_at: runner.bootstrap_token_expires_at.and_then(rfc3339),
            approved_at: runner.approved_at.and_then(rfc3339),
            revoked_at: runner.revoked_at.and_then(rfc3339),
            last_seen_at: runner.last_seen_at.and_then(rfc3339),
            last_heartbeat_at: runner.last_heartbeat_at.and_then(rfc3339),
            connection: connection(runner.state, runner.last_seen_at, now),
            files: files.iter().map(FileView::from).collect(),
        }
    }
}

/// `RunnerFile`: one of the files a runner uploaded about itself, without its content.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FileView<'a> {
    name: &'a str,
    size: i64,
    content_hash: &'a str,
    uploaded_at: Option<String>,
}

impl<'a> From<&'a FileMeta> for FileView<'a> {
    fn from(file: &'a FileMeta) -> Self {
        FileView {
            name: &file.name,
            size: file.size,
            content_hash: &file.content_hash,
            uploaded_at: rfc3339(file.uploaded_at),
        }
    }
}

/// `RunnerRegistration`: what a registration may declare: the execution kinds, and the limits
/// a runner gets when it declares none (also the most it may declare), from the protocol.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RegistrationView {
    execution_kinds: Vec<&'static str>,
    default_limits: BTreeMap<&'static str, u64>,
}

impl RegistrationView {
    pub(crate) fn new() -> Self {
        let defaults = Limits::REGISTRATION_DEFAULT;
        RegistrationView {
            execution_kinds: ExecutionKind::ALL.iter().map(|k| k.as_str()).collect(),
            default_limits: LimitKind::ALL
                .iter()
                .map(|kind| (kind.as_str(), defaults.get(*kind)))
                .collect(),
        }
    }
}

/// `RunnerList`: a page of the organization's runners, with the fleet's counts by state, the
/// states in the order a client lists them, and the job slots of the runners that may work.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunnerListView<'a> {
    pub(crate) runners: Vec<RunnerView<'a>>,
    pub(crate) next_cursor: Option<String>,
    pub(crate) counts: BTreeMap<&'static str, i64>,
    pub(crate) states: Vec<&'static str>,
    pub(crate) capacity: CapacityView,
}

/// The job slots in use and in all of the runners that are not revoked.
#[derive(Serialize, Default, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CapacityView {
    pub(crate) in_use: i64,
    pub(crate) maximum: i64,
}

impl<'a> RunnerListView<'a> {
    /// The page's `runners`, and the fleet's `(state, count, in use, maximum)`s.
    pub(crate) fn new(
        runners: Vec<RunnerView<'a>>,
        next_cursor: Option<String>,
        counted: impl IntoIterator<Item = (RunnerState, i64, i64, i64)>,
    ) -> Self {
        let mut counts: BTreeMap<&'static str, i64> =
            RunnerState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        let mut capacity = CapacityView::default();
        for (state, count, in_use, maximum) in counted {
            // Revoked runners never take work again: their slots are no one's.
            if state != RunnerState::Revoked {
                capacity.in_use += in_use;
                capacity.maximum += maximum;
            }
            counts.insert(state.as_str(), count);
        }
        RunnerListView {
            runners,
            next_cursor,
            counts,
            states: RunnerState::ALL.iter().map(|s| s.as_str()).collect(),
            capacity,
        }
    }
}

/// `RunnerClaim`: one of a runner's claims, in its history or among the ones it holds.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunnerClaimView<'a> {
    id: &'a str,
    job_id: &'a str,
    dispatch_attempt: i64,
    state: &'a str,
    issued_at: Option<String>,
    lease_expires_at: Option<String>,
    started_at: Option<String>,
    ended_at: Option<String>,
    end_reason: Option<&'a str>,
    /// Whether the claim holds its job now (its lease runs).
    held: bool,
    /// What its job runs (in a runner's history, not among the claims it holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version_id: Option<i64>,
}

impl<'a> From<&'a RunnerClaimRow> for RunnerClaimView<'a> {
    fn from(claim: &'a RunnerClaimRow) -> Self {
        RunnerClaimView {
            id: &claim.id,
            job_id: &claim.job_id,
            dispatch_attempt: claim.dispatch_attempt,
            state: claim.state.as_str(),
            issued_at: rfc3339(claim.issued_at),
            lease_expires_at: rfc3339(claim.lease_expires_at),
            started_at: claim.started_at.and_then(rfc3339),
            ended_at: claim.ended_at.and_then(rfc3339),
            end_reason: claim.end_reason.as_deref(),
            held: claim.state == ClaimState::Active,
            artifact_name: claim.artifact_name.as_deref(),
            version_id: claim.version_id,
        }
    }
}

/// The answer of a registration (`POST /api/remote-runners`) and of a rotation
/// (`POST …/{id}/rotate`): the runner with its new bootstrap token, which appears in this answer
/// only (only its hash is stored).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RegisteredRunnerView<'a> {
    pub(crate) runner: RunnerView<'a>,
    pub(crate) bootstrap_token: &'a str,
}

/// `POST /api/remote-runners/enroll`'s answer: the key-pair runner as enrolled, with the files
/// it sent.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnrolledView<'a> {
    pub(crate) runner: RunnerView<'a>,
}

/// A runner's claims: its history (`GET …/{id}/claims`, admin) or the ones it holds
/// (`GET …/self/claims`, the runner).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunnerClaimsView<'a> {
    pub(crate) claims: Vec<RunnerClaimView<'a>>,
}

/// `GET …/{id}/events`'s answer: a page of a runner's audit trail, newest first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunnerEventsView<'a> {
    pub(crate) events: Vec<EventView<'a>>,
    pub(crate) next_cursor: Option<String>,
}

/// A page of a runner's files, by name (`GET …/{id}/files`, `GET …/self/files`);
/// `nextCursor` is the last name listed, `null` on the last page.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FilePageView<'a> {
    pub(crate) files: Vec<FileView<'a>>,
    pub(crate) next_cursor: Option<String>,
}

/// Why the bootstrap token of a runner of `identity_model` in `state` cannot be rotated, if it
/// cannot: the rule `routes::runners::rotate` enforces and the runner view's `actions` offer rotation by.
pub(crate) fn rotation_refusal(identity_model: &str, state: RunnerState) -> Option<ApiError> {
    if identity_model != IdentityModel::Bootstrap.as_str() {
        return Some(ApiError::conflict(
            ErrorCode::RotationUnsupported,
            "key-pair runners have no bootstrap token; revoke and enroll a new identity",
        ));
    }
    if !state.can_rotate() {
        return Some(ApiError::conflict(
            ErrorCode::RunnerRevoked,
            "a revoked runner cannot be rotated; register a new one",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;
    use crate::store::events::EventRow;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    /// A row as D1 answers it: its columns by name.
    fn row<T: DeserializeOwned>(columns: Value) -> T {
        serde_json::from_value(columns).unwrap()
    }

    fn runner(identity_model: &str, state: &str) -> RunnerRow {
        row(json!({
            "id": "run_1", "organization_id": "org_1", "identity_model": identity_model,
            "name": "gpu-01", "runner_key": "gpu-01", "bootstrap_token_hash": "secret-hash",
            "bootstrap_token_expires_at": null, "public_key": null, "fingerprint": null,
            "product": null, "version": null, "machine": r#"{"cpus":8}"#, "address": null,
            "state": state, "state_reason": "approved by ops", "capabilities": r#"{"runtimes":["python3.12"]}"#,
            "capabilities_hash": "ab".repeat(32), "protocol_version": "1",
            "problem_types": "[]", "external": 1, "tags": r#"["eu"]"#, "max_concurrent_jobs": 2,
            "active_claims": 1, "credential_generation": 3, "key_id": "rk_0123456789abcdef",
            "registered_at": NOW - 60_000, "approved_at": NOW, "revoked_at": null,
            "last_seen_at": NOW, "last_heartbeat_at": null, "completed_jobs": 4,
            "ephemeral": 0,
        }))
    }

    #[test]
    fn a_runner_reads_as_it_always_has_with_its_actions_and_no_secret() {
        let runner = runner("bootstrap", "active");
        let file: FileMeta = row(json!({
            "name": "lscpu.txt", "size": 12, "content_hash": "cd".repeat(32), "uploaded_at": NOW,
        }));
        let files = [file];
        let view = to_value(&RunnerView::new(&runner, &files, NOW)).unwrap();
        assert_eq!(
            view,
            json!({
                "id": "run_1", "organizationId": "org_1", "identityModel": "bootstrap",
                "name": "gpu-01", "runnerKey": "gpu-01", "state": "active",
                "actions": ["drain", "rotate", "revoke"], "stateReason": "approved by ops",
                "product": null, "version": null, "fingerprint": null, "publicKey": null,
                "keyId": "rk_0123456789abcdef", "address": null, "machine": {"cpus": 8},
                "capabilities": {"runtimes": ["python3.12"]}, "capabilityHash": "ab".repeat(32),
                "protocolVersion": "1", "problemTypes": [], "external": true, "ephemeral": false, "tags": ["eu"],
                "maxConcurrentJobs": 2, "activeClaims": 1, "completedJobs": 4,
                "registeredAt": "2025-12-31T23:59:00.000Z", "bootstrapTokenExpiresAt": null,
                "approvedAt": "2026-01-01T00:00:00.000Z", "revokedAt": null,
                "lastSeenAt": "2026-01-01T00:00:00.000Z", "lastHeartbeatAt": null,
                "connection": {"status": "online", "since": null},
                "files": [{
                    "name": "lscpu.txt", "size": 12, "contentHash": "cd".repeat(32),
                    "uploadedAt": "2026-01-01T00:00:00.000Z",
                }],
            })
        );
        assert!(!view.to_string().contains("secret-hash"));
    }

    #[test]
    fn a_runner_is_never_connected_online_or_offline_since_it_was_last_seen() {
        let at = |last_seen: Option<i64>| {
            to_value(&connection(RunnerState::Active, last_seen, NOW)).unwrap()
        };
        assert_eq!(
            at(None),
            json!({"status": "never_connected", "since": null})
        );
        assert_eq!(at(Some(NOW)), json!({"status": "online", "since": null}));
        assert_eq!(
            at(Some(NOW - OFFLINE_AFTER_MILLIS)),
            json!({"status": "online", "since": null})
        );
        assert_eq!(
            at(Some(NOW - OFFLINE_AFTER_MILLIS - 1)),
            json!({"status": "offline", "since": "2025-12-31T23:44:59.999Z"})
        );
        // Revoked, it is offline from its last sight, however recent.
        assert_eq!(
            to_value(&connection(RunnerState::Revoked, Some(NOW), NOW)).unwrap(),
            json!({"status": "offline", "since": "2026-01-01T00:00:00.000Z"})
        );
    }

    #[test]
    fn each_state_offers_the_actions_that_move_it() {
        let offered = |model: &str, state: RunnerState| runner_actions(state, model, false);
        use RunnerState as S;
        assert_eq!(
            offered("bootstrap", S::PendingApproval),
            ["approve", "rotate", "revoke"]
        );
        assert_eq!(
            offered("bootstrap", S::Active),
            ["drain", "rotate", "revoke"]
        );
        assert_eq!(
            offered("bootstrap", S::Draining),
            ["activate", "rotate", "revoke"]
        );
        assert_eq!(
            offered("bootstrap", S::Lost),
            ["activate", "drain", "rotate", "revoke"]
        );
        assert!(offered("bootstrap", S::Revoked).is_empty());
        // A drained ephemeral runner took its one job: never activated again.
        assert_eq!(
            runner_actions(S::Draining, "bootstrap", true),
            ["rotate", "revoke"]
        );
        assert_eq!(
            runner_actions(S::Active, "bootstrap", true),
            ["drain", "rotate", "revoke"]
        );
        // A key-pair runner has no bootstrap token to rotate.
        assert_eq!(
            offered("keypair", S::PendingApproval),
            ["approve", "revoke"]
        );
        assert!(offered("keypair", S::Revoked).is_empty());
    }

    #[test]
    fn every_admin_command_is_an_action() {
        for input in RunnerInput::ALL {
            let is_command = RunnerInput::from_admin_status(input.as_str()) == Ok(input);
            assert_eq!(
                RUNNER_ACTIONS.contains(&RunnerAction::Command(input)),
                is_command,
                "{input:?}"
            );
        }
    }

    #[test]
    fn a_runner_claim_reads_with_its_job() {
        let claim: RunnerClaimRow = row(json!({
            "id": "job_1-a1", "job_id": "job_1", "dispatch_attempt": 1, "state": "lost",
            "issued_at": NOW, "lease_expires_at": NOW + 30_000, "started_at": NOW,
            "ended_at": NOW + 60_000, "end_reason": "lease_expired",
        }));
        assert_eq!(
            to_value(&RunnerClaimView::from(&claim)).unwrap(),
            json!({
                "id": "job_1-a1", "jobId": "job_1", "dispatchAttempt": 1, "state": "lost",
                "issuedAt": "2026-01-01T00:00:00.000Z",
                "leaseExpiresAt": "2026-01-01T00:00:30.000Z",
                "startedAt": "2026-01-01T00:00:00.000Z", "endedAt": "2026-01-01T00:01:00.000Z",
                "endReason": "lease_expired", "held": false,
            })
        );
    }

    #[test]
    fn a_registration_may_declare_the_protocols_kinds_within_its_default_limits() {
        assert_eq!(
            to_value(&RegistrationView::new()).unwrap(),
            json!({
                "executionKinds": ["prompt", "scorer", "tool", "workflow", "agent"],
                "defaultLimits": {"cpuSeconds": 3600, "memoryMb": 65536, "wallSeconds": 86400,
                                  "outputBytes": 104857600},
            })
        );
    }

    #[test]
    fn a_runner_list_counts_every_state_in_the_protocols_order_and_revoked_slots_are_no_ones() {
        let list = RunnerListView::new(
            Vec::new(),
            None,
            [
                (RunnerState::Active, 2, 1, 4),
                (RunnerState::Revoked, 1, 0, 8),
            ],
        );
        let value = to_value(&list).unwrap();
        assert_eq!(
            value["states"],
            json!(["pending_approval", "active", "draining", "lost", "revoked"])
        );
        assert_eq!(
            value["counts"],
            json!({"pending_approval": 0, "active": 2, "draining": 0, "lost": 0, "revoked": 1})
        );
        assert_eq!(value["capacity"], json!({"inUse": 1, "maximum": 4}));
        assert_eq!(value["nextCursor"], Value::Null);
    }

    #[test]
    fn a_runner_with_its_bootstrap_token_or_as_enrolled_is_the_record_in_an_envelope() {
        let runner = runner("bootstrap", "pending_approval");
        let record = to_value(&RunnerView::new(&runner, &[], NOW)).unwrap();
        assert_eq!(record["state"], "pending_approval");
        assert_eq!(
            to_value(&RegisteredRunnerView {
                runner: RunnerView::new(&runner, &[], NOW),
                bootstrap_token: "erb_secret",
            })
            .unwrap(),
            json!({"runner": record, "bootstrapToken": "erb_secret"})
        );
        assert_eq!(
            to_value(&EnrolledView {
                runner: RunnerView::new(&runner, &[], NOW),
            })
            .unwrap(),
            json!({"runner": record})
        );
    }

    #[test]
    fn a_runners_claims_events_and_files_read_as_they_always_have() {
        let claim: RunnerClaimRow = row(json!({
            "id": "job_1-a1", "job_id": "job_1", "dispatch_attempt": 1, "state": "active",
            "issued_at": NOW, "lease_expires_at": NOW + 30_000, "started_at": null,
            "ended_at": null, "end_reason": null,
        }));
        assert_eq!(
            to_value(&RunnerClaimsView {
                claims: vec![RunnerClaimView::from(&claim)],
            })
            .unwrap(),
            json!({"claims": [{
                "id": "job_1-a1", "jobId": "job_1", "dispatchAttempt": 1, "state": "active",
                "issuedAt": "2026-01-01T00:00:00.000Z",
                "leaseExpiresAt": "2026-01-01T00:00:30.000Z", "startedAt": null,
                "endedAt": null, "endReason": null, "held": true,
            }]})
        );
        let event: EventRow = row(json!({
            "id": 7, "job_id": null, "runner_id": "run_1", "claim_id": null,
            "actor": "admin:key_1", "type": "runner.rotated", "attempt": null, "reason": null,
            "detail": r#"{"generation":4}"#, "at": NOW,
        }));
        assert_eq!(
            to_value(&RunnerEventsView {
                events: vec![EventView::from(&event)],
                next_cursor: Some("cursor".to_owned()),
            })
            .unwrap(),
            json!({
                "events": [{
                    "id": 7, "jobId": null, "runnerId": "run_1", "claimId": null,
                    "actor": "admin:key_1", "type": "runner.rotated", "attempt": null,
                    "reason": null, "detail": {"generation": 4},
                    "at": "2026-01-01T00:00:00.000Z",
                }],
                "nextCursor": "cursor",
            })
        );
        let file: FileMeta = row(json!({
            "name": "lscpu.txt", "size": 12, "content_hash": "cd".repeat(32), "uploaded_at": NOW,
        }));
        assert_eq!(
            to_value(&FilePageView {
                files: vec![FileView::from(&file)],
                next_cursor: None,
            })
            .unwrap(),
            json!({
                "files": [{
                    "name": "lscpu.txt", "size": 12, "contentHash": "cd".repeat(32),
                    "uploadedAt": "2026-01-01T00:00:00.000Z",
                }],
                "nextCursor": null,
            })
        );
    }
}
