//! Measuring: wall and CPU time of a phase, milliseconds, nearest-rank percentiles, and the
//! `{n, p50Ms, p99Ms}` figures every latency of the report is given as.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// This process's user + system CPU time (`/proc/self/stat`, clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Wall and CPU time of one phase.
pub(crate) struct Phase {
    wall: Instant,
    cpu: f64,
}

impl Phase {
    pub(crate) fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    /// (wall seconds, client CPU as a fraction of one core).
    pub(crate) fn end(&self) -> (f64, f64) {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu;
        (wall, if wall > 0.0 { cpu / wall } else { 0.0 })
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of `samples` (milliseconds).
pub(crate) fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn stats(samples: &[f64]) -> Value {
    json!({
        "n": samples.len(),
        "p50Ms": round(percentile(samples, 50.0)),
        "p99Ms": round(percentile(samples, 99.0)),
    })
}

pub(crate) fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
