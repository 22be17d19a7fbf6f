//! `runners`, `runner_files`, `runner_challenges`: identities, what they said about
//! themselves, and the single-use challenges of key-pair runners.

use serde::Deserialize;
use serde_json::{json, Value};
use worker::D1PreparedStatement;

use super::{all, first, run, stmt, Arg, Db};
use edgerunner_protocol::state::RunnerState;

use crate::error::{ApiError, ApiResult};
use crate::platform::rfc3339;

#[derive(Deserialize)]
pub(crate) struct RunnerRow {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) identity_model: String,
    pub(crate) name: String,
    pub(crate) runner_key: Option<String>,
    pub(crate) bootstrap_token_hash: Option<String>,
    pub(crate) bootstrap_token_expires_at: Option<i64>,
    pub(crate) public_key: Option<String>,
    pub(crate) fingerprint: Option<String>,
    pub(crate) product: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) machine: Option<String>,
    pub(crate) address: Option<String>,
    pub(crate) state: String,
    pub(crate) state_reason: Option<String>,
    pub(crate) capabilities: String,
    pub(crate) capabilities_hash: String,
    pub(crate) protocol_version: String,
    pub(crate) problem_types: String,
    pub(crate) external: i64,
    pub(crate) tags: String,
    pub(crate) max_concurrent_jobs: i64,
    pub(crate) active_claims: i64,
    pub(crate) credential_generation: i64,
    pub(crate) key_id: Option<String>,
    pub(crate) registered_at: i64,
    pub(crate) approved_at: Option<i64>,
    pub(crate) revoked_at: Option<i64>,
    pub(crate) last_seen_at: Option<i64>,
    pub(crate) last_heartbeat_at: Option<i64>,
    pub(crate) completed_jobs: i64,
}

const COLUMNS: &str = "id, organization_id, identity_model, name, runner_key, bootstrap_token_hash, \
    bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state, \
    state_reason, capabilities, capabilities_hash, protocol_version, problem_types, external, tags, \
    max_concurrent_jobs, active_claims, credential_generation, key_id, registered_at, approved_at, \
    revoked_at, last_seen_at, last_heartbeat_at, completed_jobs";

fn parse_json(text: &str) -> Value {
    // Written by us as valid JSON (the schema CHECKs json_valid), so this cannot fail in practice.
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl RunnerRow {
    /// The runner's state, as the protocol crate's machine knows it (the schema's CHECK allows
    /// no other value; one would be an internal error, never a guess).
    pub(crate) fn state(&self) -> ApiResult<RunnerState> {
        RunnerState::parse(&self.state).map_err(ApiError::internal)
    }

    /// The record as admins and the runner itself see it. Never a secret or a secret's hash.
    pub(crate) fn to_json(&self, files: &[FileMeta]) -> Value {
        json!({
            "id": self.id,
            "organizationId": self.organization_id,
            "identityModel": self.identity_model,
            "name": self.name,
            "runnerKey": self.runner_key,
            "state": self.state,
            "stateReason": self.state_reason,
            "product": self.product,
            "version": self.version,
            "fingerprint": self.fingerprint,
            "publicKey": self.public_key,
            "keyId": self.key_id,
            "address": self.address,
            "machine": self.machine.as_deref().map(parse_json),
            "capabilities": parse_json(&self.capabilities),
            "capabilityHash": self.capabilities_hash,
            "protocolVersion": self.protocol_version,
            "problemTypes": parse_json(&self.problem_types),
            "external": self.external != 0,
            "tags": parse_json(&self.tags),
            "maxConcurrentJobs": self.max_concurrent_jobs,
            "activeClaims": self.active_claims,
            "completedJobs": self.completed_jobs,
            "registeredAt": rfc3339(self.registered_at),
            "approvedAt": self.approved_at.and_then(rfc3339),
            "revokedAt": self.revoked_at.and_then(rfc3339),
            "lastSeenAt": self.last_seen_at.and_then(rfc3339),
            "lastHeartbeatAt": self.last_heartbeat_at.and_then(rfc3339),
            "files": files.iter().map(FileMeta::to_json).collect::<Vec<_>>(),
        })
    }
}

pub(crate) async fn get(db: &Db, org: &str, id: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        &format!("SELECT {COLUMNS} FROM runners WHERE id = ?2 AND organization_id = ?1"),
        &[org.into(), id.into()],
    )
    .await
}

/// [`get`] as a statement, for a batch.
pub(crate) fn select(db: &Db, org: &str, id: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        &format!("SELECT {COLUMNS} FROM runners WHERE id = ?2 AND organization_id = ?1"),
        &[org.into(), id.into()],
    )
}

/// For the bootstrap session exchange, which names a runner before it has an organization.
pub(crate) async fn get_unscoped(db: &Db, id: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        &format!("SELECT {COLUMNS} FROM runners WHERE id = ?1"),
        &[id.into()],
    )
    .await
}

pub(crate) async fn by_fingerprint(db: &Db, fingerprint: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        &format!("SELECT {COLUMNS} FROM runners WHERE fingerprint = ?1"),
        &[fingerprint.into()],
    )
    .await
}

/// One page of the organization's runners ([`RunnerRow`]s) in registration order, after
/// `cursor` (`(registered_at, id)` of the last runner of the previous page).
pub(crate) fn select_page(
    db: &Db,
    org: &str,
    cursor: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<D1PreparedStatement> {
    let (at, id) = cursor.unwrap_or((i64::MIN / 2, ""));
    stmt(
        db,
        include_str!("queries/runners_page.sql"),
        &[org.into(), at.into(), id.into(), limit.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct StateCount {
    pub(crate) state: String,
    pub(crate) count: i64,
    pub(crate) in_use: i64,
    pub(crate) maximum: i64,
}

/// The organization's [`StateCount`]s.
pub(crate) fn select_state_counts(db: &Db, org: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/runner_state_counts.sql"),
        &[org.into()],
    )
}

#[derive(Deserialize)]
pub(crate) struct RunnerClaimRow {
    pub(crate) id: String,
    pub(crate) job_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) state: String,
    pub(crate) issued_at: i64,
    pub(crate) lease_expires_at: i64,
    pub(crate) started_at: Option<i64>,
    pub(crate) ended_at: Option<i64>,
    pub(crate) end_reason: Option<String>,
}

impl RunnerClaimRow {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "jobId": self.job_id,
            "dispatchAttempt": self.dispatch_attempt,
            "state": self.state,
            "issuedAt": rfc3339(self.issued_at),
            "leaseExpiresAt": rfc3339(self.lease_expires_at),
            "startedAt": self.started_at.and_then(rfc3339),
            "endedAt": self.ended_at.and_then(rfc3339),
            "endReason": self.end_reason,
        })
    }
}

/// Which of a runner's claims to read.
pub(crate) enum ClaimsOf {
    /// All of them, newest first (its history).
    History,
    /// The ones it holds now, oldest first.
    Held,
}

/// A runner's claims, at most `limit`.
pub(crate) async fn claims(
    db: &Db,
    org: &str,
    runner: &str,
    which: ClaimsOf,
    limit: i64,
) -> ApiResult<Vec<RunnerClaimRow>> {
    let sql = match which {
        ClaimsOf::History => include_str!("queries/runner_claims.sql"),
        ClaimsOf::Held => include_str!("queries/runner_active_claims.sql"),
    };
    all(db, sql, &[org.into(), runner.into(), limit.into()]).await
}

/// Everything a new runner row needs; fields of the other identity model stay `None`.
pub(crate) struct NewRunner<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) identity_model: &'a str,
    pub(crate) name: &'a str,
    pub(crate) runner_key: Option<&'a str>,
    pub(crate) bootstrap_token_hash: Option<&'a str>,
    pub(crate) bootstrap_token_expires_at: Option<i64>,
    pub(crate) public_key: Option<&'a str>,
    pub(crate) fingerprint: Option<&'a str>,
    pub(crate) product: Option<&'a str>,
    pub(crate) version: Option<&'a str>,
    pub(crate) machine_json: Option<&'a str>,
    pub(crate) address: Option<&'a str>,
    pub(crate) state: &'a str,
    pub(crate) capabilities_json: &'a str,
    pub(crate) capabilities_hash: &'a str,
    pub(crate) protocol_version: &'a str,
    pub(crate) problem_types_json: &'a str,
    pub(crate) external: bool,
    pub(crate) tags_json: &'a str,
    pub(crate) max_concurrent_jobs: i64,
    pub(crate) key_id: Option<&'a str>,
    pub(crate) approved_at: Option<i64>,
    pub(crate) now: i64,
}

pub(crate) fn insert(db: &Db, r: &NewRunner<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "INSERT INTO runners (id, organization_id, identity_model, name, runner_key, bootstrap_token_hash, \
           bootstrap_token_expires_at, public_key, fingerprint, product, version, machine, address, state, \
           capabilities, capabilities_hash, protocol_version, problem_types, external, tags, \
           max_concurrent_jobs, key_id, approved_at, registered_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?24)",
        &[
            r.id.into(),
            r.organization_id.into(),
            r.identity_model.into(),
            r.name.into(),
            r.runner_key.into(),
            r.bootstrap_token_hash.into(),
            r.bootstrap_token_expires_at.into(),
            r.public_key.into(),
            r.fingerprint.into(),
            r.product.into(),
            r.version.into(),
            r.machine_json.into(),
            r.address.into(),
            r.state.into(),
            r.capabilities_json.into(),
            r.capabilities_hash.into(),
            r.protocol_version.into(),
            r.problem_types_json.into(),
            Arg::Int(i64::from(r.external)),
            r.tags_json.into(),
            Arg::Int(r.max_concurrent_jobs),
            r.key_id.into(),
            r.approved_at.into(),
            Arg::Int(r.now),
        ],
    )
}

/// New bootstrap token and the next credential generation, guarded by the generation the
/// caller read: two racing rotations cannot both win, and the loser is told so.
pub(crate) struct Rotation<'a> {
    pub(crate) org: &'a str,
    pub(crate) id: &'a str,
    pub(crate) read_generation: i64,
    pub(crate) token_hash: &'a str,
    pub(crate) token_expires_at: Option<i64>,
    pub(crate) now: i64,
}

pub(crate) fn rotate(db: &Db, r: &Rotation<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE runners SET bootstrap_token_hash = ?4, bootstrap_token_expires_at = ?5, \
           credential_generation = credential_generation + 1, key_id = NULL, updated_at = ?6 \
         WHERE id = ?2 AND organization_id = ?1 AND identity_model = 'bootstrap' \
           AND state <> 'revoked' AND credential_generation = ?3",
        &[
            r.org.into(),
            r.id.into(),
            r.read_generation.into(),
            r.token_hash.into(),
            r.token_expires_at.into(),
            r.now.into(),
        ],
    )
}

/// A lifecycle move, guarded by the state the caller decided from. Revocation also moves the
/// credential generation forward so every outstanding credential dies with it.
pub(crate) struct StateChange<'a> {
    pub(crate) org: &'a str,
    pub(crate) id: &'a str,
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) now: i64,
    /// Set on approval of a key-pair runner: its signing key id from now on.
    pub(crate) key_id: Option<&'a str>,
}

pub(crate) fn change_state(db: &Db, c: &StateChange<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE runners SET state = ?4, state_reason = ?5, updated_at = ?6, \
           approved_at = CASE WHEN ?3 = 'pending_approval' AND ?4 = 'active' THEN ?6 ELSE approved_at END, \
           revoked_at = CASE WHEN ?4 = 'revoked' THEN ?6 ELSE revoked_at END, \
           credential_generation = credential_generation + CASE WHEN ?4 = 'revoked' THEN 1 ELSE 0 END, \
           key_id = COALESCE(?7, key_id) \
         WHERE id = ?2 AND organization_id = ?1 AND state = ?3",
        &[
            c.org.into(),
            c.id.into(),
            c.from.into(),
            c.to.into(),
            c.reason.into(),
            c.now.into(),
            c.key_id.into(),
        ],
    )
}

/// The assertion that opens an admin's change to a runner: the runner is still in `state`, the
/// state the change was decided from, or the whole batch aborts (`runner_moved`, 409).
pub(crate) fn assert_state(
    db: &Db,
    org: &str,
    id: &str,
    state: &str,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/assert_runner_as_known.sql"),
        &[id.into(), org.into(), state.into()],
    )
}

pub(crate) fn set_tags(
    db: &Db,
    org: &str,
    id: &str,
    tags_json: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "UPDATE runners SET tags = ?3, updated_at = ?4 WHERE id = ?2 AND organization_id = ?1 AND state <> 'revoked'",
        &[org.into(), id.into(), tags_json.into(), now.into()],
    )
}

/// A fresh session proves the runner alive: record contact, and bring a `lost` runner back.
/// Guarded by the generation the session was decided on, so a rotation or revocation that
/// lands in between makes this change nothing (and the caller refuses the session).
pub(crate) async fn record_session(
    db: &Db,
    id: &str,
    generation: i64,
    key_id: &str,
    now: i64,
) -> ApiResult<usize> {
    run(
        db,
        "UPDATE runners SET last_seen_at = ?2, updated_at = ?2, key_id = ?4, \
           state = CASE WHEN state = 'lost' THEN 'active' ELSE state END, \
           state_reason = CASE WHEN state = 'lost' THEN 'session exchanged after loss' ELSE state_reason END \
         WHERE id = ?1 AND state IN ('active', 'draining', 'lost') AND credential_generation = ?3",
        &[id.into(), now.into(), generation.into(), key_id.into()],
    )
    .await
}

// ------------------------------------------------------------------------------------------
// Files
// ------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct FileMeta {
    pub(crate) name: String,
    pub(crate) size: i64,
    pub(crate) content_hash: String,
    pub(crate) uploaded_at: i64,
}

impl FileMeta {
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "size": self.size,
            "contentHash": self.content_hash,
            "uploadedAt": rfc3339(self.uploaded_at),
        })
    }
}

pub(crate) async fn files(db: &Db, org: &str, runner: &str) -> ApiResult<Vec<FileMeta>> {
    all(
        db,
        "SELECT name, length(CAST(content AS BLOB)) AS size, content_hash, uploaded_at FROM runner_files \
         WHERE runner_id = ?2 AND organization_id = ?1 ORDER BY name",
        &[org.into(), runner.into()],
    )
    .await
}

#[derive(Deserialize)]
pub(crate) struct FileContent {
    pub(crate) content: String,
}

pub(crate) async fn file(
    db: &Db,
    org: &str,
    runner: &str,
    name: &str,
) -> ApiResult<Option<FileContent>> {
    first(
        db,
        "SELECT content FROM runner_files WHERE runner_id = ?2 AND organization_id = ?1 AND name = ?3",
        &[org.into(), runner.into(), name.into()],
    )
    .await
}

pub(crate) fn put_file(
    db: &Db,
    org: &str,
    runner: &str,
    name: &str,
    content: &str,
    content_hash: &str,
    now: i64,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        "INSERT INTO runner_files (runner_id, organization_id, name, content, content_hash, uploaded_at) \
         VALUES (?2, ?1, ?3, ?4, ?5, ?6) \
         ON CONFLICT (runner_id, name) DO UPDATE SET content = excluded.content, \
           content_hash = excluded.content_hash, uploaded_at = excluded.uploaded_at",
        &[org.into(), runner.into(), name.into(), content.into(), content_hash.into(), now.into()],
    )
}

// ------------------------------------------------------------------------------------------
// Challenges
// ------------------------------------------------------------------------------------------

pub(crate) struct NewChallenge<'a> {
    pub(crate) id: &'a str,
    pub(crate) runner_id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) fingerprint: &'a str,
    pub(crate) challenge_hash: &'a str,
    pub(crate) issued_at: i64,
    pub(crate) expires_at: i64,
}

pub(crate) async fn insert_challenge(db: &Db, c: &NewChallenge<'_>) -> ApiResult<usize> {
    run(
        db,
        "INSERT INTO runner_challenges (id, runner_id, organization_id, fingerprint, challenge_hash, issued_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        &[
            c.id.into(),
            c.runner_id.into(),
            c.organization_id.into(),
            c.fingerprint.into(),
            c.challenge_hash.into(),
            c.issued_at.into(),
            c.expires_at.into(),
        ],
    )
    .await
}

/// Consumes a live, unconsumed challenge of this fingerprint. Exactly one caller can win: the
/// guard and the single-use trigger make a replay change zero rows (or abort).
pub(crate) async fn consume_challenge(
    db: &Db,
    fingerprint: &str,
    challenge_hash: &str,
    now: i64,
) -> ApiResult<usize> {
    run(
        db,
        "UPDATE runner_challenges SET consumed_at = ?3 \
         WHERE challenge_hash = ?2 AND fingerprint = ?1 AND consumed_at IS NULL AND expires_at > ?3",
        &[fingerprint.into(), challenge_hash.into(), now.into()],
    )
    .await
}
