//! A claim's stream: the chunk chain kept for the caller, and log lines batched into chunks.
//!
//! [`ChunkStream::send`] makes the next chunk of the chain (sequence, `previousChecksum`,
//! hashes, `emittedAt`) and posts it. A chunk whose fate is unknown (no answer after the
//! retries) is kept and sent again, byte for byte, before anything newer: the server either
//! stored it (and says `STREAM_DUPLICATE_CHECKSUM`, which counts as stored) or did not, so the
//! chain never forks. A chunk the server refused outright was not stored, and the chain goes
//! back to where it was before it.
//!
//! Log lines are grouped: a chunk carries up to [`BatchLimits::max_lines`] lines, at most
//! [`BatchLimits::max_bytes`] of text, and waits at most [`BatchLimits::max_delay`] after its
//! first line. A log chunk's payload is `{"lines": [{"stream": "stdout"|"stderr", "line"}]}`;
//! a line longer than [`MAX_LINE_BYTES`] is cut there and marked `"truncated": true`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::chunk::{ChunkIdentity, ChunkKind, ChunkWriter, StreamChunk};
use edgerunner_protocol::stable_json::Sha256Hex;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::RunnerClient;
use crate::clock::timestamp_now;
use crate::http::ClientError;

/// The longest line kept whole, in bytes.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// The chain of one claim, as this runner has sent it.
pub struct ChunkStream {
    client: Arc<RunnerClient>,
    writer: ChunkWriter,
    /// Chunks made but not known to be stored, oldest first, each with the chain as it was
    /// before it.
    queue: VecDeque<(StreamChunk, ChunkWriter)>,
}

impl ChunkStream {
    pub fn new(client: Arc<RunnerClient>, identity: ChunkIdentity) -> Self {
        Self {
            client,
            writer: ChunkWriter::new(identity),
            queue: VecDeque::new(),
        }
    }

    /// Appends `payload` as the next chunk and sends every chunk not yet known to be stored,
    /// in order; returns the new chunk's checksum. On a transient failure the chunks are kept
    /// (and re-sent unchanged by the next `send` or [`ChunkStream::flush`]); on a refusal the
    /// refused chunk and those after it are dropped and the chain goes back to before it.
    pub async fn send(
        &mut self,
        kind: ChunkKind,
        payload: Value,
    ) -> Result<Sha256Hex, ClientError> {
        let before = self.writer.clone();
        let chunk = self.writer.next(kind, payload, timestamp_now());
        let checksum = chunk.checksum.clone();
        self.queue.push_back((chunk, before));
        self.flush().await?;
        Ok(checksum)
    }

    /// Sends the chunks whose fate is unknown, again, byte for byte.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        while let Some((chunk, before)) = self.queue.front() {
            match self.client.stream(chunk).await {
                Ok(_) => {
                    self.queue.pop_front();
                }
                Err(error) if error.is_transient() => return Err(error),
                Err(error) => {
                    self.writer = before.clone();
                    self.queue.clear();
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// What the completion's `finalStreamChecksum` must be; `None` while nothing is stored.
    /// Call [`ChunkStream::flush`] first: with chunks of unknown fate, this is the last one's.
    pub fn final_checksum(&self) -> Option<Sha256Hex> {
        self.writer.final_checksum().cloned()
    }

    /// Chunks in the chain so far.
    pub fn len(&self) -> u64 {
        self.writer.head().next_sequence()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Chunks whose fate is still unknown.
    pub fn unsettled(&self) -> usize {
        self.queue.len()
    }
}

/// Which output a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// One line of a job's output, without its newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub stream: OutputStream,
    pub line: String,
}

/// When a batch of lines becomes a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    pub max_lines: usize,
    pub max_bytes: usize,
    pub max_delay: Duration,
}

impl BatchLimits {
    pub const DEFAULT: Self = Self {
        max_lines: 50,
        max_bytes: 64 * 1024,
        max_delay: Duration::from_millis(250),
    };
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Lines waiting to become one chunk.
#[derive(Debug)]
pub struct LineBatch {
    limits: BatchLimits,
    lines: Vec<Value>,
    bytes: usize,
    first_at: Option<Instant>,
}

impl LineBatch {
    pub fn new(limits: BatchLimits) -> Self {
        Self {
            limits,
            lines: Vec::new(),
            bytes: 0,
            first_at: None,
        }
    }

    /// Adds a line; returns a full batch's payload when this line filled it.
    pub fn push(&mut self, line: LogLine, now: Instant) -> Option<Value> {
        let (text, truncated) = cut(line.line, MAX_LINE_BYTES);
        if self.bytes + text.len() > self.limits.max_bytes && !self.lines.is_empty() {
            let full = self.take();
            self.add(line.stream, text, truncated, now);
            return full;
        }
        self.add(line.stream, text, truncated, now);
        if self.lines.len() >= self.limits.max_lines || self.bytes >= self.limits.max_bytes {
            return self.take();
        }
        None
    }

    fn add(&mut self, stream: OutputStream, text: String, truncated: bool, now: Instant) {
        self.bytes += text.len();
        let mut entry = json!({ "stream": stream.as_str(), "line": text });
        if truncated {
            entry["truncated"] = Value::Bool(true);
        }
        self.lines.push(entry);
        self.first_at.get_or_insert(now);
    }

    /// When the batch must be sent even if it is not full.
    pub fn deadline(&self) -> Option<Instant> {
        self.first_at.map(|at| at + self.limits.max_delay)
    }

    /// The batch's payload, emptying it; `None` when empty.
    pub fn take(&mut self) -> Option<Value> {
        if self.lines.is_empty() {
            return None;
        }
        self.bytes = 0;
        self.first_at = None;
        Some(json!({ "lines": std::mem::take(&mut self.lines) }))
    }
}

/// `text` cut to at most `max` bytes on a character boundary, and whether it was cut.
fn cut(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// What happened to a job's output on its way to the server.
#[derive(Debug, Default)]
pub struct PumpReport {
    /// Lines in chunks the server stored, or kept to be sent again.
    pub lines_sent: u64,
    /// Lines not forwarded because the job's `outputBytes` limit was reached.
    pub lines_over_limit: u64,
    /// Lines in chunks the server refused or that could not be sent.
    pub lines_lost: u64,
    /// The first refusal, if any; after a refusal that means the claim is gone, nothing more
    /// is sent.
    pub error: Option<ClientError>,
}

/// Forwards lines from `lines` to `stream` in batches until the channel closes, then sends
/// what is left. Output beyond `output_limit` bytes is counted, not sent. Never stops reading
/// (a full pipe would block the job), even once sending has failed.
pub async fn pump_lines(
    stream: &mut ChunkStream,
    mut lines: mpsc::Receiver<LogLine>,
    limits: BatchLimits,
    output_limit: Option<u64>,
) -> PumpReport {
    let mut report = PumpReport::default();
    let mut batch = LineBatch::new(limits);
    let mut forwarded: u64 = 0;
    let mut open = true;
    while open {
        let full = match batch.deadline() {
            Some(deadline) => tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => admit(&mut batch, line, &mut forwarded, output_limit, &mut report),
                    None => { open = false; batch.take() }
                },
                () = tokio::time::sleep_until(deadline) => batch.take(),
            },
            None => match lines.recv().await {
                Some(line) => admit(&mut batch, line, &mut forwarded, output_limit, &mut report),
                None => {
                    open = false;
                    batch.take()
                }
            },
        };
        if let Some(payload) = full {
            send_batch(stream, payload, &mut report).await;
        }
    }
    report
}

fn admit(
    batch: &mut LineBatch,
    line: LogLine,
    forwarded: &mut u64,
    output_limit: Option<u64>,
    report: &mut PumpReport,
) -> Option<Value> {
    let size = line.line.len() as u64 + 1;
    if output_limit.is_some_and(|limit| *forwarded + size > limit) {
        report.lines_over_limit += 1;
        return None;
    }
    *forwarded += size;
    batch.push(line, Instant::now())
}

async fn send_batch(stream: &mut ChunkStream, payload: Value, report: &mut PumpReport) {
    let count = payload["lines"].as_array().map_or(0, Vec::len) as u64;
    if report
        .error
        .as_ref()
        .is_some_and(crate::heartbeat::is_claim_lost)
    {
        report.lines_lost += count;
        return;
    }
    match stream.send(ChunkKind::Log, payload).await {
        Ok(_) => report.lines_sent += count,
        // Kept by the stream and sent again before the next chunk or the completion.
        Err(error) if error.is_transient() => report.lines_sent += count,
        Err(error) => {
            report.lines_lost += count;
            report.error.get_or_insert(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> LogLine {
        LogLine {
            stream: OutputStream::Stdout,
            line: text.to_owned(),
        }
    }

    #[test]
    fn a_batch_closes_at_its_line_count() {
        let limits = BatchLimits {
            max_lines: 3,
            max_bytes: 1000,
            max_delay: Duration::from_millis(250),
        };
        let mut batch = LineBatch::new(limits);
        let now = Instant::now();
        assert_eq!(batch.push(line("a"), now), None);
        assert_eq!(batch.deadline(), Some(now + Duration::from_millis(250)));
        assert_eq!(batch.push(line("b"), now), None);
        let full = batch.push(line("c"), now).expect("full at three lines");
        assert_eq!(
            full,
            json!({"lines": [
                {"stream": "stdout", "line": "a"},
                {"stream": "stdout", "line": "b"},
                {"stream": "stdout", "line": "c"},
            ]})
        );
        assert_eq!(batch.deadline(), None);
        assert_eq!(batch.take(), None);
    }

    #[test]
    fn a_line_that_would_overflow_the_bytes_starts_the_next_batch() {
        let limits = BatchLimits {
            max_lines: 50,
            max_bytes: 10,
            max_delay: Duration::from_millis(250),
        };
        let mut batch = LineBatch::new(limits);
        let now = Instant::now();
        assert_eq!(batch.push(line("123456"), now), None);
        let full = batch.push(line("abcdef"), now).expect("the first batch");
        assert_eq!(full["lines"][0]["line"], "123456");
        assert_eq!(
            batch.take().expect("the second")["lines"][0]["line"],
            "abcdef"
        );
    }

    #[test]
    fn long_lines_are_cut_on_a_character_boundary() {
        let (text, cut_short) = cut("é".repeat(10), 5);
        assert!(cut_short);
        assert_eq!(text, "éé");
        let mut batch = LineBatch::new(BatchLimits::DEFAULT);
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        batch.push(line(&long), Instant::now());
        let payload = batch.take().expect("one line");
        assert_eq!(payload["lines"][0]["truncated"], true);
        assert_eq!(
            payload["lines"][0]["line"].as_str().map(str::len),
            Some(MAX_LINE_BYTES)
        );
    }
}
