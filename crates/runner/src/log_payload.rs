//! Reading a log chunk's payload back into lines, in both shapes a stream may hold.
//!
//! - `{"segments": [{"stream": "stdout"|"stderr", "text", "truncated"?: true}]}`, what
//!   `edgerunner runner start` writes ([`crate::stream`]): each segment is a run of lines from
//!   one output, `text` being every line followed by `\n` (a final piece without one is a line
//!   too); `"truncated": true` marks the segment's last line as cut at
//!   [`crate::stream::MAX_LINE_BYTES`]. Segments are in the order the lines were read.
//! - `{"lines": [{"stream", "line", "truncated"?: true}]}`, one object per line, what earlier
//!   runners wrote (and what streams stored before hold).
//!
//! The server treats payloads as opaque JSON; only readers (`edgerunner admin jobs logs`, the
//! panel) know these shapes. A missing `stream` reads as stdout, as it always has.

use serde_json::Value;

/// One line of a job's output as a log payload holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayloadLine {
    /// `stdout`, `stderr`, or whatever other name the writer gave.
    pub stream: String,
    pub line: String,
    /// Cut at the runner's line limit.
    pub truncated: bool,
}

/// The lines of a log payload in either shape, in order; `None` when it holds neither (an
/// event, a message, or something else).
pub fn log_lines(payload: &Value) -> Option<Vec<PayloadLine>> {
    if let Some(segments) = payload.get("segments").and_then(Value::as_array) {
        let mut lines = Vec::new();
        for segment in segments {
            segment_lines(segment, &mut lines);
        }
        return Some(lines);
    }
    let lines = payload.get("lines").and_then(Value::as_array)?;
    Some(
        lines
            .iter()
            .map(|entry| PayloadLine {
                stream: stream_of(entry),
                line: entry["line"]
                    .as_str()
                    .map_or_else(|| text_of(&entry["line"]), str::to_owned),
                truncated: entry["truncated"].as_bool() == Some(true),
            })
            .collect(),
    )
}

/// Appends one segment's lines to `lines`.
fn segment_lines(segment: &Value, lines: &mut Vec<PayloadLine>) {
    let stream = stream_of(segment);
    let text = match &segment["text"] {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    if text.is_empty() {
        return;
    }
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let first = lines.len();
    lines.extend(body.split('\n').map(|line| PayloadLine {
        stream: stream.clone(),
        line: line.to_owned(),
        truncated: false,
    }));
    if segment["truncated"].as_bool() == Some(true) && lines.len() > first {
        if let Some(last) = lines.last_mut() {
            last.truncated = true;
        }
    }
}

fn stream_of(entry: &Value) -> String {
    entry["stream"].as_str().unwrap_or("stdout").to_owned()
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(stream: &str, text: &str, truncated: bool) -> PayloadLine {
        PayloadLine {
            stream: stream.into(),
            line: text.into(),
            truncated,
        }
    }

    #[test]
    fn segments_read_back_line_by_line_in_order_across_streams() {
        let payload = json!({"segments": [
            {"stream": "stdout", "text": "a\n\nb\n"},
            {"stream": "stderr", "text": "c\n"},
            {"stream": "stdout", "text": "d\n"},
        ]});
        assert_eq!(
            log_lines(&payload),
            Some(vec![
                line("stdout", "a", false),
                line("stdout", "", false),
                line("stdout", "b", false),
                line("stderr", "c", false),
                line("stdout", "d", false),
            ])
        );
    }

    #[test]
    fn a_truncated_segment_marks_only_its_last_line() {
        let payload = json!({"segments": [
            {"stream": "stderr", "text": "whole\ncut\n", "truncated": true},
            {"stream": "stderr", "text": "next\n"},
        ]});
        assert_eq!(
            log_lines(&payload),
            Some(vec![
                line("stderr", "whole", false),
                line("stderr", "cut", true),
                line("stderr", "next", false),
            ])
        );
    }

    #[test]
    fn text_without_a_final_newline_still_ends_in_a_line_and_empty_text_in_none() {
        let payload = json!({"segments": [
            {"stream": "stdout", "text": ""},
            {"stream": "stdout", "text": "x\ny"},
            {"text": "\n"},
        ]});
        assert_eq!(
            log_lines(&payload),
            Some(vec![
                line("stdout", "x", false),
                line("stdout", "y", false),
                line("stdout", "", false),
            ])
        );
    }

    #[test]
    fn the_earlier_one_object_per_line_shape_still_reads() {
        let payload = json!({"lines": [
            {"stream": "stdout", "line": "one"},
            {"stream": "stderr", "line": "two", "truncated": true},
            {"line": 3},
        ]});
        assert_eq!(
            log_lines(&payload),
            Some(vec![
                line("stdout", "one", false),
                line("stderr", "two", true),
                line("stdout", "3", false),
            ])
        );
    }

    #[test]
    fn other_payloads_hold_no_lines() {
        assert_eq!(log_lines(&json!({"event": "started"})), None);
        assert_eq!(log_lines(&json!({"message": "hi"})), None);
        assert_eq!(log_lines(&json!(["segments"])), None);
        assert_eq!(log_lines(&json!({"segments": []})), Some(vec![]));
    }
}
