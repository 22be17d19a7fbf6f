//! What the runner tells its operator, through [`tracing`].
//!
//! The library only emits: events with a stable machine name in an `event` field and a sentence
//! for a person as the message, inside a `job` span that carries the job, claim and attempt. A
//! program that links the SDK installs whatever subscriber it likes. `edgerunner runner start`
//! installs [`LogLayer`] under an [`EnvFilter`] (`RUST_LOG`, default `warn,edgerunner=info`),
//! which writes to stderr:
//!
//! - [`Format::Human`]: `HH:MM:SS message` lines (`warning:` / `error:` before the message);
//! - [`Format::Json`]: one object per line with `ts`, `level` (lowercase), `event`, `message`,
//!   then every field of the event and of its spans, named in camelCase (`job_id` → `jobId`),
//!   numbers and booleans as JSON numbers and booleans.
//!
//! On a terminal, [`Terminal`] also keeps a status line under the log: each log line clears it,
//! is written, and redraws it, all under one lock, so the two never interleave.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::clock::{Clock, SystemClock};

/// How events are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

impl Format {
    /// Human on a terminal, JSON lines otherwise.
    pub fn detect() -> Self {
        if std::io::stderr().is_terminal() {
            Self::Human
        } else {
            Self::Json
        }
    }
}

/// Moves the cursor to the start of the line and erases it.
const CLEAR_LINE: &str = "\r\x1b[2K";

/// Where log lines (and, on a terminal, the status line) are written; cheap to clone.
#[derive(Clone)]
pub struct Terminal {
    inner: Arc<Mutex<Sink>>,
}

struct Sink {
    out: Box<dyn Write + Send>,
    /// The status line on screen, if one is.
    status: Option<String>,
}

impl Terminal {
    pub fn stderr() -> Self {
        Self::to(Box::new(std::io::stderr()))
    }

    pub fn to(out: Box<dyn Write + Send>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Sink { out, status: None })),
        }
    }

    fn with<R>(&self, write: impl FnOnce(&mut Sink) -> std::io::Result<R>) {
        let mut sink = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Nowhere to report a failure to report; the runner carries on.
        let _ = write(&mut sink).and_then(|_| sink.out.flush());
    }

    /// Writes one whole line (`line` ends with its newline), under the status line if one is
    /// shown.
    pub fn write_line(&self, line: &str) {
        self.with(|sink| match &sink.status {
            Some(status) => write!(sink.out, "{CLEAR_LINE}{line}{status}"),
            None => sink.out.write_all(line.as_bytes()),
        });
    }

    /// Shows `text` as the status line, in place of the previous one.
    pub fn show_status(&self, text: &str) {
        let text = text.replace(['\n', '\r'], " ");
        self.with(|sink| {
            write!(sink.out, "{CLEAR_LINE}{text}")?;
            sink.status = Some(text);
            Ok(())
        });
    }

    /// Erases the status line, if one is shown.
    pub fn clear_status(&self) {
        self.with(|sink| {
            if sink.status.take().is_some() {
                sink.out.write_all(CLEAR_LINE.as_bytes())?;
            }
            Ok(())
        });
    }
}

/// The filter `RUST_LOG` gives, or `warn,edgerunner=info` when it is unset or empty.
pub fn env_filter() -> Result<EnvFilter, String> {
    match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .map_err(|error| format!("RUST_LOG {directives:?} is not a log filter: {error}")),
        _ => Ok(EnvFilter::new("warn,edgerunner=info")),
    }
}

/// Makes `layer` (under `filter`) the process's subscriber. Fails when one is already set.
pub fn install(layer: LogLayer, filter: EnvFilter) -> Result<(), String> {
    let subscriber = tracing_subscriber::registry().with(layer.with_filter(filter));
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|error| format!("cannot install the logger: {error}"))
}

/// Writes events as [`Format`] says to a [`Terminal`].
pub struct LogLayer {
    format: Format,
    terminal: Terminal,
}

impl LogLayer {
    pub fn new(format: Format, terminal: Terminal) -> Self {
        Self { format, terminal }
    }

    fn line(&self, level: Level, event: &str, message: &str, fields: Map<String, Value>) -> String {
        let now = SystemClock.now().to_rfc3339();
        match self.format {
            Format::Human => {
                let clock = now.get(11..19).unwrap_or(&now);
                let tag = match level {
                    Level::ERROR => "error: ",
                    Level::WARN => "warning: ",
                    _ => "",
                };
                format!("{clock} {tag}{message}\n")
            }
            Format::Json => {
                let mut object = Map::new();
                object.insert("ts".into(), now.into());
                object.insert("level".into(), level_name(level).into());
                object.insert("event".into(), event.into());
                object.insert("message".into(), message.into());
                for (key, value) in fields {
                    object.entry(key).or_insert(value);
                }
                format!("{}\n", Value::Object(object))
            }
        }
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

impl<S> Layer<S> for LogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id) {
            let mut fields = Fields::default();
            attrs.record(&mut fields);
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let Fields(mut all) = fields;
        let message = take_text(&mut all, "message");
        let name = take_text(&mut all, "event").unwrap_or_else(|| event.metadata().target().into());
        // The event's own fields first, then its spans' from the innermost out.
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                if let Some(Fields(span_fields)) = span.extensions().get::<Fields>() {
                    for (key, value) in span_fields {
                        all.entry(key.clone()).or_insert_with(|| value.clone());
                    }
                }
            }
        }
        let line = self.line(
            *event.metadata().level(),
            &name,
            message.as_deref().unwrap_or(""),
            all,
        );
        self.terminal.write_line(&line);
    }
}

fn take_text(fields: &mut Map<String, Value>, key: &str) -> Option<String> {
    match fields.remove(key)? {
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

/// An event's or a span's fields as JSON, keys in camelCase.
#[derive(Debug, Default)]
struct Fields(Map<String, Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(camel_case(field.name()), value);
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
}

/// `job_id` → `jobId`; names without underscores are kept.
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lock").clone()).expect("utf8")
        }
    }

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(format: Format, emit: impl FnOnce()) -> String {
        let shared = Shared::default();
        let layer = LogLayer::new(format, Terminal::to(Box::new(shared.clone())));
        let subscriber = tracing_subscriber::registry()
            .with(layer.with_filter(EnvFilter::new("warn,edgerunner=info")));
        tracing::subscriber::with_default(subscriber, emit);
        shared.text()
    }

    #[test]
    fn json_lines_carry_event_message_fields_and_the_span_in_camel_case() {
        let text = logged(Format::Json, || {
            let span = tracing::info_span!("job", job_id = "job_1", attempt = 2u32);
            let _entered = span.enter();
            tracing::warn!(
                event = "job.lost",
                lines_lost = 3u64,
                killed = true,
                "job {} lost",
                "job_1"
            );
            tracing::debug!(event = "job.noise", "filtered out at info");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: Value = serde_json::from_str(lines[0]).expect("one JSON line");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["event"], "job.lost");
        assert_eq!(line["message"], "job job_1 lost");
        assert_eq!(line["jobId"], "job_1");
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["linesLost"], 3);
        assert_eq!(line["killed"], true);
        assert!(line["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')));
    }

    #[test]
    fn human_lines_are_a_clock_and_the_sentence() {
        let text = logged(Format::Human, || {
            tracing::info!(event = "runner.idle", "nothing to do");
            tracing::error!(event = "runner.fatal", "cannot go on");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with(" nothing to do"), "{text}");
        assert!(lines[1].ends_with(" error: cannot go on"), "{text}");
        assert_eq!(lines[0].find(' '), Some(8), "HH:MM:SS first: {text}");
    }

    #[test]
    fn a_log_line_clears_the_status_line_and_redraws_it_after() {
        let shared = Shared::default();
        let terminal = Terminal::to(Box::new(shared.clone()));
        terminal.write_line("before\n");
        terminal.show_status("1 running");
        terminal.write_line("a log line\n");
        terminal.show_status("2 running");
        terminal.clear_status();
        terminal.clear_status();
        terminal.write_line("after\n");
        assert_eq!(
            shared.text(),
            "before\n\
             \r\x1b[2K1 running\
             \r\x1b[2Ka log line\n1 running\
             \r\x1b[2K2 running\
             \r\x1b[2K\
             after\n"
        );
    }

    #[test]
    fn field_names_become_camel_case() {
        assert_eq!(camel_case("job_id"), "jobId");
        assert_eq!(
            camel_case("lines_over_stream_limit"),
            "linesOverStreamLimit"
        );
        assert_eq!(camel_case("attempt"), "attempt");
        assert_eq!(camel_case("_private"), "private");
    }
}
