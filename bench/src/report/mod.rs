//! The report: BENCHMARKS.md rendered from the run's JSON document (the one written to
//! benchmarks.json), section by section, with the analysis kept across runs; and the short
//! summary `--hot-only` prints.

use std::path::Path;

use serde_json::Value;

pub(crate) mod capacity;
pub(crate) mod machine;
pub(crate) mod sections;
mod targets;

pub(crate) fn markdown(r: &Value, analysis: &str) -> String {
    let mut md = header(r);
    md.push_str(&targets::targets(r));
    md.push_str(&sections::claim(r));
    md.push_str(&sections::lifecycle(r));
    md.push_str(&sections::stream(r));
    md.push_str(&sections::recovery(r));
    md.push_str(&sections::bundle(r));
    md.push_str(&sections::memory(r));
    md.push_str(&sections::chatty(r));
    md.push_str(&sections::round_trips(r));
    md.push_str(&sections::pickup(r));
    md.push_str(&capacity::markdown(r));
    md.push_str(&sections::plan(r));
    md.push_str(&sections::seeding(r));
    md.push_str("\n## Analysis\n\n<!-- analysis: kept by the harness across runs -->\n");
    md.push_str(analysis.trim());
    md.push_str("\n<!-- /analysis -->\n");
    md
}

/// The title, the command and date, and the table of the machine and the run.
fn header(r: &Value) -> String {
    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str(&format!(
        "Produced by `{}` on {} (UTC). Results also in `benchmarks.json`.\n\n",
        r["command"].as_str().unwrap_or(""),
        r["date"].as_str().unwrap_or("")
    ));
    md.push_str("| | |\n|---|---|\n");
    let m = &r["machine"];
    md.push_str(&format!(
        "| machine | {} × {} cores, {} GiB, {} |\n",
        m["cpu"].as_str().unwrap_or(""),
        m["cores"],
        m["memoryGiB"],
        m["kernel"].as_str().unwrap_or("")
    ));
    let v = &r["versions"];
    md.push_str(&format!(
        "| versions | {}; node {}; wrangler {}; workerd {}; edgerunner {} |\n",
        v["rustc"].as_str().unwrap_or(""),
        v["node"].as_str().unwrap_or(""),
        v["wrangler"].as_str().unwrap_or(""),
        v["workerd"].as_str().unwrap_or(""),
        v["edgerunner"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| load average (start → end) | {} → {} |\n",
        r["loadAverage"]["start"].as_str().unwrap_or(""),
        r["loadAverage"]["end"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| sizes | {} |\n",
        r["sizesNote"].as_str().unwrap_or("")
    ));
    md.push_str(&format!(
        "| load generator CPU (whole run) | {:.0}% of one core |\n\n",
        f(&r["clientCpu"]) * 100.0
    ));
    md
}

pub(crate) fn kept_analysis(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let open = "<!-- analysis: kept by the harness across runs -->";
    match (text.find(open), text.find("<!-- /analysis -->")) {
        (Some(a), Some(b)) if b > a => text[a + open.len()..b].to_owned(),
        _ => "(not written yet)".to_owned(),
    }
}

pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

pub(crate) fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Bytes as MiB with two decimals, or "–" when not measured.
pub(crate) fn mib(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "–".to_owned(), |b| format!("{:.2}", b / 1_048_576.0))
}

/// `--hot-only`'s summary on stdout: the p50s and ratios of its document, one line a scenario.
pub(crate) fn hot_summary(r: &Value) -> String {
    let (pickup, heartbeats) = (&r["pickup"], &r["heartbeats"]);
    let claims: Vec<String> = r["claim"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            format!(
                "p50 {} vs floor {} = {}x",
                l["claim"]["p50Ms"], l["floor"]["p50Ms"], l["p50Ratio"]
            )
        })
        .collect();
    let lifecycles: Vec<String> = r["lifecycle"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| format!("x{}: {}x", l["runners"], l["throughputRatio"]))
        .collect();
    let appends: Vec<String> = r["stream"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            format!(
                "{}: p50 {} vs floor {} = {}x",
                s["payload"], s["append"]["p50Ms"], s["floor"]["p50Ms"], s["p50Ratio"]
            )
        })
        .collect();
    format!(
        "pickup ms {}; from request {}; enqueue {}\nclaim: {}\nlifecycle: {}\nwarm heartbeat: p50 {} vs floor {} = {}x\nappends: {}\n",
        pickup["pickupMs"],
        pickup["fromRequestMs"],
        pickup["enqueueMs"],
        claims.join("; "),
        lifecycles.join("; "),
        heartbeats["heartbeat"]["p50Ms"],
        heartbeats["floor"]["p50Ms"],
        heartbeats["p50Ratio"],
        appends.join("; "),
    )
}
