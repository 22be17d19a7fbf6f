//! The retention pass: archived jobs past their organization's retention cut are deleted —
//! their R2 objects, the evidence only they hold, their custody rows and their row — in the
//! steps the protocol's `retention::decide` names (expire, then delete), each guarded and safe
//! to repeat, so a pass that stops anywhere is finished by the next.
//!
//! The cron trigger runs one pass over every organization each minute (after the archive
//! pass, whose jobs it waits for); an admin runs one over their own organization at once
//! (`POST /api/developer/retention/run`), which on a local test server may name the time it
//! runs as (`asOf`). A pass is bounded: at most [`JOBS_PER_PASS`] jobs, each costing one R2
//! call and two or three D1 batches, and it says whether more are due. Deleting is final and
//! counted: the organization's `retention_deleted_jobs` grows in the batch that deletes the
//! row, and each organization a pass deleted from gets one `retention.pass` event.

use std::collections::BTreeMap;

use edgerunner_protocol::archive::{bundle_key, record_key};
use edgerunner_protocol::kind::EventKind;
use edgerunner_protocol::stable_json::Sha256Hex;
use serde::Serialize;
use serde_json::json;
use worker::Env;

use crate::archive::objects;
use crate::error::{ApiError, ApiResult};
use crate::store::retention::{DueJob, ExpiringJob};
use crate::store::{self, events, Db, RoundTrips};

/// Jobs one pass deletes at most (and the most an admin may ask for).
pub(crate) const JOBS_PER_PASS: i64 = 25;
/// Evidence rows of one table one batch deletes at most.
const EVIDENCE_BATCH_ROWS: i64 = 500;
/// Evidence batches one job's deletion runs at most before the next pass goes on with it:
/// 20,000 rows of each evidence table per pass.
const EVIDENCE_BATCHES_PER_JOB: usize = 40;

/// `RetentionPass`: what one pass did (the answer of `POST /api/developer/retention/run`, and
/// the cron's log line). It stays beside the pass, as the reaper's reports do: counts the pass
/// keeps as it works, not a store row shaped for a client.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Report {
    expired: usize,
    deleted: usize,
    /// Jobs whose deletion did not finish in this pass (an error, or evidence left to delete).
    unfinished: usize,
    more: bool,
    /// For each organization's `retention.pass` event; not reported.
    #[serde(skip)]
    deleted_by_org: BTreeMap<String, usize>,
}

/// One bounded pass at `now`: over every organization (`org = None`, the cron trigger) or one
/// (an admin). Jobs left expiring by an earlier pass are finished first.
pub(crate) async fn pass(
    env: &Env,
    org: Option<&str>,
    now: i64,
    limit: i64,
    actor: &str,
) -> ApiResult<Report> {
    let db = Db::of(env, RoundTrips::default())?;
    let limit = limit.clamp(0, JOBS_PER_PASS);
    let mut report = Report::default();

    let left = match org {
        Some(org) => store::retention::expiring(&db, org, limit).await?,
        None => store::retention::expiring_all(&db, limit).await?,
    };
    let room = limit - i64::try_from(left.len()).unwrap_or(limit);
    let due = match org {
        Some(org) => {
            let days = store::retention::setting(&db, org)
                .await?
                .ok_or_else(|| ApiError::not_found("no such organization"))?
                .days()?;
            store::retention::due(&db, org, days.cut(now), room + 1).await?
        }
        None => store::retention::due_all(&db, now, room + 1).await?,
    };
    report.more = i64::try_from(due.len()).unwrap_or(i64::MAX) > room;

    let mut doomed: Vec<ExpiringJob> = left;
    for job in due.iter().take(usize::try_from(room).unwrap_or(0)) {
        let DueJob {
            id,
            organization_id,
            cut,
        } = job;
        match store::retention::expire(&db, organization_id, id, now, *cut).await {
            Ok(Some(expiring)) => {
                report.expired += 1;
                doomed.push(expiring);
            }
            // Held, or taken by another pass, since it was read.
            Ok(None) => {}
            Err(err) => {
                worker::console_error!("retention: expiring {id} failed: {err:?}");
                report.unfinished += 1;
            }
        }
    }
    let bucket = objects::bucket(env)?;
    for job in &doomed {
        match delete(&db, &bucket, job).await {
            Ok(true) => {
                report.deleted += 1;
                *report
                    .deleted_by_org
                    .entry(job.organization_id.clone())
                    .or_default() += 1;
            }
            Ok(false) => report.unfinished += 1,
            Err(err) => {
                worker::console_error!("retention: deleting {} failed: {err:?}", job.id);
                report.unfinished += 1;
            }
        }
    }
    report.more |= report.unfinished > 0;
    record_pass(&db, &report.deleted_by_org, actor, now).await?;
    Ok(report)
}

/// Deletes one expiring job: its R2 objects, then its evidence in bounded batches, then its
/// custody and its row in one batch. `Ok(false)`: evidence is left for the next pass (or the
/// row was gone already, deleted by another pass).
async fn delete(db: &Db, bucket: &worker::Bucket, job: &ExpiringJob) -> ApiResult<bool> {
    let sha = Sha256Hex::parse(&job.bundle_sha256).map_err(ApiError::internal)?;
    objects::delete_all(bucket, &[bundle_key(&sha), record_key(&sha)]).await?;
    for _ in 0..EVIDENCE_BATCHES_PER_JOB {
        let deleted = store::retention::delete_evidence_batch(
            db,
            &job.organization_id,
            &job.id,
            EVIDENCE_BATCH_ROWS,
        )
        .await?;
        if deleted.iter().all(|n| *n < EVIDENCE_BATCH_ROWS) {
            return store::retention::delete_job(db, &job.organization_id, &job.id).await;
        }
    }
    Ok(false)
}

/// One `retention.pass` event for each organization the pass deleted from (how many of its
/// jobs), all in one batch; none when it deleted nothing.
async fn record_pass(
    db: &Db,
    deleted_by_org: &BTreeMap<String, usize>,
    actor: &str,
    now: i64,
) -> ApiResult<()> {
    if deleted_by_org.is_empty() {
        return Ok(());
    }
    let details: Vec<(&str, String)> = deleted_by_org
        .iter()
        .map(|(org, deleted)| (org.as_str(), json!({ "deletedJobs": deleted }).to_string()))
        .collect();
    let events = details
        .iter()
        .map(|(org, detail)| {
            events::insert(
                db,
                &events::NewEvent::of_organization(
                    org,
                    actor,
                    EventKind::RetentionPass,
                    Some(detail),
                    now,
                ),
            )
        })
        .collect::<ApiResult<Vec<_>>>()?;
    store::batch(db, events).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pass_reports_its_counts_not_its_organizations() {
        let report = Report {
            expired: 2,
            deleted: 1,
            unfinished: 1,
            more: true,
            deleted_by_org: BTreeMap::from([("org_1".to_owned(), 1)]),
        };
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({"expired": 2, "deleted": 1, "unfinished": 1, "more": true})
        );
    }
}
