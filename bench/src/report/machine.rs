//! What the report says about where it ran: the machine, the tools' versions, the load
//! average and the date.

use std::process::Command;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::measure::round;

fn shell(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub(crate) fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("unknown")
        .trim()
        .to_owned();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|kb| kb.parse::<u64>().ok())
        .unwrap_or(0);
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memoryGiB": round(mem as f64 / 1024.0 / 1024.0),
        "kernel": shell("uname", &["-sr"]),
    })
}

pub(crate) fn versions() -> Value {
    /// The one field read of workerd's package.json.
    #[derive(Deserialize)]
    struct Package {
        version: String,
    }
    let workerd = std::fs::read_to_string("node_modules/workerd/package.json")
        .ok()
        .and_then(|t| serde_json::from_str::<Package>(&t).ok())
        .map(|package| package.version)
        .unwrap_or_default();
    json!({
        "rustc": shell("rustc", &["--version"]),
        "node": shell("node", &["--version"]),
        "wrangler": shell("wrangler", &["--version"]),
        "workerd": workerd,
        "edgerunner": shell("git", &["rev-parse", "--short", "HEAD"]),
    })
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Now, in UTC, as the report prints it.
pub(crate) fn date() -> String {
    shell("date", &["-u", "+%Y-%m-%d %H:%M"])
}
