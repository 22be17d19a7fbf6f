//! `edgerunner admin jobs logs JOB [--follow] [--attempt N]`: a job's stream as output.
//!
//! The stream is read page by page from `GET …/jobs/{id}/stream?after=` with the cursor each
//! page returns, so nothing is read twice. Every page also carries the job's state as of the
//! same read; a terminal state with no further page means the whole stream has been printed
//! (a completion closes its stream). Following is therefore one small request per interval,
//! which carries both the new chunks and the state.
//!
//! Rendering is a pure function of a chunk ([`render_chunk`]): the job's stdout lines go to
//! stdout, its stderr lines to stderr, trajectory events to stdout, and the runner's own events
//! (`started`, `exited`, …) to stderr marked with their attempt. `--json` prints one object per
//! line or chunk, all on stdout, in stream order. Written to a terminal, control characters
//! and bidirectional overrides in what the job wrote are shown escaped ([`super::terminal`]);
//! `--raw`, a pipe or a file get the text as the job sent it.

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use edgerunner_protocol::state::JobState;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::CliError;
use crate::admin::AdminClient;
use crate::log_payload::{log_lines, PayloadLine};

/// Exit status of `logs` when the job has not finished (without `--follow`, or when
/// `--timeout` ran out first).
pub const NOT_FINISHED: u8 = 3;

/// Chunks asked for per page (the server also stops a page at 1 MiB of payload).
const PAGE_CHUNKS: u32 = 500;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the job succeeded; 1 when it failed or was cancelled \
(or the stream could not be read); 3 when it has not finished yet (without --follow, or when \
--timeout ran out)."
)]
pub struct LogsArgs {
    /// The job id (job_…); with --json, one object per log line or chunk
    pub id: String,
    /// Keep reading until the job finishes, then print the rest and exit by its outcome
    #[arg(long, short)]
    pub follow: bool,
    /// Only this attempt's stream (1-8, hand-backs included) [default: every attempt, in order]
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub attempt: Option<u8>,
    /// Seconds between reads while following
    #[arg(long, default_value = "1", value_parser = seconds)]
    pub interval: Duration,
    /// Stop following after this many seconds (exit 3 if the job has not finished) [default: no limit]
    #[arg(long, value_parser = seconds)]
    pub timeout: Option<Duration>,
    /// Write the job's text as it sent it, escape sequences included, even to a terminal
    /// [default: control characters are shown escaped on a terminal, as sent elsewhere]
    #[arg(long)]
    pub raw: bool,
}

/// How each output stream shows what the job wrote: escaped (a terminal, without `--raw`) or
/// as sent.
#[derive(Debug, Clone, Copy)]
struct Shown {
    stdout: bool,
    stderr: bool,
    json: bool,
}

impl Shown {
    fn of(args: &LogsArgs, json: bool) -> Self {
        Shown {
            stdout: !args.raw && io::stdout().is_terminal(),
            stderr: !args.raw && io::stderr().is_terminal(),
            json,
        }
    }
}

/// A positive number of seconds, at most a day.
fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.05 && *s <= 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a number of seconds from 0.05 to 86400"))
}

/// Where one rendered line goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Stdout(String),
    Stderr(String),
}

/// The lines one stored chunk prints. `json`: one object per log line (or per chunk for
/// events, trajectory and unknown payloads), on stdout. A log payload's lines are read in
/// either shape ([`crate::log_payload`]), and print the same way whichever it is.
pub fn render_chunk(chunk: &Value, json: bool) -> Vec<Line> {
    let attempt = chunk["dispatchAttempt"].clone();
    let sequence = chunk["sequence"].clone();
    let kind = chunk["kind"].as_str().unwrap_or("");
    let payload = &chunk["payload"];
    let object = |mut fields: Value| {
        let head = json!({
            "attempt": attempt,
            "sequence": sequence,
            "kind": kind,
            "emittedAt": chunk["emittedAt"],
        });
        if let (Value::Object(head), Value::Object(rest)) = (head, &mut fields) {
            let mut all = head;
            all.append(rest);
            return Line::Stdout(Value::Object(all).to_string());
        }
        Line::Stdout(fields.to_string())
    };
    let mark = format!("[attempt {}]", text_of(&attempt));
    if kind == "log" {
        if let Some(lines) = log_lines(payload) {
            return lines
                .into_iter()
                .map(|entry| {
                    let PayloadLine {
                        stream,
                        line,
                        truncated,
                    } = entry;
                    if json {
                        let mut fields = json!({ "stream": stream, "line": line });
                        if truncated {
                            fields["truncated"] = Value::Bool(true);
                        }
                        return object(fields);
                    }
                    let line = if truncated {
                        format!("{line} [truncated]")
                    } else {
                        line
                    };
                    if stream == "stderr" {
                        Line::Stderr(line)
                    } else {
                        Line::Stdout(line)
                    }
                })
                .collect();
        }
        if let Some(event) = payload["event"].as_str() {
            if json {
                return vec![object(json!({ "event": event, "payload": payload }))];
            }
            return vec![Line::Stderr(format!("{mark} {}", event_summary(payload)))];
        }
        if let Some(message) = payload["message"].as_str() {
            if json {
                return vec![object(json!({ "stream": "message", "line": message }))];
            }
            return vec![Line::Stdout(message.to_owned())];
        }
    }
    if json {
        return vec![object(json!({ "payload": payload }))];
    }
    if kind == "trajectory" {
        return vec![Line::Stdout(format!("[trajectory] {payload}"))];
    }
    vec![Line::Stdout(format!("[{kind}] {payload}"))]
}

/// `started: ./run.sh`, `exited: exitCode=0 · 12 ms`, or `name: key=value · …`.
fn event_summary(payload: &Value) -> String {
    let name = payload["event"].as_str().unwrap_or("event");
    let Some(fields) = payload.as_object() else {
        return name.to_owned();
    };
    let mut parts = Vec::new();
    match name {
        "started" => {
            if let Some(command) = payload["command"].as_str() {
                parts.push(command.to_owned());
            }
        }
        "exited" => {
            for key in ["exitCode", "signal", "ending", "killed"] {
                let value = &payload[key];
                let shown = match value {
                    Value::Null | Value::Bool(false) => continue,
                    Value::String(text) if key == "ending" && text == "exited" => continue,
                    other => text_of(other),
                };
                parts.push(format!("{key}={shown}"));
            }
            if let Some(ms) = payload["durationMs"].as_u64() {
                parts.push(format!("{ms} ms"));
            }
            if let Some(reason) = payload["cancelReason"].as_str() {
                parts.push(format!("cancel reason: {reason}"));
            }
        }
        _ => {
            for (key, value) in fields {
                if key != "event" && !value.is_null() {
                    parts.push(format!("{key}={}", text_of(value)));
                }
            }
        }
    }
    if parts.is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {}", parts.join(" · "))
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// How `logs` exits for a job in `state`: by its outcome when it has one.
pub fn exit_status(state: JobState) -> u8 {
    match state {
        JobState::Succeeded => 0,
        state if state.is_terminal() => 1,
        _ => NOT_FINISHED,
    }
}

/// Prints the job's stream from the start (following it with `--follow`) and exits by the
/// job's state.
pub async fn run(admin: &AdminClient, args: &LogsArgs, json: bool) -> Result<ExitCode, CliError> {
    let deadline = args.timeout.map(|timeout| Instant::now() + timeout);
    let shown = Shown::of(args, json);
    let mut cursor = "0.-1".to_owned();
    let mut last_attempt: Option<Value> = None;
    loop {
        let page = admin
            .stream_page(&args.id, &cursor, args.attempt, PAGE_CHUNKS)
            .await?;
        let chunks = page["chunks"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for chunk in chunks {
            let attempt = &chunk["dispatchAttempt"];
            let first_of_attempt = last_attempt.as_ref().is_some_and(|last| last != attempt)
                && !json
                && chunk["payload"]["event"].as_str() != Some("started");
            if first_of_attempt {
                print(
                    shown,
                    &[Line::Stderr(format!("[attempt {}]", text_of(attempt)))],
                )?;
            }
            last_attempt = Some(attempt.clone());
            print(shown, &render_chunk(chunk, json))?;
        }
        cursor = match page["cursor"].as_str() {
            Some(next) => next.to_owned(),
            None => return Err(malformed("a cursor")),
        };
        let state = page["state"]
            .as_str()
            .and_then(|state| JobState::parse(state).ok())
            .ok_or_else(|| malformed("the job's state"))?;
        // A page that says more follows always holds a chunk, so the cursor moved on; read
        // the next at once. (An empty one would not move it: wait as for new chunks.)
        if page["more"].as_bool() == Some(true) && !chunks.is_empty() {
            continue;
        }
        if state.is_terminal() || !args.follow {
            if !json && state.is_terminal() {
                print(
                    shown,
                    &[Line::Stderr(format!(
                        "[job {}] {}",
                        args.id,
                        state.as_str()
                    ))],
                )?;
            }
            return Ok(ExitCode::from(exit_status(state)));
        }
        if deadline.is_some_and(|deadline| Instant::now() + args.interval > deadline) {
            eprintln!(
                "edgerunner admin: job {} is still {} after --timeout; stopped following",
                args.id,
                state.as_str()
            );
            return Ok(ExitCode::from(NOT_FINISHED));
        }
        tokio::time::sleep(args.interval).await;
    }
}

fn malformed(what: &str) -> CliError {
    CliError::Failed(format!(
        "the stream page names no {what}; is the server older than this edgerunner?"
    ))
}

fn print(shown: Shown, lines: &[Line]) -> Result<(), CliError> {
    let output = |error: io::Error| CliError::Output(error.to_string());
    let mut stdout = io::stdout().lock();
    let mut stderr = io::stderr().lock();
    for line in lines {
        match line {
            Line::Stdout(text) => match shown.stdout {
                true => writeln!(stdout, "{}", super::terminal::shown(text, shown.json)),
                false => writeln!(stdout, "{text}"),
            }
            .map_err(output)?,
            Line::Stderr(text) => {
                // What went to stdout first must show first on a terminal that merges them.
                stdout.flush().map_err(output)?;
                match shown.stderr {
                    true => writeln!(stderr, "{}", super::terminal::shown(text, shown.json)),
                    false => writeln!(stderr, "{text}"),
                }
                .map_err(output)?;
            }
        }
    }
    stdout.flush().map_err(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(sequence: u64, kind: &str, payload: Value) -> Value {
        json!({
            "dispatchAttempt": 1, "sequence": sequence, "kind": kind, "payload": payload,
            "emittedAt": "2026-01-01T00:00:00Z",
        })
    }

    #[test]
    fn log_lines_go_to_their_own_stream_in_order() {
        let lines = json!({"lines": [
            {"stream": "stdout", "line": "one"},
            {"stream": "stderr", "line": "two"},
            {"stream": "stdout", "line": "three", "truncated": true},
        ]});
        assert_eq!(
            render_chunk(&chunk(1, "log", lines), false),
            vec![
                Line::Stdout("one".into()),
                Line::Stderr("two".into()),
                Line::Stdout("three [truncated]".into()),
            ]
        );
    }

    #[test]
    fn segments_print_line_by_line_like_the_one_object_per_line_shape() {
        let segments = json!({"segments": [
            {"stream": "stdout", "text": "one\n"},
            {"stream": "stderr", "text": "two\n"},
            {"stream": "stdout", "text": "three\n", "truncated": true},
        ]});
        let lines = json!({"lines": [
            {"stream": "stdout", "line": "one"},
            {"stream": "stderr", "line": "two"},
            {"stream": "stdout", "line": "three", "truncated": true},
        ]});
        for json in [false, true] {
            assert_eq!(
                render_chunk(&chunk(1, "log", segments.clone()), json),
                render_chunk(&chunk(1, "log", lines.clone()), json),
                "json: {json}"
            );
        }
        let many = json!({"segments": [
            {"stream": "stderr", "text": "a\n\nb\n"},
            {"stream": "stdout", "text": "c\n"},
        ]});
        assert_eq!(
            render_chunk(&chunk(2, "log", many.clone()), false),
            vec![
                Line::Stderr("a".into()),
                Line::Stderr("".into()),
                Line::Stderr("b".into()),
                Line::Stdout("c".into()),
            ]
        );
        let objects: Vec<Value> = render_chunk(&chunk(2, "log", many), true)
            .iter()
            .map(|line| match line {
                Line::Stdout(text) => serde_json::from_str(text).expect("one JSON object"),
                Line::Stderr(text) => panic!("JSON went to stderr: {text}"),
            })
            .collect();
        assert_eq!(objects.len(), 4);
        assert_eq!(
            objects[3],
            json!({"attempt": 1, "sequence": 2, "kind": "log", "emittedAt": "2026-01-01T00:00:00Z",
                   "stream": "stdout", "line": "c"})
        );
    }

    #[test]
    fn runner_events_are_marked_on_stderr_and_trajectory_on_stdout() {
        let started = json!({"event": "started", "command": "./run.sh", "wallSeconds": 60});
        assert_eq!(
            render_chunk(&chunk(0, "log", started), false),
            vec![Line::Stderr("[attempt 1] started: ./run.sh".into())]
        );
        let exited = json!({"event": "exited", "ending": "exited", "exitCode": 2, "signal": null,
                            "killed": false, "durationMs": 12});
        assert_eq!(
            render_chunk(&chunk(3, "log", exited), false),
            vec![Line::Stderr(
                "[attempt 1] exited: exitCode=2 · 12 ms".into()
            )]
        );
        let step: Value = serde_json::from_str(r#"{"step": 1, "score": 1.50}"#).expect("JSON");
        assert_eq!(
            render_chunk(&chunk(2, "trajectory", step), false),
            vec![Line::Stdout(
                r#"[trajectory] {"score":1.50,"step":1}"#.into()
            )]
        );
        assert_eq!(
            render_chunk(&chunk(4, "log", json!({"message": "hi"})), false),
            vec![Line::Stdout("hi".into())]
        );
    }

    #[test]
    fn json_is_one_object_per_line_or_chunk_all_on_stdout() {
        let lines = json!({"lines": [
            {"stream": "stderr", "line": "bad"},
            {"stream": "stdout", "line": "good", "truncated": true},
        ]});
        let rendered = render_chunk(&chunk(5, "log", lines), true);
        let objects: Vec<Value> = rendered
            .iter()
            .map(|line| match line {
                Line::Stdout(text) => serde_json::from_str(text).expect("one JSON object"),
                Line::Stderr(text) => panic!("JSON went to stderr: {text}"),
            })
            .collect();
        assert_eq!(
            objects,
            vec![
                json!({"attempt": 1, "sequence": 5, "kind": "log", "emittedAt": "2026-01-01T00:00:00Z",
                       "stream": "stderr", "line": "bad"}),
                json!({"attempt": 1, "sequence": 5, "kind": "log", "emittedAt": "2026-01-01T00:00:00Z",
                       "stream": "stdout", "line": "good", "truncated": true}),
            ]
        );
        let rendered = render_chunk(&chunk(6, "trajectory", json!({"step": 2})), true);
        assert_eq!(
            rendered,
            vec![Line::Stdout(
                json!({"attempt": 1, "sequence": 6, "kind": "trajectory",
                       "emittedAt": "2026-01-01T00:00:00Z", "payload": {"step": 2}})
                .to_string()
            )]
        );
    }

    #[test]
    fn only_success_exits_zero_and_an_unfinished_job_exits_three() {
        assert_eq!(exit_status(JobState::Succeeded), 0);
        assert_eq!(exit_status(JobState::Failed), 1);
        assert_eq!(exit_status(JobState::Cancelled), 1);
        for state in [
            JobState::Queued,
            JobState::Claimed,
            JobState::Running,
            JobState::CancelRequested,
            JobState::Lost,
        ] {
            assert_eq!(exit_status(state), NOT_FINISHED, "{}", state.as_str());
        }
    }

    #[test]
    fn intervals_are_bounded_seconds() {
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(seconds("0").is_err());
        assert!(seconds("-1").is_err());
        assert!(seconds("NaN").is_err());
        assert!(seconds("1e9").is_err());
    }
}
