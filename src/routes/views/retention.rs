//! The organization's retention setting.

use serde::Serialize;

use crate::store::retention::RetentionRow;

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
