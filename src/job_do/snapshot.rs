//! What an operation decides from: the job, its claims, the current attempt's stream head,
//! the accepted completion and the count of stored refusals, read in one round trip
//! ([`Snapshot::load`]) or at the end of a write's own batch ([`Snapshot::reads`]).

use edgerunner_protocol::chunk::{ChainHead, RECENT_CHECKSUMS};
use edgerunner_protocol::recovery::JobLease;
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{ClaimState, JobState};
use serde_json::Value;
use worker::{D1PreparedStatement, D1Result};

use crate::error::{ApiError, ApiResult};
use crate::objects::job::{Holder, JobRefusal};
use crate::store::{self, jobs, runners, Db};

/// How many statements read a [`Snapshot`] ([`Snapshot::reads`]).
pub(super) const SNAPSHOT_READS: usize = 5;

/// Everything an operation decides from, read in one round trip.
#[derive(Clone)]
pub(crate) struct Snapshot {
    pub(super) job: jobs::JobRow,
    pub(super) claims: Vec<jobs::ClaimRow>,
    /// The current attempt's newest chunks, newest first.
    pub(super) head: Vec<jobs::ChunkHeadRow>,
    pub(super) accepted: Option<jobs::AcceptedRow>,
    /// Duplicate, conflict and stale decisions stored in full so far.
    pub(super) stored_refusals: i64,
}

impl Snapshot {
    /// The job read fresh, in one round trip; with a `holder`, that runner's credential
    /// generation is checked in the same read (`401` when it moved on, or the runner is
    /// revoked or not approved), as the edge once did before every runner request.
    pub(super) async fn load(
        db: &Db,
        job_id: &str,
        holder: Option<&Holder>,
    ) -> Result<Self, JobRefusal> {
        let mut statements = Self::reads(db, job_id)?;
        if let Some(holder) = holder {
            statements.push(runners::credential_check(
                db,
                runners::CredentialCheck::Read,
                &holder.runner_id,
                &holder.organization_id,
                holder.generation,
            )?);
        }
        let results = store::read_batch(db, statements).await?;
        if let Some(credential) = results.get(SNAPSHOT_READS) {
            if credential.results::<Value>()?.is_empty() {
                return Err(JobRefusal::CredentialRevoked);
            }
        }
        Self::from_reads(&results)
    }

    /// The statements a snapshot is read with, [`SNAPSHOT_READS`] of them: alone (a fresh
    /// read), or at the end of a write's batch, which then reads what it wrote.
    pub(super) fn reads(db: &Db, job_id: &str) -> ApiResult<Vec<D1PreparedStatement>> {
        Ok(vec![
            jobs::select_job(db, job_id)?,
            jobs::select_claims(db, job_id)?,
            // The chain head and the checksums the duplicate rule remembers.
            jobs::select_stream_head(db, job_id, RECENT_CHECKSUMS as i64)?,
            jobs::select_accepted(db, job_id)?,
            jobs::select_stored_refusals(db, job_id)?,
        ])
    }

    /// The snapshot from the first [`SNAPSHOT_READS`] results of `results`.
    pub(super) fn from_reads(results: &[D1Result]) -> Result<Self, JobRefusal> {
        let [job, claims, head, accepted, refusals, ..] = results else {
            return Err(JobRefusal::internal(
                "job snapshot batch returned too few results",
            ));
        };
        let job = job
            .results::<jobs::JobRow>()?
            .into_iter()
            .next()
            .ok_or(JobRefusal::NoSuchJob)?;
        Ok(Self {
            job,
            claims: claims.results()?,
            head: head.results()?,
            accepted: accepted.results::<jobs::AcceptedRow>()?.into_iter().next(),
            stored_refusals: refusals
                .results::<jobs::StoredRefusals>()?
                .first()
                .map_or(0, |r| r.stored),
        })
    }

    pub(super) fn state(&self) -> JobState {
        self.job.state
    }

    /// What recovery and hand-back decide from.
    pub(super) fn lease(&self) -> Result<JobLease, JobRefusal> {
        let count = |n: i64, what: &str| {
            u32::try_from(n)
                .map_err(|_| ApiError::internal(format!("job {} has {what} {n}", self.job.id)))
        };
        Ok(JobLease {
            state: self.state(),
            dispatch_attempt: count(self.job.dispatch_attempt, "dispatch attempt")?,
            released_attempts: count(self.job.released_attempts, "released attempts")?,
            lease_expires_at_ms: self.job.lease_expires_at,
        })
    }

    pub(super) fn active_claim(&self) -> Option<&jobs::ClaimRow> {
        let id = self.job.active_claim_id.as_deref()?;
        self.claims
            .iter()
            .find(|c| c.id == id && c.state == ClaimState::Active)
    }

    pub(super) fn chain_head(&self) -> ApiResult<ChainHead> {
        let next = self.head.first().map_or(0, |c| c.sequence + 1);
        let checksums = self
            .head
            .iter()
            .rev()
            .map(|c| Sha256Hex::parse(&c.checksum))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(ApiError::internal)?;
        ChainHead::restore(u64::try_from(next).unwrap_or(0), checksums)
            .ok_or_else(|| ApiError::internal("stored stream head is inconsistent"))
    }

    /// The claim a runner names must be this job's active one and the runner's own. A claim that
    /// exists but is over is a conflict the runner should hear about (it lost the job); anything
    /// else is "not found", so a runner learns nothing about jobs it does not hold.
    pub(super) fn held_claim(
        &self,
        runner: &str,
        claim_id: &str,
    ) -> Result<&jobs::ClaimRow, JobRefusal> {
        let claim = self
            .claims
            .iter()
            .find(|c| c.id == claim_id && c.runner_id == runner)
            .ok_or(JobRefusal::NoSuchClaim)?;
        if self.active_claim().map(|c| c.id.as_str()) != Some(claim_id) {
            return Err(JobRefusal::ClaimNotActive {
                claim_id: claim_id.to_owned(),
                claim_state: claim.state,
                job_state: self.job.state,
                attempt: self.job.dispatch_attempt,
            });
        }
        Ok(claim)
    }
}
