//! The grant: a claim's write, made by the claiming runner's object (`object`) from the
//! candidate row its read found, with no object of the job's on the claim's path.
//!
//! The job's object is not the writer of a grant: the batch itself is what makes a grant safe
//! against everything that races it. It asserts that the runner still holds the credential
//! generation the claim's read checked and that the job is still as the candidate read found
//! it (queued, at that attempt, with no active claim), and the schema refuses a second
//! active claim, a claim of a job that is not queued and a runner over its capacity, so of two
//! runners asking for one job exactly one commits, and a cancel or a requeue that commits
//! first makes the grant refuse.
//!
//! No job object is called for the grant: locally, calling a new job object made a claim about
//! 8 ms slower at p50 whether the call came before the answer or right after it (ARCHITECTURE.md,
//! "Claim"), most of what a claim cost beyond the floor. The job's object comes to life with
//! the holder's first heartbeat (decided from the claim id, one D1 round trip:
//! `objects::job::heartbeat::presumed_first`) and arms its alarm then. Until its object takes
//! over, the lease is watched by the runner's object, which wrote an alarm for it before the batch
//! committed (the runner object's lease book).

use edgerunner_protocol::envelope::{
    sign, ClaimId, CredentialGeneration, DispatchAttempt, EnvelopeRequirements, Environment,
    IdempotencyKey, JobEnvelope, JobId, JobSigning, Nonce, OrganizationId, RunnerId, Subject,
    SubjectKind,
};
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::JobState;
use edgerunner_protocol::time::{Timestamp, UnixMillis};
use serde_json::{json, Value};
use worker::Env;

use crate::error::{ApiError, ApiResult};
use crate::objects::runner::{ClaimGrant, GrantedClaim, RunnerRefusal};
use crate::platform::{random_bytes, rfc3339};
use crate::secrets::{master_secret, SecretRefusal};
use crate::store::counters::{self, Counter};
use crate::store::guards::{self, Guard};
use crate::store::lifecycle::{self, AsKnown, NewGrant};
use crate::store::writes::Writes;
use crate::store::{self, events, jobs, runners, Db};

/// How long a signed envelope may be acted on after it is issued.
const ENVELOPE_VALIDITY_MILLIS: i64 = 5 * 60 * 1000;
/// The lease a claim starts with, before its first heartbeat sets its own.
const INITIAL_LEASE_MILLIS: i64 = 60 * 1000;

/// Who a grant is for, as the runner's object found it.
pub(crate) struct Grantee<'a> {
    pub(crate) org: &'a str,
    pub(crate) runner: &'a str,
    pub(crate) generation: u64,
    pub(crate) request_id: Option<&'a str>,
}

/// A grant ready to commit: its batch, and what the runner gets once it commits.
pub(crate) struct Prepared {
    writes: Writes,
    grant: ClaimGrant,
    lease: i64,
}

impl Prepared {
    pub(crate) fn job_id(&self) -> &str {
        &self.grant.claim.job_id
    }

    pub(crate) fn attempt(&self) -> i64 {
        self.grant.claim.dispatch_attempt
    }

    /// The lease the grant starts.
    pub(crate) fn lease(&self) -> i64 {
        self.lease
    }
}

/// Why a grant was not made: the runner's object's own refusal.
#[derive(Debug)]
pub(crate) enum GrantRefusal {
    /// The job is not queued any more, or another grant or a change (a cancel, a requeue) got
    /// there first. Never reaches a client: the claim tries its next candidate.
    Taken,
    /// The claim is refused, as the runner is told.
    Refused(RunnerRefusal),
}

impl GrantRefusal {
    /// An internal failure: the detail is logged here, the answer is a bare `500`.
    fn internal(detail: impl std::fmt::Display) -> Self {
        GrantRefusal::Refused(RunnerRefusal::internal(detail))
    }
}

/// What a grant's batch meets: the guards of a lost race (the job's row moved, a second claim
/// of the job or of its attempt, a job no longer queued) are [`GrantRefusal::Taken`], a runner
/// over its capacity or whose credential moved on is refused as the runner's object refuses it
/// before the write, and any other guard as the guard table says.
impl From<ApiError> for GrantRefusal {
    fn from(err: ApiError) -> Self {
        match err.guard().and_then(Guard::named) {
            Some(guard) => match guard.name {
                guards::JOB_MOVED
                | guards::CLAIM_REQUIRES_QUEUED_JOB
                | guards::UNIQUE_CLAIM_ATTEMPT
                | guards::UNIQUE_ACTIVE_CLAIM => GrantRefusal::Taken,
                guards::RUNNER_AT_CAPACITY => GrantRefusal::Refused(RunnerRefusal::AtCapacity),
                guards::CREDENTIAL_REVOKED => {
                    GrantRefusal::Refused(RunnerRefusal::CredentialRevoked)
                }
                _ => GrantRefusal::Refused(RunnerRefusal::Guard(guard)),
            },
            None => GrantRefusal::Refused(err.into()),
        }
    }
}

impl From<SecretRefusal> for GrantRefusal {
    fn from(refusal: SecretRefusal) -> Self {
        GrantRefusal::Refused(RunnerRefusal::Secret(refusal))
    }
}

/// Builds the grant of queued `job` (as the claim's read found it) to `grantee`, at `now`: a
/// new attempt, its claim id, a fresh nonce, the envelope signed with the runner's job-signing
/// key, and the batch that writes them.
pub(crate) fn prepare(
    env: &Env,
    db: &Db,
    job: &jobs::JobRow,
    grantee: &Grantee<'_>,
    now: i64,
) -> Result<Prepared, GrantRefusal> {
    let Grantee {
        org,
        runner,
        generation,
        request_id,
    } = *grantee;
    if job.organization_id != org {
        // The candidate read is the organization's: our bug if this is ever met.
        return Err(GrantRefusal::internal(format!(
            "job {} of another organization among runner {runner}'s candidates",
            job.id
        )));
    }
    if job.state != JobState::Queued {
        return Err(GrantRefusal::Taken);
    }
    let attempt = job.dispatch_attempt + 1;
    let job_id = JobId::parse(&job.id).map_err(ApiError::internal)?;
    let dispatch_attempt = DispatchAttempt::new(u32::try_from(attempt).unwrap_or(0))
        .ok_or_else(|| ApiError::internal("attempt out of range"))?;
    let claim = ClaimId::for_attempt(&job_id, dispatch_attempt).map_err(ApiError::internal)?;
    let claim_id = claim.as_str().to_owned();
    let nonce = Nonce::from_random(random_bytes::<32>()?);
    let master = master_secret(env)?;
    let runner_id = RunnerId::parse(runner).map_err(ApiError::internal)?;
    let signing = JobSigning::derive(&master, &runner_id, CredentialGeneration(generation));
    let (issued, expires, lease) = (
        now,
        now + ENVELOPE_VALIDITY_MILLIS,
        now + INITIAL_LEASE_MILLIS,
    );
    let requirements: Value =
        serde_json::from_str(&job.requirements).map_err(ApiError::internal)?;
    let envelope = JobEnvelope {
        organization_id: OrganizationId::parse(org).map_err(ApiError::internal)?,
        job_id,
        claim_id: claim,
        runner_id,
        dispatch_attempt,
        idempotency_key: IdempotencyKey::parse(&job.idempotency_key).map_err(ApiError::internal)?,
        subject: Subject {
            kind: SubjectKind::parse(&job.subject_kind).map_err(ApiError::internal)?,
            artifact_id: edgerunner_protocol::envelope::ArtifactId::parse(&job.subject_artifact_id)
                .map_err(ApiError::internal)?,
            version_id: u64::try_from(job.subject_version_id).map_err(ApiError::internal)?,
            content_hash: Sha256Hex::parse(&job.subject_content_hash)
                .map_err(ApiError::internal)?,
            environment: Environment::parse(&job.subject_environment)
                .map_err(GrantRefusal::internal)?,
        },
        input_hash: Sha256Hex::parse(&job.input_hash).map_err(ApiError::internal)?,
        requirements: EnvelopeRequirements::from_value(requirements)
            .map_err(GrantRefusal::internal)?,
        issued_at: timestamp(issued)?,
        expires_at: timestamp(expires)?,
        nonce: nonce.clone(),
    };
    let signed = sign(&envelope, &signing.secret, &signing.key_id).to_json();
    let actor = format!("runner:{runner}");
    let detail = json!({ "claimId": claim_id, "keyId": signing.key_id.as_str() }).to_string();
    let claimed = events::NewEvent {
        organization_id: &job.organization_id,
        job_id: Some(&job.id),
        runner_id: Some(runner),
        claim_id: Some(&claim_id),
        actor: &actor,
        kind: EventKind::JobClaimed,
        attempt: Some(attempt),
        reason: None,
        detail_json: Some(&detail),
        at: now,
    };
    let mut writes = Writes::from(vec![
        // The runner still holds the credential generation its claim's read checked.
        runners::credential_check(
            db,
            runners::CredentialCheck::Assert,
            runner,
            org,
            i64::try_from(generation).map_err(ApiError::internal)?,
        )?,
        // The job is still as the candidate read found it: queued, at its attempt, unclaimed.
        lifecycle::assert_job_as_known(
            db,
            &AsKnown {
                job_id: &job.id,
                state: JobState::Queued,
                attempt: job.dispatch_attempt,
                active_claim: job.active_claim_id.as_deref(),
            },
            None,
        )?,
    ]);
    // Order matters (see the migration): the claim first, while the job is still queued.
    let signed_text = signed.to_string();
    lifecycle::grant(
        db,
        &mut writes,
        &NewGrant {
            claim_id: &claim_id,
            job_id: &job.id,
            organization_id: org,
            runner_id: runner,
            attempt,
            nonce: nonce.as_str(),
            key_id: signing.key_id.as_str(),
            issued_at: issued,
            expires_at: expires,
            lease_expires_at: lease,
            signed_job: &signed_text,
            request_id,
            now,
        },
    )?;
    // Capacity: the CHECK (active_claims <= max_concurrent_jobs) aborts the batch when full.
    writes.one(
        "the runner's capacity",
        runners::take_capacity(db, runner, now)?,
    );
    writes.extend([
        events::insert(db, &claimed)?,
        // Last: counted exactly when the grant commits.
        counters::add(db, org, Counter::ClaimsGranted, 1)?,
    ]);
    Ok(Prepared {
        writes,
        grant: ClaimGrant {
            claim: GrantedClaim {
                id: claim_id,
                job_id: job.id.clone(),
                runner_id: runner.to_owned(),
                dispatch_attempt: attempt,
                issued_at: rfc3339(issued),
                expires_at: rfc3339(expires),
                lease_expires_at: rfc3339(lease),
            },
            signed_job: signed,
        },
        lease,
    })
}

/// Commits a prepared grant: the runner's answer, or [`GrantRefusal::Taken`] when the job was
/// claimed or changed since its row was read (the claim tries its next candidate). The claim,
/// the job and the runner change one row each, or the batch is refused.
pub(crate) async fn commit(db: &Db, prepared: Prepared) -> Result<ClaimGrant, GrantRefusal> {
    let Prepared { writes, grant, .. } = prepared;
    store::writes::write(db, writes).await?;
    Ok(grant)
}

fn timestamp(ms: i64) -> ApiResult<Timestamp> {
    UnixMillis::new(ms)
        .map(Timestamp::from_instant)
        .map_err(ApiError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn met(name: &str) -> GrantRefusal {
        ApiError::guarded(Guard::named(name).expect("a guard")).into()
    }

    #[test]
    fn a_lost_race_is_taken_and_tries_the_next_candidate() {
        for name in [
            guards::JOB_MOVED,
            guards::CLAIM_REQUIRES_QUEUED_JOB,
            guards::UNIQUE_CLAIM_ATTEMPT,
            guards::UNIQUE_ACTIVE_CLAIM,
        ] {
            assert!(matches!(met(name), GrantRefusal::Taken), "{name}");
        }
    }

    #[test]
    fn the_runners_own_limits_are_refused_as_its_object_refuses_them() {
        assert!(matches!(
            met(guards::RUNNER_AT_CAPACITY),
            GrantRefusal::Refused(RunnerRefusal::AtCapacity)
        ));
        assert!(matches!(
            met(guards::CREDENTIAL_REVOKED),
            GrantRefusal::Refused(RunnerRefusal::CredentialRevoked)
        ));
        // A runner that left `active` while its claim was decided: the table's answer, which
        // is the runner object's own (answers::RUNNER_NOT_ACTIVE).
        let GrantRefusal::Refused(refusal) = met(guards::CLAIM_REQUIRES_ACTIVE_RUNNER) else {
            panic!("a runner no longer active is refused");
        };
        let answer = ApiError::from(refusal);
        assert_eq!(
            (answer.status(), answer.code()),
            (
                503,
                edgerunner_protocol::error_code::ErrorCode::RunnerNotActive
            )
        );
    }
}
