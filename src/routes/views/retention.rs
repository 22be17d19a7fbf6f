//! The organization's retention setting and its usage.

use serde::Serialize;

use crate::platform::rfc3339;
use crate::store::retention::RetentionRow;
use crate::store::usage::{UsageRow, MAX_DUE_COUNTED};

/// `RetentionSetting`: how many days the organization keeps its finished jobs, and how many
/// jobs retention has deleted so far.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RetentionView<'a> {
    organization_id: &'a str,
    retention_days: i64,
    deleted_jobs: i64,
}

impl<'a> RetentionView<'a> {
    pub(crate) fn of(organization_id: &'a str, row: &RetentionRow) -> Self {
        RetentionView {
            organization_id,
            retention_days: row.retention_days,
            deleted_jobs: row.retention_deleted_jobs,
        }
    }
}

/// `Usage`: what the organization stores now, from one bounded read.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageView<'a> {
    organization_id: &'a str,
    jobs: UsageJobs,
    r2: UsageR2,
    d1: UsageD1,
    oldest_job_at: Option<String>,
    retention: UsageRetention,
}

/// `UsageJobs`: the organization's jobs by where they are kept (held overlaps live and
/// archived), and how many retention has deleted.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageJobs {
    live: i64,
    archived: i64,
    held: i64,
    expiring: i64,
    deleted_by_retention: i64,
}

/// `UsageR2`: the archives' objects in R2 (two a job) and their bundles' bytes.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageR2 {
    objects: i64,
    bundle_bytes: i64,
}

/// `UsageD1`: what the organization's unbounded writes hold in D1, estimated as migration
/// 0015 says, against its quota; and the whole database's size as D1 reports it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageD1 {
    organization_bytes: i64,
    quota_bytes: i64,
    quota_is_default: bool,
    database_bytes: Option<u64>,
}

/// `UsageRetention`: the cut a retention pass would use now and how many jobs it would
/// expire at it (counted to `MAX_DUE_COUNTED`; `dueCapped` says the count stopped there).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageRetention {
    retention_days: i64,
    cut: Option<String>,
    due: i64,
    due_capped: bool,
}

impl<'a> UsageView<'a> {
    /// `default_quota`: the deployment's, for an organization without its own.
    pub(crate) fn of(
        organization_id: &'a str,
        row: &UsageRow,
        database_bytes: Option<u64>,
        default_quota: i64,
    ) -> Self {
        UsageView {
            organization_id,
            jobs: UsageJobs {
                live: row.jobs_live,
                archived: row.jobs_archived,
                held: row.jobs_held,
                expiring: row.jobs_expiring,
                deleted_by_retention: row.retention_deleted_jobs,
            },
            r2: UsageR2 {
                objects: row.r2_objects,
                bundle_bytes: row.r2_bytes,
            },
            d1: UsageD1 {
                organization_bytes: row.d1_bytes,
                quota_bytes: row.d1_quota_override.unwrap_or(default_quota),
                quota_is_default: row.d1_quota_override.is_none(),
                database_bytes,
            },
            oldest_job_at: row.oldest_job_at.and_then(rfc3339),
            retention: UsageRetention {
                retention_days: row.retention_days,
                cut: rfc3339(row.cut),
                due: row.due_at_cut,
                due_capped: row.due_at_cut >= MAX_DUE_COUNTED,
            },
        }
    }
}
