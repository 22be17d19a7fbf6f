//! `runners`, `runner_files`, `runner_challenges`: identities, what they said about
//! themselves, and the single-use challenges of key-pair runners.

use serde::Deserialize;
use serde_json::Value;
use worker::D1PreparedStatement;

use super::writes::{Slot, Writes};
use super::{all, batch, first, run, stmt, Arg, Db};
use edgerunner_protocol::kind::IdentityModel;
use edgerunner_protocol::state::{ClaimState, RunnerInput, RunnerState};

use crate::error::{ApiError, ApiResult};

#[derive(Deserialize)]
pub(crate) struct RunnerRow {
    pub(crate) id: String,
    pub(crate) organization_id: String,
    pub(crate) identity_model: IdentityModel,
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
    pub(crate) state: RunnerState,
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
    /// 1: registered for one job (migration 0020).
    pub(crate) ephemeral: i64,
}

pub(crate) async fn get(db: &Db, org: &str, id: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        include_str!("queries/runners/get.sql"),
        &[org.into(), id.into()],
    )
    .await
}

/// [`get`] as a statement, for a batch.
pub(crate) fn select(db: &Db, org: &str, id: &str) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/runners/select.sql"),
        &[org.into(), id.into()],
    )
}

/// For the bootstrap session exchange, which names a runner before it has an organization.
pub(crate) async fn get_unscoped(db: &Db, id: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        include_str!("queries/runners/get_unscoped.sql"),
        &[id.into()],
    )
    .await
}

pub(crate) async fn by_fingerprint(db: &Db, fingerprint: &str) -> ApiResult<Option<RunnerRow>> {
    first(
        db,
        include_str!("queries/runners/by_fingerprint.sql"),
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
    pub(crate) state: RunnerState,
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
    pub(crate) state: ClaimState,
    pub(crate) issued_at: i64,
    pub(crate) lease_expires_at: i64,
    pub(crate) started_at: Option<i64>,
    pub(crate) ended_at: Option<i64>,
    pub(crate) end_reason: Option<String>,
    /// What its job runs: the artifact's name and the version (its history only).
    #[serde(default)]
    pub(crate) artifact_name: Option<String>,
    #[serde(default)]
    pub(crate) version_id: Option<i64>,
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
    match which {
        ClaimsOf::History => {
            all(
                db,
                include_str!("queries/runner_claims.sql"),
                &[org.into(), runner.into(), limit.into()],
            )
            .await
        }
        ClaimsOf::Held => {
            all(
                db,
                include_str!("queries/runner_active_claims.sql"),
                &[
                    org.into(),
                    runner.into(),
                    limit.into(),
                    ClaimState::Active.as_str().into(),
                ],
            )
            .await
        }
    }
}

/// Everything a new runner row needs; fields of the other identity model stay `None`.
pub(crate) struct NewRunner<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) identity_model: IdentityModel,
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
    /// The network a key-pair runner enrolled from (`http::client_network`), counted against
    /// the per-network cap of pending enrollments unless a token admitted it.
    pub(crate) enroll_network: Option<&'a str>,
    /// The enrollment token that admitted it: the insert spends one of its uses (migration 0009).
    pub(crate) enrollment_token_id: Option<&'a str>,
    /// The site (IPv6 /48 or IPv4 address) a key-pair runner enrolled from.
    pub(crate) enroll_site: Option<&'a str>,
    pub(crate) state: RunnerState,
    pub(crate) capabilities_json: &'a str,
    pub(crate) capabilities_hash: &'a str,
    pub(crate) protocol_version: &'a str,
    pub(crate) problem_types_json: &'a str,
    pub(crate) external: bool,
    pub(crate) tags_json: &'a str,
    pub(crate) max_concurrent_jobs: i64,
    pub(crate) key_id: Option<&'a str>,
    pub(crate) approved_at: Option<i64>,
    /// One job, then retired (migration 0020): admin-registered runners only.
    pub(crate) ephemeral: bool,
    pub(crate) now: i64,
}

pub(crate) fn insert(db: &Db, r: &NewRunner<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/runners/insert.sql"),
        &[
            r.id.into(),
            r.organization_id.into(),
            r.identity_model.as_str().into(),
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
            r.state.as_str().into(),
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
            r.enroll_network.into(),
            r.enrollment_token_id.into(),
            r.enroll_site.into(),
            Arg::Int(i64::from(r.ephemeral)),
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
    let rotatable = rotatable_states();
    stmt(
        db,
        include_str!("queries/runners/rotate.sql"),
        &[
            r.org.into(),
            r.id.into(),
            r.read_generation.into(),
            r.token_hash.into(),
            r.token_expires_at.into(),
            r.now.into(),
            IdentityModel::Bootstrap.as_str().into(),
            rotatable.as_str().into(),
        ],
    )
}

/// An admin's lifecycle move: `input` taken in `from`, the state the caller read and decided
/// from, which guards the write. What the move stamps (approval and revocation times, a new
/// credential generation) is decided here from the protocol's machine, not in the SQL.
pub(crate) struct StateChange<'a> {
    pub(crate) org: &'a str,
    pub(crate) id: &'a str,
    pub(crate) from: RunnerState,
    pub(crate) input: RunnerInput,
    pub(crate) reason: &'a str,
    pub(crate) now: i64,
    /// Set on approval of a key-pair runner: its signing key id from now on.
    pub(crate) key_id: Option<&'a str>,
}

/// What a [`StateChange`] writes besides the guard, all decided by the protocol's machine.
#[derive(Debug, PartialEq, Eq)]
struct MoveEffects {
    to: RunnerState,
    /// `now` for an approval (the only move out of `pending_approval` into service).
    approved_at: Option<i64>,
    /// `now` for a move into `revoked`.
    revoked_at: Option<i64>,
    /// [`RunnerInput::retires_credential`]: the credential generation moves on by one.
    retires_credential: bool,
}

impl StateChange<'_> {
    fn effects(&self) -> ApiResult<MoveEffects> {
        let to = self.from.transition(self.input)?;
        Ok(MoveEffects {
            to,
            approved_at: (self.input == RunnerInput::Approve).then_some(self.now),
            revoked_at: (to == RunnerState::Revoked).then_some(self.now),
            retires_credential: self.input.retires_credential(self.from),
        })
    }
}

pub(crate) fn change_state(db: &Db, c: &StateChange<'_>) -> ApiResult<D1PreparedStatement> {
    let effects = c.effects()?;
    stmt(
        db,
        include_str!("queries/change_runner_state.sql"),
        &[
            c.org.into(),
            c.id.into(),
            c.from.as_str().into(),
            effects.to.as_str().into(),
            c.reason.into(),
            c.now.into(),
            c.key_id.into(),
            effects.approved_at.into(),
            effects.revoked_at.into(),
            i64::from(effects.retires_credential).into(),
        ],
    )
}

/// The assertion that opens an admin's change to a runner: the runner is still in `state`, the
/// state the change was decided from, or the whole batch aborts (`runner_moved`, 409).
pub(crate) fn assert_state(
    db: &Db,
    org: &str,
    id: &str,
    state: RunnerState,
) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/assert_runner_as_known.sql"),
        &[id.into(), org.into(), state.as_str().into()],
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
        include_str!("queries/runners/set_tags.sql"),
        &[
            org.into(),
            id.into(),
            tags_json.into(),
            now.into(),
            RunnerState::Revoked.as_str().into(),
        ],
    )
}

/// A fresh session proves the runner alive: record contact, and apply the protocol's
/// `session_proven` move to the runner's live state (a `lost` runner comes back). Guarded by
/// the generation the session was decided on, so a rotation or revocation that lands in
/// between makes this change nothing (and the caller refuses the session).
pub(crate) async fn record_session(
    db: &Db,
    id: &str,
    generation: i64,
    key_id: &str,
    now: i64,
) -> ApiResult<usize> {
    let authenticating = authenticating_states();
    let moves = session_proven_moves();
    run(
        db,
        include_str!("queries/record_session.sql"),
        &[
            id.into(),
            now.into(),
            generation.into(),
            key_id.into(),
            authenticating.as_str().into(),
            moves.as_str().into(),
            "session exchanged after loss".into(),
        ],
    )
    .await
}

/// Recovery's runner write in the batch that ends a lost claim: the runner's capacity back,
/// and the protocol's `lease_lost` move applied to its state as it is when the batch commits
/// (the job object never read it). `reason` is recorded only with a move.
pub(crate) fn recover(db: &Db, id: &str, now: i64, reason: &str) -> ApiResult<D1PreparedStatement> {
    let moves = lease_lost_moves();
    let retiring = lease_lost_retiring();
    stmt(
        db,
        include_str!("queries/recover_runner.sql"),
        &[
            id.into(),
            now.into(),
            reason.into(),
            moves.as_str().into(),
            retiring.as_str().into(),
        ],
    )
}

/// Which credential check a statement makes for a runner at a credential generation.
#[derive(Clone, Copy)]
pub(crate) enum CredentialCheck {
    /// In a write's batch: the runner still holds the generation and is in a state that may act
    /// ([`RunnerState::can_authenticate`]); a rotation, revocation or approval withdrawn behind
    /// the writer's back aborts the batch with `credential_revoked`.
    Assert,
    /// In a read: one row when the credential is current, none otherwise.
    Read,
}

/// A runner's credential as a request presented it: checked beside a read or a write.
pub(crate) struct Credential<'a> {
    pub(crate) runner_id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) generation: i64,
}

/// The `check` for runner `id` of `org` at credential generation `generation`, with the states
/// that may authenticate bound.
pub(crate) fn credential_check(
    db: &Db,
    check: CredentialCheck,
    id: &str,
    org: &str,
    generation: i64,
) -> ApiResult<D1PreparedStatement> {
    let authenticating = authenticating_states();
    let sql = match check {
        CredentialCheck::Assert => include_str!("queries/assert_credential_current.sql"),
        CredentialCheck::Read => include_str!("queries/credential_current.sql"),
    };
    stmt(
        db,
        sql,
        &[
            id.into(),
            org.into(),
            generation.into(),
            authenticating.as_str().into(),
        ],
    )
}

/// Why an ephemeral runner is draining: the grant of its one job drained it.
pub(crate) const EPHEMERAL_DRAINED_REASON: &str = "ephemeral: took its one job";

/// A grant's runner write: one more active claim for a runner in a state that may claim
/// ([`RunnerState::can_claim`]); the schema's capacity CHECK aborts the batch when it is full.
/// An ephemeral runner is drained by it (the protocol's drain from a claiming state).
pub(crate) fn take_capacity(db: &Db, id: &str, now: i64) -> ApiResult<D1PreparedStatement> {
    let claiming = claiming_states();
    let drained = RunnerState::Active
        .transition(RunnerInput::Drain)
        .map_err(|e| ApiError::internal(format!("the runner machine has no drain: {e:?}")))?;
    stmt(
        db,
        include_str!("queries/grant_runner.sql"),
        &[
            id.into(),
            now.into(),
            claiming.as_str().into(),
            drained.as_str().into(),
            EPHEMERAL_DRAINED_REASON.into(),
        ],
    )
}

// ------------------------------------------------------------------------------------------
// The runner machine as statement parameters
// ------------------------------------------------------------------------------------------
//
// Some writes must decide from the runner's state as it is when they commit, not as someone
// read it: recovery's batch never reads the runner, and a session exchange must not fail
// because an admin drained the runner a moment earlier. Those statements take what the
// protocol's machine says about every state as JSON parameters and look the row's live state
// up in them, so the SQL holds no state names and no second copy of the machine. Everything
// here is built from `edgerunner_protocol::state` alone.

/// `{"from": "to", …}` for every state in which `input` is legal and changes the state. A
/// state missing from it stays as it is.
fn moves(input: RunnerInput) -> String {
    let moves: serde_json::Map<String, Value> = RunnerState::ALL
        .into_iter()
        .filter_map(|from| match from.transition(input) {
            Ok(to) if to != from => Some((from.as_str().to_owned(), to.as_str().into())),
            _ => None,
        })
        .collect();
    Value::Object(moves).to_string()
}

/// `["state", …]`: the states that satisfy `rule`, in [`RunnerState::ALL`] order.
fn states_where(rule: impl Fn(RunnerState) -> bool) -> String {
    super::states::array(
        RunnerState::ALL
            .into_iter()
            .filter(|state| rule(*state))
            .map(RunnerState::as_str),
    )
}

/// What an expired lease does to its runner, by the runner's state (`recover_runner.sql`).
pub(crate) fn lease_lost_moves() -> String {
    moves(RunnerInput::LeaseLost)
}

/// The states in which an expired lease retires the runner's credential generation.
pub(crate) fn lease_lost_retiring() -> String {
    states_where(|from| RunnerInput::LeaseLost.retires_credential(from))
}

/// The states that may obtain a session at all ([`RunnerState::can_authenticate`]).
pub(crate) fn authenticating_states() -> String {
    states_where(RunnerState::can_authenticate)
}

/// The states in which a bootstrap-token runner's token may be rotated
/// ([`RunnerState::can_rotate`]).
pub(crate) fn rotatable_states() -> String {
    states_where(RunnerState::can_rotate)
}

/// The states that may be offered new work ([`RunnerState::can_claim`]).
pub(crate) fn claiming_states() -> String {
    states_where(RunnerState::can_claim)
}

/// The states an enrollment that waited too long for approval expires from: the keys of the
/// protocol's `enrollment_expired` move (`runners/delete_expired_enrollments*.sql`).
pub(crate) fn enrollment_expired_moves() -> String {
    moves(RunnerInput::EnrollmentExpired)
}

/// The cron pass's deletion of at most `limit` enrollments registered before `cutoff` and never
/// approved: their events, files and challenges, then the runners (added to `writes` in that
/// order; the count at the answered slot is the number of runners deleted). The key of a
/// deleted enrollment may enroll again.
pub(crate) fn delete_expired_enrollments(
    db: &Db,
    writes: &mut Writes,
    cutoff: i64,
    limit: i64,
) -> ApiResult<Slot> {
    let moves = enrollment_expired_moves();
    let args = [cutoff.into(), limit.into(), moves.as_str().into()];
    writes.extend([
        stmt(
            db,
            include_str!("queries/runners/delete_expired_enrollment_events.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/runners/delete_expired_enrollment_files.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/runners/delete_expired_enrollment_challenges.sql"),
            &args,
        )?,
    ]);
    Ok(writes.any(stmt(
        db,
        include_str!("queries/runners/delete_expired_enrollments.sql"),
        &args,
    )?))
}

/// An ephemeral runner whose one claim ended (or that an admin drained before it took any).
#[derive(Deserialize, Debug)]
pub(crate) struct SpentRunner {
    pub(crate) id: String,
    pub(crate) organization_id: String,
}

/// At most `limit` ephemeral runners that are spent: drained, holding no claim (the cron pass
/// revokes them, [`crate::reaper::retire_ephemeral`]).
pub(crate) async fn spent_ephemeral(db: &Db, limit: i64) -> ApiResult<Vec<SpentRunner>> {
    all(
        db,
        include_str!("queries/runners/spent_ephemeral.sql"),
        &[limit.into()],
    )
    .await
}

/// The cron pass's deletion of at most `limit` ephemeral runners revoked before `cutoff` that
/// nothing of their job names any more: their own events, files, challenges and credentials,
/// then the runners (added to `writes` in that order; the count at the answered slot is the
/// number of runners deleted).
pub(crate) fn delete_retired_ephemeral(
    db: &Db,
    writes: &mut Writes,
    cutoff: i64,
    limit: i64,
) -> ApiResult<Slot> {
    let args = [cutoff.into(), limit.into()];
    writes.extend([
        stmt(
            db,
            include_str!("queries/runners/delete_retired_ephemeral_events.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/runners/delete_retired_ephemeral_files.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/runners/delete_retired_ephemeral_challenges.sql"),
            &args,
        )?,
        stmt(
            db,
            include_str!("queries/runners/delete_retired_ephemeral_credentials.sql"),
            &args,
        )?,
    ]);
    Ok(writes.any(stmt(
        db,
        include_str!("queries/runners/delete_retired_ephemeral.sql"),
        &args,
    )?))
}

/// Deletes at most `limit` challenges that were used or expired by `now`.
pub(crate) fn purge_challenges(db: &Db, now: i64, limit: i64) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/runners/purge_challenges.sql"),
        &[now.into(), limit.into()],
    )
}

/// What a fresh session does to its runner, by the runner's state (`record_session.sql`).
pub(crate) fn session_proven_moves() -> String {
    moves(RunnerInput::SessionProven)
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

/// The files one runner may hold. A runner uploads a few small text files about itself (logs,
/// `lscpu`); the caps keep any one runner from filling the database every organization shares.
pub(crate) const MAX_RUNNER_FILES: i64 = 100;
/// The bytes of all of one runner's files together: 16 files at the 256 KiB per-file cap, and
/// far more than the logs and machine facts the files are for.
pub(crate) const MAX_RUNNER_FILE_BYTES: i64 = 4 * 1024 * 1024;

/// The runner's files in name order: the first `limit` after `after` (a name), or from the
/// start. A record lists one such page of [`MAX_RUNNER_FILES`], which is all of them.
pub(crate) async fn files(
    db: &Db,
    org: &str,
    runner: &str,
    after: Option<&str>,
    limit: i64,
) -> ApiResult<Vec<FileMeta>> {
    all(
        db,
        include_str!("queries/runners/files.sql"),
        &[
            org.into(),
            runner.into(),
            after.unwrap_or("").into(),
            limit.into(),
        ],
    )
    .await
}

/// A record's files: the first page of [`MAX_RUNNER_FILES`], every file a runner may hold.
pub(crate) async fn record_files(db: &Db, org: &str, runner: &str) -> ApiResult<Vec<FileMeta>> {
    files(db, org, runner, None, MAX_RUNNER_FILES).await
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
        include_str!("queries/runners/file.sql"),
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
    // Guarded in the statement itself, so two uploads at once cannot both pass a check made
    // before them: the runner's other files (a replaced name is not counted twice) must leave
    // room for this one in count and bytes, else nothing is written (0 rows changed).
    stmt(
        db,
        include_str!("queries/runners/put_file.sql"),
        &[
            org.into(),
            runner.into(),
            name.into(),
            content.into(),
            content_hash.into(),
            now.into(),
            MAX_RUNNER_FILES.into(),
            MAX_RUNNER_FILE_BYTES.into(),
        ],
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

/// The unconsumed challenges one runner may hold at once. A runner needs one per session
/// exchange in flight; a few more cover retries. Bounded so that asking for challenges, which
/// needs no credential, cannot grow the table (the address gate bounds the rate, this the rows).
pub(crate) const MAX_LIVE_CHALLENGES: i64 = 5;

/// Stores a challenge for a runner, in one transaction with the deletion of its unconsumed
/// challenges beyond the newest [`MAX_LIVE_CHALLENGES`] − 1 (and of its expired ones): the
/// runner never holds more than the cap, and the newest always works. Answers the insert's
/// row count.
pub(crate) async fn issue_challenge(db: &Db, c: &NewChallenge<'_>) -> ApiResult<usize> {
    let trim = stmt(
        db,
        include_str!("queries/runners/issue_challenge.sql"),
        &[
            c.runner_id.into(),
            c.issued_at.into(),
            (MAX_LIVE_CHALLENGES - 1).into(),
        ],
    )?;
    let insert = stmt(
        db,
        include_str!("queries/runners/issue_challenge_2.sql"),
        &[
            c.id.into(),
            c.runner_id.into(),
            c.organization_id.into(),
            c.fingerprint.into(),
            c.challenge_hash.into(),
            c.issued_at.into(),
            c.expires_at.into(),
        ],
    )?;
    let changed = batch(db, vec![trim, insert]).await?;
    Ok(changed.last().copied().unwrap_or(0))
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
        include_str!("queries/runners/consume_challenge.sql"),
        &[fingerprint.into(), challenge_hash.into(), now.into()],
    )
    .await
}

#[cfg(test)]
mod tests {
    //! The parameters are pinned here as exact values, and the schema suites run the
    //! statements with the same values (bound in `tests/schema/harness.py`, which these tests
    //! read): a change to the protocol's runner machine fails here until the schema tests,
    //! which prove what the SQL does with the parameters, are given the new ones.

    use edgerunner_protocol::state::{RunnerInput, RunnerState};

    use super::{
        authenticating_states, claiming_states, enrollment_expired_moves, lease_lost_moves,
        lease_lost_retiring, rotatable_states, session_proven_moves, MoveEffects, StateChange,
    };

    /// Every admin move that changes the state, with what it stamps: (from, input, to,
    /// approved_at set, revoked_at set, credential retired). The schema tests' `ADMIN_MOVES`
    /// is this table.
    const ADMIN_MOVES: [(&str, &str, &str, bool, bool, bool); 9] = [
        ("pending_approval", "approve", "active", true, false, false),
        ("pending_approval", "revoke", "revoked", false, true, true),
        ("active", "drain", "draining", false, false, false),
        ("active", "revoke", "revoked", false, true, true),
        ("draining", "activate", "active", false, false, false),
        ("draining", "revoke", "revoked", false, true, true),
        ("lost", "activate", "active", false, false, false),
        ("lost", "drain", "draining", false, false, false),
        ("lost", "revoke", "revoked", false, true, true),
    ];

    #[test]
    fn each_admin_move_stamps_what_the_schema_tests_expect() {
        const NOW: i64 = 1_780_000_000_000;
        let mut moves = Vec::new();
        for from in RunnerState::ALL {
            for input in RunnerInput::ALL {
                // The commands an admin's `status` can name.
                if RunnerInput::from_admin_status(input.as_str()) != Ok(input) {
                    continue;
                }
                let change = StateChange {
                    org: "org",
                    id: "run",
                    from,
                    input,
                    reason: "why",
                    now: NOW,
                    key_id: None,
                };
                let Ok(MoveEffects {
                    to,
                    approved_at,
                    revoked_at,
                    retires_credential,
                }) = change.effects()
                else {
                    continue;
                };
                // The route writes nothing for a move that keeps the state.
                if to == from {
                    continue;
                }
                for stamp in [approved_at, revoked_at].into_iter().flatten() {
                    assert_eq!(stamp, NOW);
                }
                moves.push((
                    from.as_str(),
                    input.as_str(),
                    to.as_str(),
                    approved_at.is_some(),
                    revoked_at.is_some(),
                    retires_credential,
                ));
            }
        }
        assert_eq!(moves, ADMIN_MOVES);
    }

    #[test]
    fn an_illegal_admin_move_builds_no_statement_parameters() {
        let change = StateChange {
            org: "org",
            id: "run",
            from: RunnerState::Revoked,
            input: RunnerInput::Activate,
            reason: "why",
            now: 1,
            key_id: None,
        };
        let err = change.effects().unwrap_err();
        assert_eq!(err.status(), 409);
    }

    const SCHEMA_TESTS: &str = include_str!("../../tests/schema/harness.py");

    /// The schema tests bind `name` to exactly `value` (a Python string literal).
    fn assert_schema_tests_bind(name: &str, value: &str) {
        let line = format!("\n{name} = '{value}'\n");
        assert!(
            SCHEMA_TESTS.contains(&line),
            "tests/schema/harness.py must bind {name} = '{value}'"
        );
    }

    #[test]
    fn an_expired_lease_moves_only_an_active_runner_to_lost() {
        assert_eq!(lease_lost_moves(), r#"{"active":"lost"}"#);
        assert_schema_tests_bind("LEASE_LOST_MOVES", &lease_lost_moves());
    }

    #[test]
    fn an_expired_lease_retires_only_an_active_runners_credential() {
        assert_eq!(lease_lost_retiring(), r#"["active"]"#);
        assert_schema_tests_bind("LEASE_LOST_RETIRING", &lease_lost_retiring());
    }

    #[test]
    fn active_draining_and_lost_runners_may_authenticate() {
        assert_eq!(authenticating_states(), r#"["active","draining","lost"]"#);
        assert_schema_tests_bind("AUTHENTICATING_STATES", &authenticating_states());
    }

    #[test]
    fn every_runner_but_a_revoked_one_may_be_rotated() {
        assert_eq!(
            rotatable_states(),
            r#"["pending_approval","active","draining","lost"]"#
        );
        assert_schema_tests_bind("ROTATABLE_STATES", &rotatable_states());
    }

    #[test]
    fn only_active_runners_may_claim() {
        assert_eq!(claiming_states(), r#"["active"]"#);
        assert_schema_tests_bind("CLAIMING_STATES", &claiming_states());
    }

    #[test]
    fn a_fresh_session_moves_only_a_lost_runner_back_to_active() {
        assert_eq!(session_proven_moves(), r#"{"lost":"active"}"#);
        assert_eq!(
            enrollment_expired_moves(),
            r#"{"pending_approval":"revoked"}"#
        );
        assert_schema_tests_bind("SESSION_PROVEN_MOVES", &session_proven_moves());
    }

    #[test]
    fn the_schema_tests_list_the_admin_moves_as_this_table() {
        let python = |flag: bool| if flag { "True" } else { "False" };
        let rows: String = ADMIN_MOVES
            .iter()
            .map(|(from, input, to, approves, revokes, retires)| {
                format!(
                    "    ({from:?}, {input:?}, {to:?}, {}, {}, {}),\n",
                    python(*approves),
                    python(*revokes),
                    python(*retires)
                )
            })
            .collect();
        let table = format!("\nADMIN_MOVES = (\n{rows})\n");
        assert!(
            SCHEMA_TESTS.contains(&table),
            "tests/schema/harness.py must list ADMIN_MOVES as:{table}"
        );
    }

    #[test]
    fn the_parameters_agree_with_the_protocol_for_every_state() {
        let moves: serde_json::Value = serde_json::from_str(&lease_lost_moves()).unwrap();
        let retiring: Vec<String> = serde_json::from_str(&lease_lost_retiring()).unwrap();
        let authenticating: Vec<String> = serde_json::from_str(&authenticating_states()).unwrap();
        let sessions: serde_json::Value = serde_json::from_str(&session_proven_moves()).unwrap();
        for state in RunnerState::ALL {
            let name = state.as_str();
            // What the SQL computes for a row in `state`: the move's target, or the state kept.
            let after_lease = moves.get(name).and_then(|to| to.as_str()).unwrap_or(name);
            if let Ok(to) = state.transition(RunnerInput::LeaseLost) {
                assert_eq!(after_lease, to.as_str(), "{state}");
            } else {
                // Recovery frees the capacity of a runner that cannot lose a lease any more
                // (revoked meanwhile) and leaves its state alone.
                assert_eq!(after_lease, name, "{state}");
            }
            assert_eq!(
                retiring.iter().any(|s| s == name),
                RunnerInput::LeaseLost.retires_credential(state),
                "{state}"
            );
            assert_eq!(
                authenticating.iter().any(|s| s == name),
                state.can_authenticate(),
                "{state}"
            );
            if state.can_authenticate() {
                let after_session = sessions
                    .get(name)
                    .and_then(|to| to.as_str())
                    .unwrap_or(name);
                assert_eq!(
                    Ok(after_session),
                    state
                        .transition(RunnerInput::SessionProven)
                        .map(RunnerState::as_str),
                    "{state}"
                );
            }
        }
    }
}
