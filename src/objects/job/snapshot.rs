//! What an operation decides from: the job, its claims, the current attempt's stream head,
//! the accepted completion and the count of stored refusals (the store's [`batched::JobRows`]),
//! read in one round trip ([`Snapshot::load`]) or at the end of a write's own batch
//! ([`Snapshot::reads`]); and what the operations read of it.

use std::cell::RefCell;
use std::rc::Rc;

use edgerunner_protocol::chunk::ChainHead;
use edgerunner_protocol::recovery::JobLease;
use edgerunner_protocol::stable_json::Sha256Hex;
use edgerunner_protocol::state::{ClaimState, JobState};
use worker::{D1PreparedStatement, D1Result};

use crate::error::{ApiError, ApiResult};
use crate::objects::job::{Holder, JobRefusal};
use crate::store::batched::{self, JobRead};
use crate::store::jobs;
use crate::store::runners::Credential;
use crate::store::Db;

/// Everything an operation decides from, read in one round trip.
pub(crate) type Snapshot = batched::JobRows;

/// The job as its object last left it, or nothing (the next operation loads it).
pub(super) type Known = Rc<RefCell<Option<Snapshot>>>;

impl Snapshot {
    /// The job read fresh, in one round trip; with a `holder`, that runner's credential
    /// generation is checked in the same read (`401` when it moved on, or the runner is
    /// revoked or not approved), as the edge once did before every runner request.
    pub(super) async fn load(
        db: &Db,
        job_id: &str,
        holder: Option<&Holder>,
    ) -> Result<Self, JobRefusal> {
        let credential = holder.map(|holder| Credential {
            runner_id: &holder.runner_id,
            organization_id: &holder.organization_id,
            generation: holder.generation,
        });
        match batched::read_job(db, job_id, credential.as_ref()).await? {
            JobRead::Found(rows) => Ok(*rows),
            JobRead::NoJob => Err(JobRefusal::NoSuchJob),
            JobRead::CredentialRevoked => Err(JobRefusal::CredentialRevoked),
        }
    }

    /// The statements a snapshot is read with: at the end of a write's batch, which then reads
    /// what it wrote.
    pub(super) fn reads(db: &Db, job_id: &str) -> ApiResult<Vec<D1PreparedStatement>> {
        batched::job_reads(db, job_id)
    }

    /// The snapshot those reads answered.
    pub(super) fn from_reads(results: &[D1Result]) -> Result<Self, JobRefusal> {
        Self::of(results)?.ok_or(JobRefusal::NoSuchJob)
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
