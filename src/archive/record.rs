//! A job's archive record: what the job's reads need besides its bundle, kept in R2 beside it
//! (`records/<sha256>`). The detail's parts as they were rendered from the job's rows, and for
//! every chunk where its element sits in the bundle, so that a stream page is one range read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bundle::ChunkSpan;
use crate::routes::views::jobs::DetailParts;

/// The record's layout version.
pub(crate) const RECORD_VERSION: u32 = 1;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ArchiveRecord {
    pub(crate) record_version: u32,
    pub(crate) job_id: String,
    pub(crate) bundle_sha256: String,
    /// The job detail's claims, timeline, chunk heads, stream totals and completions.
    pub(crate) detail: DetailParts,
    /// Every chunk of the bundle, in stream order (attempt, then sequence).
    pub(crate) chunks: Vec<ChunkEntry>,
}

/// One chunk: `[attempt, sequence, offset, length, payloadBytes, receivedAt]` (an array, so
/// that a record of 80,000 chunks stays a few MiB).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkEntry(
    pub(crate) i64,
    pub(crate) i64,
    pub(crate) u64,
    pub(crate) u64,
    pub(crate) u64,
    pub(crate) i64,
);

impl ChunkEntry {
    pub(crate) fn key(&self) -> (i64, i64) {
        (self.0, self.1)
    }

    pub(crate) fn offset(&self) -> u64 {
        self.2
    }

    pub(crate) fn end(&self) -> u64 {
        self.2 + self.3
    }

    pub(crate) fn payload_bytes(&self) -> u64 {
        self.4
    }

    pub(crate) fn received_at(&self) -> i64 {
        self.5
    }
}

impl From<&ChunkSpan> for ChunkEntry {
    fn from(span: &ChunkSpan) -> Self {
        ChunkEntry(
            span.attempt,
            span.sequence,
            span.offset,
            span.length,
            span.payload_bytes,
            span.received_at,
        )
    }
}

/// The chunks of one stream page, chosen as `stream_page.sql` chooses them from the rows: after
/// the cursor `after`, within attempts `attempts`, at most `limit`; of those, each chunk while
/// the payload bytes before it in the page stay under `budget`. `page_rows` is how many the
/// range held before the budget cut it (the page says `more` from it, as from the rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PageSelection {
    pub(crate) range: std::ops::Range<usize>,
    pub(crate) page_rows: i64,
}

/// Pure: `chunks` in stream order.
pub(crate) fn select_page(
    chunks: &[ChunkEntry],
    after: (i64, i64),
    attempts: (i64, i64),
    limit: i64,
    budget: i64,
) -> PageSelection {
    let start = chunks.partition_point(|c| c.key() <= after || c.0 < attempts.0);
    let in_range = chunks[start..]
        .iter()
        .take_while(|c| c.0 <= attempts.1)
        .take(usize::try_from(limit).unwrap_or(0))
        .count();
    let mut before: u64 = 0;
    let budget = u64::try_from(budget).unwrap_or(0);
    let kept = chunks[start..start + in_range]
        .iter()
        .take_while(|c| {
            let keep = before < budget;
            before += c.payload_bytes();
            keep
        })
        .count();
    PageSelection {
        range: start..start + kept,
        page_rows: i64::try_from(in_range).unwrap_or(i64::MAX),
    }
}

/// A chunk element of the bundle (`bytes`, exactly its span) as a stream page shows it: the
/// chunk as sent, and when it was received.
pub(crate) fn received_chunk(bytes: &[u8], received_at: i64) -> Result<Value, String> {
    let mut chunk: Value = serde_json::from_slice(bytes).map_err(|err| err.to_string())?;
    let Value::Object(fields) = &mut chunk else {
        return Err("a chunk element of the bundle is not an object".to_owned());
    };
    fields.insert(
        "receivedAt".to_owned(),
        crate::platform::rfc3339(received_at).map_or(Value::Null, Value::String),
    );
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempts 1 and 2, three chunks each, 10 payload bytes each, elements 100 bytes apart.
    fn chunks() -> Vec<ChunkEntry> {
        let mut all = Vec::new();
        for attempt in 1..=2 {
            for sequence in 0..3 {
                let n = all.len() as u64;
                all.push(ChunkEntry(
                    attempt,
                    sequence,
                    100 * n,
                    90,
                    10,
                    1_000 + n as i64,
                ));
            }
        }
        all
    }

    fn keys(chunks: &[ChunkEntry], page: &PageSelection) -> Vec<(i64, i64)> {
        chunks[page.range.clone()]
            .iter()
            .map(ChunkEntry::key)
            .collect()
    }

    #[test]
    fn a_page_starts_after_its_cursor_and_stops_at_its_limit() {
        let all = chunks();
        let page = select_page(&all, (0, -1), (1, 8), 4, 1 << 20);
        assert_eq!(keys(&all, &page), [(1, 0), (1, 1), (1, 2), (2, 0)]);
        assert_eq!(page.page_rows, 4);
        let page = select_page(&all, (1, 1), (1, 8), 100, 1 << 20);
        assert_eq!(keys(&all, &page), [(1, 2), (2, 0), (2, 1), (2, 2)]);
        assert_eq!(page.page_rows, 4);
        let page = select_page(&all, (2, 2), (1, 8), 100, 1 << 20);
        assert_eq!((page.range.len(), page.page_rows), (0, 0));
    }

    #[test]
    fn a_page_keeps_to_its_attempts() {
        let all = chunks();
        let page = select_page(&all, (0, -1), (2, 2), 100, 1 << 20);
        assert_eq!(keys(&all, &page), [(2, 0), (2, 1), (2, 2)]);
        let page = select_page(&all, (0, -1), (1, 1), 100, 1 << 20);
        assert_eq!(keys(&all, &page), [(1, 0), (1, 1), (1, 2)]);
        let page = select_page(&all, (0, -1), (3, 3), 100, 1 << 20);
        assert_eq!((page.range.len(), page.page_rows), (0, 0));
    }

    #[test]
    fn a_page_takes_chunks_while_the_bytes_before_them_stay_under_the_budget() {
        let all = chunks();
        // 10 bytes each: the bytes before the 3rd chunk are 20, not under 20.
        let page = select_page(&all, (0, -1), (1, 8), 100, 20);
        assert_eq!(keys(&all, &page), [(1, 0), (1, 1)]);
        assert_eq!(page.page_rows, 6);
        let page = select_page(&all, (0, -1), (1, 8), 100, 21);
        assert_eq!(page.range.len(), 3);
        // A budget of 1 still takes the first chunk, whatever its size.
        let page = select_page(&all, (0, -1), (1, 8), 100, 1);
        assert_eq!(page.range.len(), 1);
    }

    #[test]
    fn a_chunk_element_reads_as_sent_with_when_it_was_received() {
        let element = br#"{"checksum":"c","payload":{"n":1.50},"sequence":0}"#;
        let chunk = received_chunk(element, 1_780_000_000_000).unwrap();
        assert_eq!(chunk["receivedAt"], "2026-05-28T20:26:40.000Z");
        // The payload's number lexeme is kept as sent.
        assert_eq!(chunk["payload"].to_string(), r#"{"n":1.50}"#);
        assert!(received_chunk(b"[1]", 0).is_err());
        assert!(received_chunk(b"{\"a\":", 0).is_err());
    }

    #[test]
    fn a_record_crosses_json_whole() {
        let record = ArchiveRecord {
            record_version: RECORD_VERSION,
            job_id: "job_1".into(),
            bundle_sha256: "ab".repeat(32),
            detail: DetailParts {
                claims: vec![serde_json::json!({"id": "job_1-a1"})],
                events: Vec::new(),
                stream: Vec::new(),
                stream_more: false,
                stream_cursor: "0.-1".into(),
                stream_totals: Vec::new(),
                completions: Vec::new(),
            },
            chunks: chunks(),
        };
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""chunks":[[1,0,0,90,10,1000],"#), "{text}");
        assert_eq!(
            serde_json::from_str::<ArchiveRecord>(&text).unwrap(),
            record
        );
        let unknown = text.replacen("{", r#"{"extra":1,"#, 1);
        assert!(serde_json::from_str::<ArchiveRecord>(&unknown).is_err());
    }
}
