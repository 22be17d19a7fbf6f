//! The service's own answers: its health, and (in the bench build only) the counters the
//! benchmarks read.

use serde::Serialize;

/// `GET /healthz`'s answer: the Worker answers.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HealthView {
    pub(crate) status: &'static str,
}

/// `GET /__bench/round-trips`'s answer (bench build): the D1 round trips made for requests
/// this isolate served.
#[cfg(feature = "bench-floor")]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoundTripsView {
    pub(crate) d1_round_trips: u64,
}

/// `GET /__bench/memory`'s answer (bench build): the isolate's Wasm memory.
#[cfg(feature = "bench-floor")]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryView {
    pub(crate) wasm_memory_bytes: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    #[test]
    fn health_reads_ok() {
        assert_eq!(
            to_value(&HealthView { status: "ok" }).unwrap(),
            json!({"status": "ok"})
        );
    }

    #[cfg(feature = "bench-floor")]
    #[test]
    fn the_bench_counters_read_as_they_always_have() {
        assert_eq!(
            to_value(&RoundTripsView { d1_round_trips: 7 }).unwrap(),
            json!({"d1RoundTrips": 7})
        );
        assert_eq!(
            to_value(&MemoryView {
                wasm_memory_bytes: 65_536
            })
            .unwrap(),
            json!({"wasmMemoryBytes": 65_536})
        );
    }
}
