//! The runner's clock, behind a trait so that session refresh and claim validity are testable
//! at any instant.

use std::time::{SystemTime, UNIX_EPOCH};

use edgerunner_protocol::time::{Timestamp, UnixMillis};

/// Where "now" comes from.
pub trait Clock: Send + Sync {
    fn now(&self) -> UnixMillis;
}

/// This machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixMillis {
        UnixMillis::new(unix_micros() / 1000).unwrap_or(UnixMillis::MAX)
    }
}

/// A clock stuck at one instant (tests).
#[derive(Clone, Copy, Debug)]
pub struct FixedClock(pub UnixMillis);

impl Clock for FixedClock {
    fn now(&self) -> UnixMillis {
        self.0
    }
}

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
        })
}

/// Now as the SDK writes `emittedAt` and `completedAt`: UTC with microseconds and `Z`
/// (`2026-11-29T07:00:00.123456Z`). The text is what gets hashed, so it is made once per value.
pub fn timestamp_now() -> Timestamp {
    let micros = unix_micros();
    let millis = UnixMillis::new(micros.div_euclid(1000)).unwrap_or(UnixMillis::MAX);
    let rendered = millis.to_rfc3339();
    let text = format!(
        "{}{:03}Z",
        rendered.trim_end_matches('Z'),
        micros.rem_euclid(1000)
    );
    // Both halves come from `to_rfc3339`, which always parses back; fall back to it regardless.
    Timestamp::parse(&text).unwrap_or_else(|_| Timestamp::from_instant(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_have_microseconds_and_z() {
        let stamp = timestamp_now();
        let text = stamp.as_str();
        assert!(text.ends_with('Z'), "{text}");
        let fraction = text
            .rsplit_once('.')
            .map(|(_, tail)| tail.trim_end_matches('Z'))
            .expect("a fraction");
        assert_eq!(fraction.len(), 6, "{text}");
    }
}
