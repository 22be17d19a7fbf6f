//! A claim's stream: the chunk chain kept for the caller, and log lines batched into chunks.
//!
//! [`ChunkStream::send`] makes the next chunk of the chain (sequence, `previousChecksum`,
//! hashes, `emittedAt`) and posts it. A chunk whose fate is unknown (no answer after the
//! retries) is kept and sent again, byte for byte, before anything newer: the server either
//! stored it (and says `STREAM_DUPLICATE_CHECKSUM`, which counts as stored) or did not, so the
//! chain never forks. A chunk the server refused outright was not stored, and the chain goes
//! back to where it was before it.
//!
//! Log lines are grouped: a chunk carries up to [`BatchLimits::max_lines`] lines and
//! [`BatchLimits::max_bytes`] of payload (its stable JSON, as the server counts it), and waits
//! at most [`BatchLimits::max_delay`] after its first line. A log chunk's payload is
//! `{"segments": [{"stream": "stdout"|"stderr", "text", "truncated"?: true}]}`
//! ([`crate::log_payload`]): consecutive lines of one output make one segment whose `text` is
//! each line followed by `\n`, in the order they were read across both outputs; a line longer
//! than [`MAX_LINE_BYTES`] is cut there and ends its segment, marked `"truncated": true`.
//! One string per run of lines rather than one object per line: the server's time per chunk
//! grows with the number of JSON values in it (BENCHMARKS.md §7).
//!
//! [`pump_lines`] batches and sends at the same time: while one chunk is on its way (the chain
//! is sequential, so one at a time), the next lines keep being read and batched, and whatever
//! is waiting when the send returns goes out as one chunk, up to the byte bound. A chatty job
//! therefore fills its chunks and is not held back by its own logs, until
//! [`QUEUED_BATCHES`] full batches wait; only then does its pipe fill and the job wait too,
//! which bounds the runner's memory.
//!
//! The attempt's stream has server-side limits (10,000 chunks, 64 MiB of payload). The pump
//! keeps room for the closing `exited` chunk ([`EXIT_RESERVE`]): lines that would not fit are
//! counted, not sent, so the job still ends with its exit record and completes normally. Near
//! the chunk limit, batches wait longer ([`SCARCE_DELAY`]) so that slow output does not spend
//! the last chunks one line at a time.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use edgerunner_protocol::chunk::{
    ChunkIdentity, ChunkKind, ChunkWriter, StreamChunk, MAX_CHUNKS_PER_ATTEMPT,
    MAX_STREAM_BYTES_PER_ATTEMPT,
};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::stable_json::{self, Sha256Hex};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::RunnerClient;
use crate::clock::timestamp_now;
use crate::http::ClientError;

/// The longest line kept whole, in bytes.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// The server's limit on one chunk's payload (docs/API.md, "Per-job storage limits").
pub const SERVER_MAX_CHUNK_BYTES: usize = 256 * 1024;

/// What a stream keeps free for the chunks that close it (the `exited` record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserve {
    pub chunks: u64,
    pub bytes: u64,
}

/// Room for the `exited` chunk, whose payload is a few hundred bytes (more only with a long
/// cancellation reason).
pub const EXIT_RESERVE: Reserve = Reserve {
    chunks: 1,
    bytes: 16 * 1024,
};

/// Sealed batches that may wait for the chunk on its way before the job's output is held
/// back: at most this many times [`BatchLimits::max_bytes`] of payload (16 MiB at the
/// default), held as the segments' text (about the payload's size).
pub const QUEUED_BATCHES: usize = 64;

/// Below this many chunks left in the attempt, a chunk waits up to [`SCARCE_DELAY`] for more.
pub const SCARCE_CHUNKS: u64 = 1_000;
pub const SCARCE_DELAY: Duration = Duration::from_secs(5);

/// The chain of one claim, as this runner has sent it.
pub struct ChunkStream {
    client: Arc<RunnerClient>,
    writer: ChunkWriter,
    /// Payload bytes (stable JSON) of the chain so far, as the server counts them.
    bytes: u64,
    /// Chunks made but not known to be stored, oldest first, each with the chain (and its
    /// byte count) as it was before it.
    queue: VecDeque<(StreamChunk, ChunkWriter, u64)>,
}

impl ChunkStream {
    pub fn new(client: Arc<RunnerClient>, identity: ChunkIdentity) -> Self {
        Self {
            client,
            writer: ChunkWriter::new(identity),
            bytes: 0,
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
        let before = (self.writer.clone(), self.bytes);
        let size = stable_json::stable_json(&payload).len() as u64;
        let chunk = self.writer.next(kind, payload, timestamp_now());
        let checksum = chunk.checksum.clone();
        self.bytes += size;
        self.queue.push_back((chunk, before.0, before.1));
        self.flush().await?;
        Ok(checksum)
    }

    /// Sends the chunks whose fate is unknown, again, byte for byte.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        while let Some((chunk, before, bytes_before)) = self.queue.front() {
            match self.client.stream(chunk).await {
                Ok(_) => {
                    self.queue.pop_front();
                }
                Err(error) if error.is_transient() => return Err(error),
                Err(error) => {
                    self.writer = before.clone();
                    self.bytes = *bytes_before;
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

    /// Payload bytes in the chain so far (stable JSON, as the server counts them).
    pub fn payload_bytes(&self) -> u64 {
        self.bytes
    }

    /// Chunks the attempt may still hold.
    pub fn chunks_left(&self) -> u64 {
        MAX_CHUNKS_PER_ATTEMPT.saturating_sub(self.len())
    }

    /// Whether a chunk of `payload_bytes` fits within the attempt's limits with `reserve` left.
    pub fn has_room(&self, payload_bytes: usize, reserve: Reserve) -> bool {
        self.chunks_left() > reserve.chunks
            && self.bytes + payload_bytes as u64 + reserve.bytes <= MAX_STREAM_BYTES_PER_ATTEMPT
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
    /// Payload bytes (stable JSON) per chunk; one line alone may exceed it (a line is cut at
    /// [`MAX_LINE_BYTES`], so its entry stays far below [`SERVER_MAX_CHUNK_BYTES`]).
    pub max_bytes: usize,
    pub max_delay: Duration,
}

impl BatchLimits {
    /// Chunks as large as the server takes: its time per chunk is mostly the same whatever
    /// the chunk holds (BENCHMARKS.md §7), so fewer, fuller chunks upload a chatty job faster.
    /// The line count is no real bound here (256 KiB holds at most 131,072 lines, empty ones).
    pub const DEFAULT: Self = Self {
        max_lines: 100_000,
        max_bytes: Self::MAX_BYTES,
        max_delay: Duration::from_millis(250),
    };

    /// The largest `max_bytes` allowed: the server's limit. A batch is larger than
    /// `max_bytes` only when one line alone is, and one line is at most [`MAX_LINE_BYTES`] of
    /// text, six times that once every byte is escaped: under 100 KiB of payload, so a batch
    /// never passes [`SERVER_MAX_CHUNK_BYTES`].
    pub const MAX_BYTES: usize = SERVER_MAX_CHUNK_BYTES;
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// `{"segments":[]}`: a log payload's bytes besides its segments and their commas.
const FRAME_BYTES: usize = r#"{"segments":[]}"#.len();

/// `,"truncated":true`: what marks a segment whose last line was cut.
const TRUNCATED_BYTES: usize = r#","truncated":true"#.len();

/// One run of consecutive lines from the same output, as a log payload holds it:
/// `{"stream", "text"}` where `text` is each line followed by `\n`, and `"truncated": true`
/// when the segment's last line was cut at [`MAX_LINE_BYTES`] (a cut line always ends its
/// segment, so the mark names exactly one line).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    stream: OutputStream,
    text: String,
    truncated: bool,
}

impl Segment {
    /// The bytes of an empty segment's stable JSON, `{"stream":"…","text":""}`, keys sorted
    /// as stable JSON sorts them.
    fn frame_bytes(stream: OutputStream) -> usize {
        r#"{"stream":"","text":""}"#.len() + stream.as_str().len()
    }

    /// Whether a line of `stream` continues this segment rather than starting the next.
    fn continues(&self, stream: OutputStream) -> bool {
        self.stream == stream && !self.truncated
    }

    fn to_json(&self) -> Value {
        let mut segment = json!({ "stream": self.stream.as_str(), "text": self.text });
        if self.truncated {
            segment["truncated"] = Value::Bool(true);
        }
        segment
    }
}

/// The length of `text`'s escapes in a stable JSON string, quotes excluded: the escapes of
/// `edgerunner_protocol::stable_json` take two bytes for a quote, a backslash, `\n`, `\r`,
/// `\t`, `\b` and `\f`, six for other control characters; every other byte is one.
fn stable_text_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| match byte {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

/// Lines on their way to becoming one chunk's payload, with the payload's size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    segments: Vec<Segment>,
    lines: usize,
    /// The stable JSON size of [`Batch::payload`].
    bytes: usize,
}

impl Batch {
    /// Lines in the batch.
    pub fn len(&self) -> usize {
        self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// The stable JSON size of the payload this batch makes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The payload's size once a line of `stream`, whose text takes `text_bytes` escaped
    /// (its `\n` not counted), is added.
    fn size_with(&self, stream: OutputStream, text_bytes: usize, truncated: bool) -> usize {
        // The line's text and its `\n` (two bytes escaped), and the mark when cut.
        let line = text_bytes + 2 + if truncated { TRUNCATED_BYTES } else { 0 };
        match self.segments.last() {
            None => FRAME_BYTES + Segment::frame_bytes(stream) + line,
            Some(last) if last.continues(stream) => self.bytes + line,
            Some(_) => self.bytes + 1 + Segment::frame_bytes(stream) + line,
        }
    }

    /// Adds a line whose text takes `text_bytes` escaped ([`stable_text_len`]).
    fn push(&mut self, stream: OutputStream, text: &str, text_bytes: usize, truncated: bool) {
        self.bytes = self.size_with(stream, text_bytes, truncated);
        match self.segments.last_mut() {
            Some(last) if last.continues(stream) => {}
            _ => self.segments.push(Segment {
                stream,
                text: String::new(),
                truncated: false,
            }),
        }
        if let Some(last) = self.segments.last_mut() {
            last.text.push_str(text);
            last.text.push('\n');
            last.truncated = truncated;
        }
        self.lines += 1;
    }

    /// The payload's size once `other` is appended (its first segment joins this batch's
    /// last one when they continue each other).
    fn size_with_batch(&self, other: &Batch) -> usize {
        match (self.segments.last(), other.segments.first()) {
            (None, _) => other.bytes,
            (_, None) => self.bytes,
            (Some(last), Some(first)) if last.continues(first.stream) => {
                self.bytes + other.bytes - FRAME_BYTES - Segment::frame_bytes(first.stream)
            }
            (Some(_), Some(_)) => self.bytes + 1 + other.bytes - FRAME_BYTES,
        }
    }

    fn append(&mut self, other: Batch) {
        self.bytes = self.size_with_batch(&other);
        self.lines += other.lines;
        let mut rest = other.segments.into_iter();
        if let (Some(last), Some(first)) = (self.segments.last_mut(), rest.as_slice().first()) {
            if last.continues(first.stream) {
                last.text.push_str(&first.text);
                last.truncated = first.truncated;
                rest.next();
            }
        }
        self.segments.extend(rest);
    }

    /// `{"segments": [{"stream", "text", "truncated"?}]}`.
    pub fn payload(self) -> Value {
        let segments: Vec<Value> = self.segments.iter().map(Segment::to_json).collect();
        json!({ "segments": segments })
    }
}

/// Lines waiting to become one chunk.
#[derive(Debug)]
pub struct LineBatch {
    limits: BatchLimits,
    batch: Batch,
    first_at: Option<Instant>,
}

impl LineBatch {
    pub fn new(limits: BatchLimits) -> Self {
        Self {
            limits,
            batch: Batch::default(),
            first_at: None,
        }
    }

    /// Adds a line; returns a full batch when this line filled it (or would have overfilled
    /// it: then the line starts the next batch).
    pub fn push(&mut self, line: LogLine, now: Instant) -> Option<Batch> {
        let (text, truncated) = cut(line.line, MAX_LINE_BYTES);
        let text_bytes = stable_text_len(&text);
        let size = self.batch.size_with(line.stream, text_bytes, truncated);
        let overflow = !self.batch.is_empty() && size > self.limits.max_bytes;
        let full = if overflow { self.take() } else { None };
        self.batch.push(line.stream, &text, text_bytes, truncated);
        self.first_at.get_or_insert(now);
        if full.is_some() {
            return full;
        }
        if self.batch.len() >= self.limits.max_lines || self.batch.bytes >= self.limits.max_bytes {
            return self.take();
        }
        None
    }

    /// When the batch must be sent even if it is not full.
    pub fn deadline(&self) -> Option<Instant> {
        self.first_at.map(|at| at + self.limits.max_delay)
    }

    /// The batch, emptying it; `None` when empty.
    pub fn take(&mut self) -> Option<Batch> {
        if self.batch.is_empty() {
            return None;
        }
        self.first_at = None;
        Some(std::mem::take(&mut self.batch))
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
    /// Lines not sent because the attempt's stream was full (its chunk or byte limit, less
    /// the room kept for the `exited` chunk).
    pub lines_over_stream_limit: u64,
    /// Lines in chunks the server refused or that could not be sent.
    pub lines_lost: u64,
    /// Log chunks sent (stored, or kept to be sent again).
    pub chunks: u64,
    /// Their payload bytes (stable JSON).
    pub payload_bytes: u64,
    /// The first refusal, if any; after a refusal that means the claim is gone, nothing more
    /// is sent.
    pub error: Option<ClientError>,
}

/// Forwards lines from `lines` to `stream` in batches until the channel closes, then sends
/// what is left. Output beyond `output_limit` bytes is counted, not sent. Never stops reading
/// while batches can wait (a full pipe would block the job), even once sending has failed.
pub async fn pump_lines(
    stream: &mut ChunkStream,
    lines: mpsc::Receiver<LogLine>,
    limits: BatchLimits,
    output_limit: Option<u64>,
) -> PumpReport {
    let (sealed, queued) = mpsc::channel(QUEUED_BATCHES);
    let (over_limit, mut report) = tokio::join!(
        batch_lines(lines, limits, output_limit, sealed),
        send_batches(stream, queued, limits),
    );
    report.lines_over_limit = over_limit;
    report
}

/// Seals batches from `lines` into `sealed`; returns the lines over `output_limit`.
async fn batch_lines(
    mut lines: mpsc::Receiver<LogLine>,
    limits: BatchLimits,
    output_limit: Option<u64>,
    sealed: mpsc::Sender<Batch>,
) -> u64 {
    let mut batch = LineBatch::new(limits);
    let mut forwarded: u64 = 0;
    let mut over_limit: u64 = 0;
    let mut open = true;
    while open {
        let full = match batch.deadline() {
            Some(deadline) => tokio::select! {
                line = lines.recv() => match line {
                    Some(line) => admit(&mut batch, line, &mut forwarded, output_limit, &mut over_limit),
                    None => { open = false; batch.take() }
                },
                () = tokio::time::sleep_until(deadline) => batch.take(),
            },
            None => match lines.recv().await {
                Some(line) => admit(
                    &mut batch,
                    line,
                    &mut forwarded,
                    output_limit,
                    &mut over_limit,
                ),
                None => {
                    open = false;
                    batch.take()
                }
            },
        };
        if let Some(full) = full {
            // The sender ends only with this function, which holds `sealed`: it cannot be gone.
            let _ = sealed.send(full).await;
        }
    }
    over_limit
}

fn admit(
    batch: &mut LineBatch,
    line: LogLine,
    forwarded: &mut u64,
    output_limit: Option<u64>,
    over_limit: &mut u64,
) -> Option<Batch> {
    let size = line.line.len() as u64 + 1;
    if output_limit.is_some_and(|limit| *forwarded + size > limit) {
        *over_limit += 1;
        return None;
    }
    *forwarded += size;
    batch.push(line, Instant::now())
}

/// Sends the sealed batches in order, one chunk at a time; the batches that queued while a
/// chunk was on its way go out together, within `limits`' lines and bytes.
async fn send_batches(
    stream: &mut ChunkStream,
    mut queued: mpsc::Receiver<Batch>,
    limits: BatchLimits,
) -> PumpReport {
    let mut report = PumpReport::default();
    let mut carried: Option<Batch> = None;
    let mut full = false;
    loop {
        let mut batch = match carried.take() {
            Some(batch) => batch,
            None => match queued.recv().await {
                Some(batch) => batch,
                None => break,
            },
        };
        let gather_until =
            (stream.chunks_left() <= SCARCE_CHUNKS).then(|| Instant::now() + SCARCE_DELAY);
        loop {
            let next = match gather_until {
                None => queued.try_recv().ok(),
                Some(until) => tokio::time::timeout_at(until, queued.recv())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some(next) = next else { break };
            if batch.size_with_batch(&next) > limits.max_bytes
                || batch.len() + next.len() > limits.max_lines
            {
                carried = Some(next);
                break;
            }
            batch.append(next);
        }
        let lines = batch.len() as u64;
        if full || !stream.has_room(batch.bytes(), EXIT_RESERVE) {
            full = true;
            report.lines_over_stream_limit += lines;
            continue;
        }
        if report
            .error
            .as_ref()
            .is_some_and(crate::heartbeat::is_claim_lost)
        {
            report.lines_lost += lines;
            continue;
        }
        let bytes = batch.bytes() as u64;
        match stream.send(ChunkKind::Log, batch.payload()).await {
            Ok(_) => {}
            // Kept by the stream and sent again before the next chunk or the completion.
            Err(error) if error.is_transient() => {}
            Err(error) => {
                if is_stream_full(&error) {
                    full = true;
                    report.lines_over_stream_limit += lines;
                } else {
                    report.lines_lost += lines;
                }
                report.error.get_or_insert(error);
                continue;
            }
        }
        report.lines_sent += lines;
        report.chunks += 1;
        report.payload_bytes += bytes;
    }
    report
}

/// Whether the server refused a chunk because the attempt's stream holds all it may.
fn is_stream_full(error: &ClientError) -> bool {
    matches!(
        error.code(),
        Some(ErrorCode::StreamChunkLimit | ErrorCode::StreamBytesLimit)
    )
}

#[cfg(test)]
mod tests {
    use edgerunner_protocol::envelope::{ClaimId, DispatchAttempt, JobId, RunnerId};

    use super::*;
    use crate::http::Http;
    use crate::session::{BootstrapToken, Credentials};

    /// A stream whose client is never called.
    fn offline_stream() -> ChunkStream {
        let client = RunnerClient::new(
            Http::new("http://127.0.0.1:9").expect("url"),
            Credentials::Bootstrap {
                runner_id: RunnerId::parse("run_offline").expect("id"),
                token: BootstrapToken::new("erb_offline").expect("token"),
            },
        );
        ChunkStream::new(
            Arc::new(client),
            ChunkIdentity {
                job_id: JobId::parse("job_offline").expect("id"),
                claim_id: ClaimId::parse("clm_offline").expect("id"),
                dispatch_attempt: DispatchAttempt::FIRST,
            },
        )
    }

    #[test]
    fn room_is_kept_for_the_exit_chunk_at_both_stream_limits() {
        let mut stream = offline_stream();
        assert!(stream.has_room(64 * 1024, EXIT_RESERVE));
        let limit = MAX_STREAM_BYTES_PER_ATTEMPT;
        stream.bytes = limit - EXIT_RESERVE.bytes - 1000;
        assert!(
            stream.has_room(1000, EXIT_RESERVE),
            "exactly up to the reserve"
        );
        assert!(!stream.has_room(1001, EXIT_RESERVE));
        assert!(stream.has_room(
            1001,
            Reserve {
                chunks: 1,
                bytes: 0
            }
        ));

        stream.bytes = 0;
        for _ in 0..MAX_CHUNKS_PER_ATTEMPT - 2 {
            stream
                .writer
                .next(ChunkKind::Log, json!({}), timestamp_now());
        }
        assert_eq!(stream.chunks_left(), 2);
        assert!(
            stream.has_room(10, EXIT_RESERVE),
            "one for the log, one for the exit"
        );
        stream
            .writer
            .next(ChunkKind::Log, json!({}), timestamp_now());
        assert!(
            !stream.has_room(10, EXIT_RESERVE),
            "the last one is the exit's"
        );
    }

    fn line(text: &str) -> LogLine {
        LogLine {
            stream: OutputStream::Stdout,
            line: text.to_owned(),
        }
    }

    fn err(text: &str) -> LogLine {
        LogLine {
            stream: OutputStream::Stderr,
            line: text.to_owned(),
        }
    }

    fn limits(max_lines: usize, max_bytes: usize) -> BatchLimits {
        BatchLimits {
            max_lines,
            max_bytes,
            max_delay: Duration::from_millis(250),
        }
    }

    /// The payload's stable JSON size, as the server counts it.
    fn server_bytes(payload: &Value) -> usize {
        stable_json::stable_json(payload).len()
    }

    #[test]
    fn a_batch_closes_at_its_line_count() {
        let mut batch = LineBatch::new(limits(3, 1000));
        let now = Instant::now();
        assert_eq!(batch.push(line("a"), now), None);
        assert_eq!(batch.deadline(), Some(now + Duration::from_millis(250)));
        assert_eq!(batch.push(line("b"), now), None);
        let full = batch.push(line("c"), now).expect("full at three lines");
        assert_eq!(full.len(), 3);
        assert_eq!(
            full.payload(),
            json!({"segments": [{"stream": "stdout", "text": "a\nb\nc\n"}]})
        );
        assert_eq!(batch.deadline(), None);
        assert_eq!(batch.take(), None);
    }

    #[test]
    fn lines_keep_their_order_across_stdout_and_stderr() {
        let mut batch = LineBatch::new(limits(100, 1000));
        let now = Instant::now();
        for next in [line("1"), line("2"), err("3"), err(""), line("5"), err("6")] {
            assert_eq!(batch.push(next, now), None);
        }
        let payload = batch.take().expect("six lines").payload();
        assert_eq!(
            payload,
            json!({"segments": [
                {"stream": "stdout", "text": "1\n2\n"},
                {"stream": "stderr", "text": "3\n\n"},
                {"stream": "stdout", "text": "5\n"},
                {"stream": "stderr", "text": "6\n"},
            ]})
        );
        let read: Vec<(String, String)> = crate::log_payload::log_lines(&payload)
            .expect("lines")
            .into_iter()
            .map(|l| (l.stream, l.line))
            .collect();
        let expected = [
            ("stdout", "1"),
            ("stdout", "2"),
            ("stderr", "3"),
            ("stderr", ""),
            ("stdout", "5"),
            ("stderr", "6"),
        ]
        .map(|(s, l)| (s.to_owned(), l.to_owned()));
        assert_eq!(read, expected);
    }

    #[test]
    fn a_batch_knows_its_payload_size_as_the_server_counts_it() {
        let texts = [
            (OutputStream::Stdout, ""),
            (OutputStream::Stdout, "plain"),
            (OutputStream::Stderr, "quote \" and backslash \\"),
            (OutputStream::Stderr, "tab\tbell\u{7}nul\u{0}"),
            (OutputStream::Stdout, "été ✨ 😀"),
            (OutputStream::Stdout, "\u{1f}\u{1f}\u{1f}"),
            (OutputStream::Stderr, "\u{8}\u{c}\r/\u{7f}\u{2028}"),
        ];
        let long = "\"".repeat(MAX_LINE_BYTES + 1);
        // Every line, a cut one among them, each time; after each push the count is exact.
        let mut whole = LineBatch::new(limits(1000, 1 << 20));
        let mut pieces = Vec::new();
        for round in 0..3 {
            for (n, (stream, text)) in texts.iter().enumerate() {
                let text = if round == 1 && n == 3 { &long } else { *text };
                let next = LogLine {
                    stream: *stream,
                    line: text.to_owned(),
                };
                assert_eq!(whole.push(next.clone(), Instant::now()), None);
                let so_far = whole.batch.clone();
                assert_eq!(so_far.bytes(), server_bytes(&so_far.payload()), "{text:?}");
                let mut one = LineBatch::new(limits(1000, 1 << 20));
                one.push(next, Instant::now());
                pieces.push(one.take().expect("one line"));
            }
        }
        let whole = whole.take().expect("all lines");
        let payload = whole.clone().payload();
        assert_eq!(whole.bytes(), server_bytes(&payload));
        assert!(
            payload["segments"]
                .as_array()
                .expect("segments")
                .iter()
                .any(|s| s["truncated"] == true),
            "{payload}"
        );
        // Batches of one line appended, and batches of batches, make the same payload and
        // count it exactly at every step.
        let mut appended = Batch::default();
        let mut pairs = Vec::new();
        for pair in pieces.chunks(2) {
            let mut both = Batch::default();
            for piece in pair {
                both.append(piece.clone());
                assert_eq!(both.bytes(), server_bytes(&both.clone().payload()));
            }
            pairs.push(both);
        }
        for piece in pieces {
            appended.append(piece);
            assert_eq!(appended.bytes(), server_bytes(&appended.clone().payload()));
        }
        assert_eq!(appended, whole);
        let mut merged = Batch::default();
        for pair in pairs {
            merged.append(pair);
            assert_eq!(merged.bytes(), server_bytes(&merged.clone().payload()));
        }
        assert_eq!(merged, whole);
    }

    #[test]
    fn a_line_that_would_overflow_the_bytes_starts_the_next_batch() {
        // `{"segments":[{"stream":"stdout","text":"123456\n"}]}` is 52 bytes; a second line
        // of the same stream adds 8.
        let mut batch = LineBatch::new(limits(50, 59));
        let now = Instant::now();
        assert_eq!(batch.push(line("123456"), now), None);
        let full = batch.push(line("abcdef"), now).expect("the first batch");
        assert_eq!(full.bytes(), 52);
        assert_eq!(full.payload()["segments"][0]["text"], "123456\n");
        let second = batch.take().expect("the second");
        assert_eq!(second.payload()["segments"][0]["text"], "abcdef\n");
        // Exactly at the bound: the line joins, and the batch closes with it.
        let mut batch = LineBatch::new(limits(50, 60));
        assert_eq!(batch.push(line("123456"), now), None);
        let full = batch.push(line("abcdef"), now).expect("full at the bound");
        assert_eq!(full.bytes(), 60);
        assert_eq!(server_bytes(&full.payload()), 60);
    }

    #[test]
    fn a_cut_line_is_marked_and_ends_its_segment() {
        let (text, cut_short) = cut("é".repeat(10), 5);
        assert!(cut_short);
        assert_eq!(text, "éé");
        let mut batch = LineBatch::new(BatchLimits::DEFAULT);
        let now = Instant::now();
        batch.push(line("before"), now);
        batch.push(line(&"x".repeat(MAX_LINE_BYTES + 10)), now);
        batch.push(line("after"), now);
        let payload = batch.take().expect("three lines").payload();
        let segments = payload["segments"].as_array().expect("segments");
        assert_eq!(segments.len(), 2, "{payload}");
        assert_eq!(segments[0]["truncated"], true);
        let first = segments[0]["text"].as_str().expect("text");
        assert_eq!(first.len(), "before\n".len() + MAX_LINE_BYTES + 1);
        assert_eq!(segments[1], json!({"stream": "stdout", "text": "after\n"}));
        let read = crate::log_payload::log_lines(&payload).expect("lines");
        let marks: Vec<bool> = read.iter().map(|l| l.truncated).collect();
        assert_eq!(marks, [false, true, false]);
        assert_eq!(read[1].line.len(), MAX_LINE_BYTES);
    }

    #[test]
    fn no_chunk_exceeds_the_bound_and_a_lone_worst_line_fits_the_server() {
        // Lines of every size and escape density, both streams, against the largest bound:
        // every batch is within it unless one line alone is over, and that one is under the
        // server's limit.
        let mut batch = LineBatch::new(limits(usize::MAX, BatchLimits::MAX_BYTES));
        let now = Instant::now();
        let mut sealed = Vec::new();
        let mut sent_lines = 0;
        for n in 0..4_000usize {
            let text = match n % 5 {
                0 => "\u{1}".repeat(MAX_LINE_BYTES * 2),
                1 => "y".repeat(n * 7 % 20_000),
                2 => "\"\\\n".repeat(n % 300),
                3 => String::new(),
                _ => n.to_string(),
            };
            let next = if n % 3 == 0 { err(&text) } else { line(&text) };
            sent_lines += 1;
            sealed.extend(batch.push(next, now));
        }
        sealed.extend(batch.take());
        assert!(sealed.len() > 10);
        let mut lines = 0;
        for full in sealed {
            lines += full.len();
            let size = server_bytes(&full.clone().payload());
            assert_eq!(full.bytes(), size);
            assert!(size < SERVER_MAX_CHUNK_BYTES, "{size}");
            if size > BatchLimits::MAX_BYTES {
                assert_eq!(full.len(), 1, "only a lone line may be over the bound");
            }
        }
        assert_eq!(lines, sent_lines);
        let alone = LineBatch::new(limits(10, 1024))
            .push(err(&"\u{1}".repeat(MAX_LINE_BYTES * 2)), now)
            .expect("the worst line closes its batch at once");
        assert!(alone.bytes() > 6 * MAX_LINE_BYTES);
        assert!(alone.bytes() < SERVER_MAX_CHUNK_BYTES);
    }
}
