//! The report's "Targets" table: each goal of the benchmark against its measured figure.

use serde_json::Value;

use super::capacity::{capacity, MODEL_D1_QPS};
use super::{f, verdict};

/// The table of targets, from the figures of every section.
pub(crate) fn targets(r: &Value) -> String {
    let mut md = String::new();
    let claims = r["claim"].as_array().cloned().unwrap_or_default();
    let first = claims.first().cloned().unwrap_or(Value::Null);
    let last = claims.last().cloned().unwrap_or(Value::Null);
    let lc32 = r["lifecycle"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or(Value::Null);
    let depth_ratio = f(&last["claim"]["p50Ms"]) / f(&first["claim"]["p50Ms"]);
    // The same comparison with each depth divided by its own interleaved floor, which removes
    // the drift of the machine's background load between the two measurements.
    let depth_ratio_normalised = f(&last["p50Ratio"]) / f(&first["p50Ratio"]);
    let gzip = f(&r["bundle"]["wasmGzipBytes"]);
    md.push_str("## Targets\n\n| target | measured | |\n|---|---|---|\n");
    md.push_str(&format!(
        "| claim p50 ≤ 1.5× floor (at {} queued) | {:.2}× ({} ms vs {} ms) | {} |\n",
        first["depth"],
        f(&first["p50Ratio"]),
        first["claim"]["p50Ms"],
        first["floor"]["p50Ms"],
        verdict(f(&first["p50Ratio"]) <= 1.5)
    ));
    md.push_str(&format!(
        "| claim p99 ≤ 3× floor (at {} queued) | {:.2}× ({} ms vs {} ms) | {} |\n",
        first["depth"],
        f(&first["p99Ratio"]),
        first["claim"]["p99Ms"],
        first["floor"]["p99Ms"],
        verdict(f(&first["p99Ratio"]) <= 3.0)
    ));
    md.push_str(&format!(
        "| claim p50 ≤ 2.0× floor, the hot path's bound (at {} queued) | {:.2}× | {} |\n",
        first["depth"],
        f(&first["p50Ratio"]),
        verdict(f(&first["p50Ratio"]) <= 2.0)
    ));
    let beats = &r["heartbeats"];
    md.push_str(&format!(
        "| warm heartbeat p50 ≤ 1.3× floor | {:.2}× ({} ms vs {} ms) | {} |\n",
        f(&beats["p50Ratio"]),
        beats["heartbeat"]["p50Ms"],
        beats["floor"]["p50Ms"],
        verdict(f(&beats["p50Ratio"]) <= 1.3)
    ));
    let line = r["stream"]
        .as_array()
        .and_then(|a| a.first())
        .cloned()
        .unwrap_or(Value::Null);
    md.push_str(&format!(
        "| warm chunk p50 ≤ 1.3× floor (one log line) | {:.2}× ({} ms vs {} ms) | {} |\n",
        f(&line["p50Ratio"]),
        line["append"]["p50Ms"],
        line["floor"]["p50Ms"],
        verdict(f(&line["p50Ratio"]) <= 1.3)
    ));
    md.push_str(&format!(
        "| claim p50 at {} queued ≤ 1.2× at {} | {:.2}× (each divided by its own floor: {:.2}×) | {} |\n",
        last["depth"],
        first["depth"],
        depth_ratio,
        depth_ratio_normalised,
        verdict(depth_ratio <= 1.2)
    ));
    md.push_str(&format!(
        "| lifecycle throughput at {} runners ≥ 0.7× floor (median of the rounds) | {:.2}× ({} req/s vs {} req/s) | {} |\n",
        lc32["runners"], f(&lc32["throughputRatio"]), lc32["requestsPerSecond"],
        lc32["floorRequestsPerSecond"], verdict(f(&lc32["throughputRatio"]) >= 0.7)
    ));
    md.push_str(&format!(
        "| lifecycle throughput at {} runners ≥ 0.8× floor, the hot path's bound | {:.2}× | {} |\n",
        lc32["runners"],
        f(&lc32["throughputRatio"]),
        verdict(f(&lc32["throughputRatio"]) >= 0.8)
    ));
    let pickup = &r["pickup"]["pickupMs"];
    md.push_str(&format!(
        "| job pickup p50 ≤ 50 ms, 32 runners long-polling (section 9) | {} ms (p99 {} ms) | {} |\n",
        pickup["p50Ms"],
        pickup["p99Ms"],
        verdict(f(&pickup["p50Ms"]) <= 50.0)
    ));
    if let Some((polling, long_polling, busy)) = capacity(r) {
        md.push_str(&format!(
            "| one D1 database carries ≥ 10,000 idle runners and ≥ 800 busy ones (section 10) | idle {:.0} polling, {:.0} long-polling; busy {:.0} | {} |\n",
            MODEL_D1_QPS / polling.max(1e-9),
            MODEL_D1_QPS / long_polling.max(1e-9),
            MODEL_D1_QPS / busy.max(1e-9),
            verdict(polling.max(long_polling) <= MODEL_D1_QPS / 10_000.0 && busy <= MODEL_D1_QPS / 800.0)
        ));
    }
    let rec = &r["recovery"];
    let failed = rec["failedPasses"].as_array().map_or(0, Vec::len);
    md.push_str(&format!(
        "| recovery of {} expired leases with no failed pass (section 4) | {} requeued, {} still leased, {} failed passes | {} |\n",
        rec["leases"],
        rec["requeued"],
        rec["stillLeased"],
        failed,
        verdict(failed == 0 && rec["stillLeased"].as_u64() == Some(0))
    ));
    md.push_str(&format!(
        "| wasm ≤ 1 MiB gzip | {:.0} KiB gzip ({:.0} KiB raw) | {} |\n\n",
        gzip / 1024.0,
        f(&r["bundle"]["wasmBytes"]) / 1024.0,
        verdict(gzip <= 1024.0 * 1024.0)
    ));
    let peak = r["memory"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["wasmMemoryBytes"].as_f64())
        .fold(f64::NAN, f64::max);
    if peak.is_finite() {
        // Inserted before the blank line that ends the table above.
        md.truncate(md.len() - 1);
        md.push_str(&format!(
            "| wasm memory < 32 MiB throughout (section 6) | {:.2} MiB peak | {} |\n\n",
            peak / 1_048_576.0,
            verdict(peak < 32.0 * 1_048_576.0)
        ));
    }
    md
}
