//! `QueueHistory`: an organization's last day in five-minute buckets, oldest first, every
//! bucket present (one the cron pass wrote nothing for had nothing to show: zeros, no samples).

use serde::Serialize;

use crate::platform::rfc3339;
use crate::store::history::{bucket_of, BucketRow, BUCKETS, BUCKET_MILLIS};

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BucketView {
    /// The bucket's start.
    pub(crate) at: Option<String>,
    /// How many cron samples it took (at most one a minute; 0: none had anything to show).
    pub(crate) samples: i64,
    /// The most jobs queued any sample saw.
    pub(crate) queued: i64,
    /// The most jobs held by runners (claimed, running, cancel requested) any sample saw.
    pub(crate) running: i64,
    /// Jobs finished in it: completed by a runner (succeeded, failed, cancelled) or failed out
    /// of attempts.
    pub(crate) finished: i64,
    /// Busy job slots over all job slots of the online active runners, over its samples (0 to
    /// 1, four decimals); `null` when no runner was online.
    pub(crate) utilization: Option<f64>,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HistoryView<'a> {
    pub(crate) organization_id: &'a str,
    pub(crate) bucket_seconds: i64,
    /// The first bucket's start, and the last bucket's end (the current bucket's).
    pub(crate) from: Option<String>,
    pub(crate) to: Option<String>,
    pub(crate) buckets: Vec<BucketView>,
    pub(crate) generated_at: Option<String>,
}

/// The first bucket a view at `now` shows: a day of buckets ending with the current one.
pub(crate) fn first_bucket(now: i64) -> i64 {
    bucket_of(now) - (BUCKETS - 1) * BUCKET_MILLIS
}

impl BucketView {
    fn of(at: i64, row: Option<&BucketRow>) -> Self {
        let Some(row) = row else {
            return BucketView {
                at: rfc3339(at),
                samples: 0,
                queued: 0,
                running: 0,
                finished: 0,
                utilization: None,
            };
        };
        let utilization = (row.slots > 0).then(|| {
            let ratio = row.busy_slots as f64 / row.slots as f64;
            (ratio * 10_000.0).round() / 10_000.0
        });
        BucketView {
            at: rfc3339(at),
            samples: row.samples,
            queued: row.queued,
            running: row.running,
            finished: row.finished_total.saturating_sub(row.finished_base).max(0),
            utilization,
        }
    }
}

/// The view of `rows` (oldest first, from [`first_bucket`] on) at `now`.
pub(crate) fn build<'a>(org: &'a str, rows: &[BucketRow], now: i64) -> HistoryView<'a> {
    let first = first_bucket(now);
    let mut rows = rows.iter().peekable();
    let buckets = (0..BUCKETS)
        .map(|n| {
            let at = first + n * BUCKET_MILLIS;
            while rows.next_if(|row| row.bucket_at < at).is_some() {}
            BucketView::of(at, rows.next_if(|row| row.bucket_at == at))
        })
        .collect();
    HistoryView {
        organization_id: org,
        bucket_seconds: BUCKET_MILLIS / 1000,
        from: rfc3339(first),
        to: rfc3339(bucket_of(now) + BUCKET_MILLIS),
        buckets,
        generated_at: rfc3339(now),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z, on a bucket's start.
    const NOW: i64 = 1_767_225_600_000;

    fn row(bucket_at: i64, busy_slots: i64, slots: i64) -> BucketRow {
        BucketRow {
            bucket_at,
            samples: 5,
            queued: 7,
            running: 2,
            busy_slots,
            slots,
            finished_base: 10,
            finished_total: 13,
        }
    }

    #[test]
    fn a_day_of_buckets_ends_with_the_current_one_and_empty_ones_are_zero() {
        let now = NOW + 61_000;
        let view = build("org_1", &[], now);
        assert_eq!(view.buckets.len(), 288);
        assert_eq!(view.from.as_deref(), Some("2025-12-31T00:05:00.000Z"));
        assert_eq!(view.to.as_deref(), Some("2026-01-01T00:05:00.000Z"));
        assert_eq!(
            view.buckets.last().and_then(|b| b.at.as_deref()),
            Some("2026-01-01T00:00:00.000Z")
        );
        assert_eq!(
            to_value(&view.buckets[0]).unwrap(),
            json!({"at": "2025-12-31T00:05:00.000Z", "samples": 0, "queued": 0, "running": 0,
                   "finished": 0, "utilization": null})
        );
    }

    #[test]
    fn a_stored_bucket_reads_as_its_peaks_its_finished_jobs_and_its_utilization() {
        let first = first_bucket(NOW);
        // One before the window (a row the read may still return), two inside, one in the gap.
        let rows = [
            row(first - BUCKET_MILLIS, 1, 1),
            row(first, 3, 9),
            row(NOW, 0, 0),
        ];
        let view = build("org_1", &rows, NOW);
        assert_eq!(view.buckets.len(), 288);
        assert_eq!(
            to_value(&view.buckets[0]).unwrap(),
            json!({"at": "2025-12-31T00:05:00.000Z", "samples": 5, "queued": 7, "running": 2,
                   "finished": 3, "utilization": 0.3333})
        );
        assert_eq!(view.buckets[1].samples, 0, "a bucket with no row");
        let last = view.buckets.last().unwrap();
        assert_eq!(
            (last.samples, last.utilization),
            (5, None),
            "no runner online"
        );
        assert_eq!(view.buckets.iter().map(|b| b.finished).sum::<i64>(), 6);
    }
}
