//! The runner's side of identity: key-pair enrollment, challenges, session exchange (both
//! models), and what a runner may say about itself.

use edgerunner_protocol::credential::{self, CredentialClaims, MAX_CREDENTIAL_TTL_MILLIS};
use edgerunner_protocol::envelope::{constant_time_eq, CredentialGeneration, JobSigning, RunnerId};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::keypair::{
    verify_challenge_signature, verify_enrollment_signature, Challenge, Fingerprint, KeyError,
    PublicKey,
};
use edgerunner_protocol::kind::{EventKind, IdentityModel};
use edgerunner_protocol::state::RunnerState;
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::enrollment::{admit, presented_token, Presented};
use super::runner_files::check_file;
use super::views::identity::{ChallengeView, SessionView};
use super::views::respond;
use super::views::runners::{EnrolledView, RunnerClaimView, RunnerClaimsView, RunnerView};
use super::{capability_document, optional_str, refuse_unknown, required_name, required_str};
use crate::auth;
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{
    client_address, client_network, client_site, json_object_capped, ENROLL_BODY_BYTES,
    SMALL_BODY_BYTES,
};
use crate::objects::gate::{self, Bucket};
use crate::platform::{random_bytes, random_id, rfc3339, secret_hash};
use crate::secrets::master_secret;
use crate::store::{self, enrollment, events, runners};

/// How long a challenge may be answered.
const CHALLENGE_TTL_MILLIS: i64 = 60_000;
const MAX_MACHINE_BYTES: usize = 16 * 1024;
/// What an enrollment may carry before anyone has approved it: a few small files.
const MAX_ENROLL_FILES: usize = 16;
const MAX_ENROLL_FILES_BYTES: usize = 64 * 1024;
/// Key-pair runners waiting for approval per organization, unless `MAX_PENDING_ENROLLMENTS`
/// says otherwise.
const DEFAULT_MAX_PENDING_ENROLLMENTS: i64 = 100;

fn max_pending_enrollments(env: &worker::Env) -> i64 {
    crate::platform::setting(
        env,
        "MAX_PENDING_ENROLLMENTS",
        DEFAULT_MAX_PENDING_ENROLLMENTS,
        0,
    )
}

/// Token-less key-pair runners waiting for approval per organization from one network (an IPv4
/// address or an IPv6 /64), unless `MAX_PENDING_ENROLLMENTS_PER_NETWORK` says otherwise. Below
/// `ENROLL_PER_MINUTE`, so one network's share is spent within its first minute and a stranger
/// needs many networks to fill an organization's `MAX_PENDING_ENROLLMENTS`.
const DEFAULT_MAX_PENDING_ENROLLMENTS_PER_NETWORK: i64 = 5;

fn max_pending_enrollments_per_network(env: &worker::Env) -> i64 {
    crate::platform::setting(
        env,
        "MAX_PENDING_ENROLLMENTS_PER_NETWORK",
        DEFAULT_MAX_PENDING_ENROLLMENTS_PER_NETWORK,
        0,
    )
}

/// Token-less key-pair runners waiting for approval per organization from one site (an IPv6
/// /48, what one free tunnel broker account is given, or an IPv4 address), unless
/// `MAX_PENDING_ENROLLMENTS_PER_SITE` says otherwise: four /64s' shares, so strangers need at
/// least five /48s to fill an organization's `MAX_PENDING_ENROLLMENTS`.
const DEFAULT_MAX_PENDING_ENROLLMENTS_PER_SITE: i64 = 20;

fn max_pending_enrollments_per_site(env: &worker::Env) -> i64 {
    crate::platform::setting(
        env,
        "MAX_PENDING_ENROLLMENTS_PER_SITE",
        DEFAULT_MAX_PENDING_ENROLLMENTS_PER_SITE,
        0,
    )
}

fn string_array(value: &Value) -> String {
    value.to_string()
}

pub(crate) async fn enroll(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    gate::take(&ctx.env, ctx.db.trips(), &req, Bucket::Enroll).await?;
    let body = json_object_capped(&mut req, ENROLL_BODY_BYTES).await?;
    if body.contains_key("tags") {
        return Err(ApiError::unprocessable(
            ErrorCode::TagsAreOperatorSet,
            "tags are set by an operator, never by the runner",
        ));
    }
    refuse_unknown(
        &body,
        &[
            "organizationId",
            "publicKey",
            "name",
            "product",
            "version",
            "problemTypes",
            "external",
            "capabilities",
            "machine",
            "files",
            "signature",
            "enrollmentToken",
        ],
    )?;
    let organization_id = required_name(&body, "organizationId", 64)?;
    let public_key = PublicKey::from_base64(required_str(&body, "publicKey", 128)?)?;
    let fingerprint = public_key.fingerprint();
    // Proof of possession: only the holder of the private key can enroll it, and only into
    // the organization the proof names.
    verify_enrollment_signature(
        &public_key,
        organization_id,
        required_str(&body, "signature", 256)?,
    )
    .map_err(|err| match err {
        KeyError::BadSignature => ApiError::unauthorized(
            "signature does not sign edgerunner-enroll-v1, this organization and this key's fingerprint with this key",
        ),
        _ => ApiError::unprocessable(
            ErrorCode::EnrollmentSignatureMalformed,
            "signature must be standard base64 of a 64-byte ed25519 signature",
        ),
    })?;
    let name = required_name(&body, "name", 200)?;
    let product = optional_str(&body, "product", 200)?;
    let version = optional_str(&body, "version", 200)?;
    let document = capability_document(&body, &["problemTypes", "external"])?;
    let machine = match body.get("machine") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => {
            let text = v.to_string();
            if text.len() > MAX_MACHINE_BYTES {
                return Err(ApiError::unprocessable(
                    ErrorCode::InvalidField,
                    format!("machine is capped at {MAX_MACHINE_BYTES} bytes"),
                ));
            }
            Some(text)
        }
        Some(_) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidField,
                "machine must be an object",
            ))
        }
    };
    let files: Vec<(String, String)> = match body.get("files") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, content)| match content {
                Value::String(text) => {
                    check_file(name, text).map(|()| (name.clone(), text.clone()))
                }
                _ => Err(ApiError::unprocessable(
                    ErrorCode::InvalidField,
                    "files maps names to text",
                )),
            })
            .collect::<ApiResult<_>>()?,
        Some(_) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidField,
                "files must be an object",
            ))
        }
    };
    let files_bytes: usize = files.iter().map(|(n, c)| n.len() + c.len()).sum();
    if files.len() > MAX_ENROLL_FILES || files_bytes > MAX_ENROLL_FILES_BYTES {
        return Err(ApiError::new(
            413,
            ErrorCode::EnrollFilesTooLarge,
            format!("an enrollment carries at most {MAX_ENROLL_FILES} files and {MAX_ENROLL_FILES_BYTES} bytes of them; upload more after approval"),
        ));
    }

    // An unknown organization is `None`: [`admit`] refuses it with the answer a closed one, or
    // one that asks for a token, gets, so the route tells a stranger nothing of which exist.
    let policy = enrollment::policy(&ctx.db, organization_id)
        .await?
        .map(|row| row.enrollment_policy);
    // Looked up whatever the policy, so that the refusals take the same reads.
    let token = presented_token(&body, organization_id, ctx).await?;
    let presented = match (&token, body.get("enrollmentToken")) {
        (Some(found), _) => Presented::Found(found),
        (None, None | Some(Value::Null)) => Presented::Nothing,
        (None, Some(_)) => Presented::Unknown,
    };
    // The policy is read here and the insert is sent below: an enrollment racing a policy
    // change lands as if it came a moment earlier. The token's liveness, though, is checked
    // again by the insert itself (migration 0009), so a token's last use is spent once.
    let enrollment_token_id = admit(policy, &presented, ctx.now)?;

    let id = random_id("run")?;
    let capabilities_json = document.to_value().to_string();
    let capabilities_hash = document.hash();
    let problem_types = string_array(&Value::Array(
        document
            .problem_types()
            .iter()
            .map(|p| Value::String(p.as_str().to_owned()))
            .collect(),
    ));
    let address = client_address(&req);
    let network = client_network(&req);
    let site = client_site(&req);
    let public_key_text = public_key.to_base64();
    let row = runners::NewRunner {
        id: &id,
        organization_id,
        identity_model: IdentityModel::Keypair,
        name,
        runner_key: None,
        bootstrap_token_hash: None,
        bootstrap_token_expires_at: None,
        public_key: Some(&public_key_text),
        fingerprint: Some(fingerprint.as_str()),
        product,
        version,
        machine_json: machine.as_deref(),
        address: address.as_deref(),
        enroll_network: Some(&network),
        enrollment_token_id,
        enroll_site: Some(&site),
        state: RunnerState::PendingApproval,
        capabilities_json: &capabilities_json,
        capabilities_hash: capabilities_hash.as_str(),
        protocol_version: edgerunner_protocol::capability::PROTOCOL_VERSION,
        problem_types_json: &problem_types,
        external: document.external(),
        tags_json: "[]",
        max_concurrent_jobs: i64::from(document.max_concurrent_jobs()),
        key_id: None,
        approved_at: None,
        ephemeral: false,
        now: ctx.now,
    };
    let actor = format!("runner:{id}");
    let detail = json!({
        "fingerprint": fingerprint.as_str(),
        "address": address,
        "network": network,
        "site": site,
        "enrollmentTokenId": enrollment_token_id,
    })
    .to_string();
    let mut statements = vec![
        // The caps the pending-enrollment triggers read, from this Worker's configuration, set
        // in the same transaction as the insert they guard.
        enrollment::set_pending_caps(
            &ctx.db,
            organization_id,
            max_pending_enrollments(&ctx.env),
            max_pending_enrollments_per_network(&ctx.env),
            max_pending_enrollments_per_site(&ctx.env),
        )?,
        runners::insert(&ctx.db, &row)?,
        events::insert(
            &ctx.db,
            &events::NewEvent {
                organization_id,
                job_id: None,
                runner_id: Some(&id),
                claim_id: None,
                actor: &actor,
                kind: EventKind::RunnerEnrolled,
                attempt: None,
                reason: None,
                detail_json: Some(&detail),
                at: ctx.now,
            },
        )?,
    ];
    for (name, content) in &files {
        let hash = secret_hash(content);
        statements.push(runners::put_file(
            &ctx.db,
            organization_id,
            &id,
            name,
            content,
            &hash,
            ctx.now,
        )?);
    }
    // A taken fingerprint is the guard table's 409 FINGERPRINT_TAKEN; a network past its share
    // 429 PENDING_ENROLLMENTS_FROM_NETWORK_AT_CAP, a site past its share
    // 429 PENDING_ENROLLMENTS_FROM_SITE_AT_CAP; a token spent or revoked since it was read
    // 403 ENROLLMENT_TOKEN_INVALID.
    store::batch(&ctx.db, statements).await?;
    let runner = runners::get(&ctx.db, organization_id, &id)
        .await?
        .ok_or_else(|| ApiError::internal("enrolled runner vanished"))?;
    let files = runners::record_files(&ctx.db, organization_id, &id).await?;
    respond(
        201,
        &EnrolledView {
            runner: RunnerView::new(&runner, &files, ctx.now),
        },
    )
}

/// `POST /api/remote-runners/challenge`: the same `200 {challenge, expiresAt}` whatever the
/// fingerprint names (no runner, one waiting for approval, a revoked one, a live one), so the
/// endpoint tells a stranger nothing about which keys exist or their state. Only a runner that
/// may authenticate has its challenge stored (so a stranger's requests write nothing), and at
/// most [`runners::MAX_LIVE_CHALLENGES`] of its challenges are live at once: a new one
/// replaces the oldest, so the live runner itself always gets one that works.
pub(crate) async fn challenge(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    gate::take(&ctx.env, ctx.db.trips(), &req, Bucket::Challenge).await?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["fingerprint"])?;
    let fingerprint = Fingerprint::parse(required_str(&body, "fingerprint", 128)?)?;
    let challenge = Challenge::from_random(random_bytes::<32>()?);
    let expires_at = ctx.now + CHALLENGE_TTL_MILLIS;
    let runner = runners::by_fingerprint(&ctx.db, fingerprint.as_str()).await?;
    if let Some(runner) = runner.filter(|r| r.state.can_authenticate()) {
        let id = random_id("chl")?;
        let hash = secret_hash(challenge.as_str());
        let issued = runners::issue_challenge(
            &ctx.db,
            &runners::NewChallenge {
                id: &id,
                runner_id: &runner.id,
                organization_id: &runner.organization_id,
                fingerprint: fingerprint.as_str(),
                challenge_hash: &hash,
                issued_at: ctx.now,
                expires_at,
            },
        )
        .await?;
        if issued != 1 {
            return Err(ApiError::internal("challenge was not stored"));
        }
    }
    respond(
        200,
        &ChallengeView {
            challenge: challenge.as_str(),
            expires_at: rfc3339(expires_at),
        },
    )
}

/// `POST /api/remote-runners/session`, both identity models, the SDK's response shape.
pub(crate) async fn session(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    // An address that keeps failing is turned away before its next guess is looked at.
    gate::check(&ctx.env, ctx.db.trips(), &req, Bucket::FailedSession).await?;
    let master = master_secret(&ctx.env)?;
    let found = match json_object_capped(&mut req, SMALL_BODY_BYTES).await {
        Ok(body) if body.contains_key("fingerprint") => keypair_runner(&body, ctx).await,
        Ok(body) => bootstrap_runner(&body, ctx).await,
        Err(err) => Err(err),
    };
    let runner = match found {
        Ok(runner) => runner,
        Err(err) => {
            // A refusal of the request itself counts as a failed guess does: a body that does
            // not parse, is too big or is malformed costs the server as much, and would
            // otherwise be free to repeat.
            if counts_as_failure(err.status()) {
                gate::take(&ctx.env, ctx.db.trips(), &req, Bucket::FailedSession).await?;
            }
            return Err(err);
        }
    };

    let runner_id = RunnerId::parse(&runner.id).map_err(|e| ApiError::internal(e.to_string()))?;
    let generation = runner.credential_generation;
    let generation_u64 = u64::try_from(generation).map_err(ApiError::internal)?;
    let job_signing = JobSigning::derive(&master, &runner_id, CredentialGeneration(generation_u64));
    let changed = runners::record_session(
        &ctx.db,
        &runner.id,
        generation,
        job_signing.key_id.as_str(),
        ctx.now,
    )
    .await?;
    if changed != 1 {
        // Rotated or revoked between our read and this write: the decision no longer holds.
        return Err(ApiError::unauthorized(
            "runner credentials changed during the exchange; retry",
        ));
    }
    let claims = CredentialClaims {
        id: random_id("crd")?,
        runner_id: runner.id.clone(),
        organization_id: runner.organization_id.clone(),
        generation: generation_u64,
        issued_at_ms: ctx.now,
        expires_at_ms: ctx.now + MAX_CREDENTIAL_TTL_MILLIS,
    };
    let token =
        credential::issue(&master, &claims).map_err(|e| ApiError::internal(e.to_string()))?;
    respond(
        200,
        &SessionView::new(&token, &claims, job_signing.to_json()),
    )
}

/// The `/session` refusals spent from the network's failure budget (`FAILED_SESSIONS_PER_MINUTE`):
/// a wrong guess (401) and a request refused as malformed (400, 413, 422). Not a `429` (already
/// counted) nor a failure of ours (5xx).
fn counts_as_failure(status: u16) -> bool {
    matches!(status, 400 | 401 | 413 | 422)
}

/// Every refusal is the same `401` with no hint of which part was wrong, so the endpoint
/// cannot be used to discover runner ids.
fn refused() -> ApiError {
    ApiError::unauthorized("unknown runner, or wrong, expired or rotated bootstrap token")
}

async fn bootstrap_runner(body: &Map<String, Value>, ctx: &Ctx) -> ApiResult<runners::RunnerRow> {
    refuse_unknown(body, &["runnerId", "bootstrapToken"])?;
    let runner_id = required_str(body, "runnerId", 64).map_err(|_| refused())?;
    let token = required_str(body, "bootstrapToken", 256).map_err(|_| refused())?;
    let runner = runners::get_unscoped(&ctx.db, runner_id)
        .await?
        .ok_or_else(refused)?;
    let stored = runner.bootstrap_token_hash.as_deref().ok_or_else(refused)?;
    if !constant_time_eq(secret_hash(token).as_bytes(), stored.as_bytes()) {
        return Err(refused());
    }
    if runner
        .bootstrap_token_expires_at
        .is_some_and(|at| ctx.now >= at)
    {
        return Err(refused());
    }
    if !runner.state.can_authenticate() {
        return Err(refused());
    }
    Ok(runner)
}

async fn keypair_runner(body: &Map<String, Value>, ctx: &Ctx) -> ApiResult<runners::RunnerRow> {
    refuse_unknown(body, &["fingerprint", "challenge", "signature"])?;
    let denied = || {
        ApiError::unauthorized(
            "unknown or unapproved key, bad signature, or an expired or used challenge",
        )
    };
    let fingerprint =
        Fingerprint::parse(required_str(body, "fingerprint", 128)?).map_err(|_| denied())?;
    let challenge =
        Challenge::parse(required_str(body, "challenge", 256)?).map_err(|_| denied())?;
    let signature = required_str(body, "signature", 256)?;
    let runner = runners::by_fingerprint(&ctx.db, fingerprint.as_str())
        .await?
        .ok_or_else(denied)?;
    if !runner.state.can_authenticate() {
        return Err(denied());
    }
    let public_key = PublicKey::from_base64(runner.public_key.as_deref().unwrap_or_default())
        .map_err(|e| ApiError::internal(format!("stored public key unreadable: {e}")))?;
    verify_challenge_signature(&public_key, &fingerprint, &challenge, signature)
        .map_err(|_| denied())?;
    // Single use: exactly one exchange can consume a live challenge.
    let consumed = runners::consume_challenge(
        &ctx.db,
        fingerprint.as_str(),
        &secret_hash(challenge.as_str()),
        ctx.now,
    )
    .await?;
    if consumed != 1 {
        return Err(denied());
    }
    Ok(runner)
}

pub(crate) async fn get_self(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    let files =
        runners::record_files(&ctx.db, caller.organization_id(), caller.runner_id()).await?;
    respond(200, &RunnerView::new(&caller.runner, &files, ctx.now))
}

/// The claims this runner holds now: what a restarted process hands back
/// (`POST /api/remote-runners/release`), since a fresh process runs none of them.
pub(crate) async fn get_self_claims(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::runner(&req, ctx).await?;
    let claims = runners::claims(
        &ctx.db,
        caller.organization_id(),
        caller.runner_id(),
        runners::ClaimsOf::Held,
        i64::from(edgerunner_protocol::capability::MAX_CONCURRENT_JOBS),
    )
    .await?;
    respond(
        200,
        &RunnerClaimsView {
            claims: claims.iter().map(RunnerClaimView::from).collect(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::counts_as_failure;

    #[test]
    fn a_malformed_session_request_counts_as_a_failure_and_a_failure_of_ours_does_not() {
        for status in [400, 401, 413, 422] {
            assert!(counts_as_failure(status), "{status}");
        }
        for status in [200, 429, 500, 503] {
            assert!(!counts_as_failure(status), "{status}");
        }
    }
}
