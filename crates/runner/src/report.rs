//! What the runner tells its operator: readable progress lines on a terminal, one JSON object
//! per line otherwise (for log collectors), always on stderr.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Writes events; cheap to clone.
#[derive(Clone)]
pub struct Reporter {
    format: Format,
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl Reporter {
    pub fn stderr(format: Format) -> Self {
        Self::to(format, Box::new(std::io::stderr()))
    }

    pub fn to(format: Format, sink: Box<dyn Write + Send>) -> Self {
        Self {
            format,
            sink: Arc::new(Mutex::new(sink)),
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// One event: `event` is a stable machine name, `message` the sentence a person reads,
    /// `fields` the details (a JSON object; anything else is ignored).
    pub fn emit(&self, level: Level, event: &str, message: &str, fields: Value) {
        let now = SystemClock.now();
        let line = match self.format {
            Format::Human => {
                let time = now.to_rfc3339();
                let clock = time.get(11..19).unwrap_or(&time);
                let tag = match level {
                    Level::Info => "",
                    Level::Warn => "warning: ",
                    Level::Error => "error: ",
                };
                format!("{clock} {tag}{message}\n")
            }
            Format::Json => {
                let mut object = Map::new();
                object.insert("ts".into(), now.to_rfc3339().into());
                object.insert("level".into(), level.as_str().into());
                object.insert("event".into(), event.into());
                object.insert("message".into(), message.into());
                if let Value::Object(fields) = fields {
                    for (key, value) in fields {
                        object.entry(key).or_insert(value);
                    }
                }
                format!("{}\n", Value::Object(object))
            }
        };
        let mut sink = self.sink.lock().unwrap_or_else(PoisonError::into_inner);
        // Nowhere to report a failure to report; the runner carries on.
        let _ = sink.write_all(line.as_bytes());
        let _ = sink.flush();
    }

    pub fn info(&self, event: &str, message: &str, fields: Value) {
        self.emit(Level::Info, event, message, fields);
    }

    pub fn warn(&self, event: &str, message: &str, fields: Value) {
        self.emit(Level::Warn, event, message, fields);
    }

    pub fn error(&self, event: &str, message: &str, fields: Value) {
        self.emit(Level::Error, event, message, fields);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_event_message_and_fields() {
        let shared = Shared::default();
        let reporter = Reporter::to(Format::Json, Box::new(shared.clone()));
        reporter.warn("job.lost", "job j lost", json!({"jobId": "j"}));
        let text = String::from_utf8(shared.0.lock().expect("lock").clone()).expect("utf8");
        let line: Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["event"], "job.lost");
        assert_eq!(line["jobId"], "j");
    }
}
