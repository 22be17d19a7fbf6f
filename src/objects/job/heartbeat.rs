//! A heartbeat: the holder of the job's active claim extends its lease (and the first one
//! moves the job `claimed → running`). Decided by [`decide`] from the snapshot alone; a claim's
//! first heartbeat to an object that never ran for its job is presumed instead
//! ([`presumed_first`]): one D1 round trip where a fresh read and then the write take two.

use edgerunner_protocol::envelope::ClaimId;
use edgerunner_protocol::recovery::{lease_expired, LEASE_EXTENSION_SECONDS};
use edgerunner_protocol::state::{JobInput, JobState};

use super::commit::{AlarmChange, Answer, OpCtx, OpResult};
use super::snapshot::Snapshot;
use crate::objects::job::{HeartbeatAnswer, JobRefusal, JobReply, LeaseUse};
use crate::platform::rfc3339;
use crate::store::guards;
use crate::store::lifecycle::{self, AsKnown, Beat};
use crate::store::writes::Writes;

/// Whether `extend` seconds is a lease extension the protocol allows.
fn valid_extension(extend: i64) -> bool {
    u32::try_from(extend).is_ok_and(|s| LEASE_EXTENSION_SECONDS.contains(&s))
}

/// What a heartbeat from `runner` naming `claim_id` and asking for `extend` seconds writes at
/// `now`, or why it is refused: the claim must be the job's active one and the runner's, its
/// lease not lapsed.
pub(super) fn decide<'a>(
    snap: &'a Snapshot,
    runner: &'a str,
    claim_id: &'a str,
    extend: i64,
    now: i64,
) -> OpResult<Beat<'a>> {
    if !valid_extension(extend) {
        return Err(JobRefusal::InvalidLease);
    }
    let claim = snap.held_claim(runner, claim_id)?;
    let job = &snap.job;
    if lease_expired(job.lease_expires_at.unwrap_or(0), now) {
        return Err(JobRefusal::LeaseExpired(LeaseUse::Heartbeat));
    }
    let state = snap.state();
    let to = match state {
        JobState::Claimed => state.transition(JobInput::Heartbeat)?,
        _ => state,
    };
    Ok(Beat {
        org: &job.organization_id,
        job_id: &job.id,
        claim_id,
        attempt: claim.dispatch_attempt,
        runner,
        lease: now + extend * 1000,
        from: state,
        to,
    })
}

/// Decides and writes a heartbeat; the object learns the job as the write left it.
pub(super) async fn run(ctx: &OpCtx<'_>, snap: Snapshot, claim_id: &str, extend: i64) -> Answer {
    let runner = ctx.runner()?;
    let beat = decide(&snap, runner, claim_id, extend, ctx.now)?;
    let mut writes = Writes::default();
    lifecycle::heartbeat(ctx.db, &mut writes, &beat, ctx.now)?;
    ctx.commit(&snap, true, writes).await?;
    ctx.alarm.set(AlarmChange::At(beat.lease));
    let answer = HeartbeatAnswer {
        cancel_requested: beat.to == JobState::CancelRequested,
        cancel_reason: snap.job.cancel_reason.clone(),
        state: beat.to,
        lease_expires_at: rfc3339(beat.lease),
    };
    ctx.learn(learned(&snap, &beat, ctx.now));
    Ok(JobReply::Heartbeat(answer))
}

/// The job as a committed heartbeat `beat` left it.
fn learned(snap: &Snapshot, beat: &Beat<'_>, now: i64) -> Snapshot {
    let mut known = snap.clone();
    known.job.state = beat.to;
    known.job.lease_expires_at = Some(beat.lease);
    known.job.updated_at = now;
    if let Some(held) = known.claims.iter_mut().find(|c| c.id == beat.claim_id) {
        held.lease_expires_at = beat.lease;
        held.started_at = held.started_at.or(Some(now));
        held.last_heartbeat_at = Some(now);
    }
    known
}

/// The heartbeat presumed of an object that knows nothing of its job: the first one of the
/// claim `claim_id` names, for job `job_id` ([`ClaimId::job_and_attempt`]). Right after a grant
/// (whose write is the runner's object's, [`crate::objects::runner::grant`]) the job is
/// `claimed` at that attempt, with that claim active and its lease live; `None` when the claim
/// names another job or the extension is out of bounds (left to [`decide`] and its refusals).
fn presume<'a>(
    job_id: &'a str,
    claim_id: &'a str,
    runner: &'a str,
    org: &'a str,
    extend: i64,
    now: i64,
) -> OpResult<Option<Beat<'a>>> {
    let attempt = match ClaimId::job_and_attempt(claim_id) {
        Some((job, attempt)) if job == job_id => i64::from(attempt.get()),
        _ => return Ok(None),
    };
    if !valid_extension(extend) {
        return Ok(None);
    }
    let claimed = JobState::Claimed;
    Ok(Some(Beat {
        org,
        job_id,
        claim_id,
        attempt,
        runner,
        lease: now + extend * 1000,
        from: claimed,
        to: claimed.transition(JobInput::Heartbeat)?,
    }))
}

/// A heartbeat to an object that knows nothing of its job, decided as the first heartbeat of
/// the claim it names ([`presume`]). The batch asserts exactly what that presumes, and that the
/// claim is the holder's; so it commits only where [`decide`] from a fresh read writes the same
/// rows, and it reads the job back at its end, so the object learns the job from its own write.
///
/// `Ok(None)`: not presumed, or refuted by D1 (the job moved on: a cancel, a lapsed lease, a
/// claim not the sender's). The caller then decides from a fresh read, as for any cold
/// operation. Only an object that never wrote for its job tries this (`JobObject::never_ran`).
pub(super) async fn presumed_first(
    ctx: &OpCtx<'_>,
    job_id: &str,
    claim_id: &str,
    extend: i64,
) -> OpResult<Option<JobReply>> {
    let Some(holder) = ctx.holder else {
        return Ok(None);
    };
    let (runner, org) = (&holder.runner_id, &holder.organization_id);
    let Some(beat) = presume(job_id, claim_id, runner, org, extend, ctx.now)? else {
        return Ok(None);
    };
    let mut writes = Writes::default();
    writes.any(lifecycle::assert_claim_held(ctx.db, claim_id, runner, org)?);
    // The job's row and the claim's: one each, as the assertions promised.
    lifecycle::heartbeat(ctx.db, &mut writes, &beat, ctx.now)?;
    let reads = writes.read(Snapshot::reads(ctx.db, job_id)?);
    let presumed = AsKnown {
        job_id,
        state: beat.from,
        attempt: beat.attempt,
        active_claim: Some(claim_id),
    };
    let changed = match ctx.commit_as(&presumed, true, writes).await {
        Ok(changed) => changed,
        Err(err) => match JobRefusal::from(err) {
            JobRefusal::Guard(guard) if guard.name == guards::JOB_MOVED => return Ok(None),
            refusal => return Err(refusal),
        },
    };
    let known = Snapshot::from_reads(changed.results(&reads))?;
    let answer = HeartbeatAnswer {
        cancel_requested: false,
        cancel_reason: known.job.cancel_reason.clone(),
        state: beat.to,
        lease_expires_at: rfc3339(beat.lease),
    };
    ctx.alarm.set(AlarmChange::At(beat.lease));
    ctx.learn(known);
    Ok(Some(JobReply::Heartbeat(answer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::job::fixtures::{held, NOW};

    #[test]
    fn a_first_heartbeat_starts_the_job_and_sets_the_lease() {
        let snap = held(JobState::Claimed);
        let beat = decide(&snap, "run_1", "job_1-a1", 60, NOW).unwrap();
        assert_eq!(
            beat,
            Beat {
                org: "org_1",
                job_id: "job_1",
                claim_id: "job_1-a1",
                attempt: 1,
                runner: "run_1",
                lease: NOW + 60_000,
                from: JobState::Claimed,
                to: JobState::Running,
            }
        );
        // A later one keeps the state, also a cancel request its holder is told of.
        for state in [JobState::Running, JobState::CancelRequested] {
            let snap = held(state);
            let beat = decide(&snap, "run_1", "job_1-a1", 30, NOW).unwrap();
            assert_eq!(
                (beat.from, beat.to, beat.lease),
                (state, state, NOW + 30_000)
            );
        }
    }

    #[test]
    fn an_extension_out_of_bounds_is_an_invalid_lease() {
        let snap = held(JobState::Running);
        for extend in [
            -1,
            0,
            i64::from(*LEASE_EXTENSION_SECONDS.end()) + 1,
            i64::MAX,
        ] {
            assert!(
                matches!(
                    decide(&snap, "run_1", "job_1-a1", extend, NOW),
                    Err(JobRefusal::InvalidLease)
                ),
                "{extend}"
            );
        }
    }

    #[test]
    fn a_claim_of_another_runner_or_job_is_not_found() {
        let snap = held(JobState::Running);
        assert!(matches!(
            decide(&snap, "run_2", "job_1-a1", 60, NOW),
            Err(JobRefusal::NoSuchClaim)
        ));
        assert!(matches!(
            decide(&snap, "run_1", "job_9-a1", 60, NOW),
            Err(JobRefusal::NoSuchClaim)
        ));
    }

    #[test]
    fn a_claim_that_is_over_is_told_it_lost_the_job() {
        let snap = crate::objects::job::fixtures::requeued_after_loss();
        let Err(JobRefusal::ClaimNotActive {
            claim_id,
            claim_state,
            job_state,
            attempt,
        }) = decide(&snap, "run_1", "job_1-a1", 60, NOW)
        else {
            panic!("not refused as over");
        };
        assert_eq!(
            (
                claim_id.as_str(),
                claim_state.as_str(),
                job_state.as_str(),
                attempt
            ),
            ("job_1-a1", "lost", "queued", 1)
        );
    }

    #[test]
    fn a_heartbeat_after_the_lease_lapsed_is_refused_for_recovery() {
        let snap = held(JobState::Running);
        let lease = snap.job.lease_expires_at.unwrap();
        assert!(decide(&snap, "run_1", "job_1-a1", 60, lease - 1).is_ok());
        assert!(matches!(
            decide(&snap, "run_1", "job_1-a1", 60, lease),
            Err(JobRefusal::LeaseExpired(LeaseUse::Heartbeat))
        ));
    }

    #[test]
    fn a_first_heartbeat_is_presumed_only_of_a_claim_that_names_this_job() {
        let beat = presume("job_1", "job_1-a2", "run_1", "org_1", 60, NOW)
            .unwrap()
            .unwrap();
        assert_eq!(
            (beat.attempt, beat.from, beat.to, beat.lease),
            (2, JobState::Claimed, JobState::Running, NOW + 60_000)
        );
        assert!(presume("job_1", "job_2-a1", "run_1", "org_1", 60, NOW)
            .unwrap()
            .is_none());
        assert!(presume("job_1", "not-a-claim", "run_1", "org_1", 60, NOW)
            .unwrap()
            .is_none());
        assert!(presume("job_1", "job_1-a1", "run_1", "org_1", 0, NOW)
            .unwrap()
            .is_none());
    }
}
