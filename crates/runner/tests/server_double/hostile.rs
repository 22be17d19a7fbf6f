//! A hostile or broken server cannot crash the runner or grow its memory: the largest wall time
//! a signed envelope can carry (2^53 - 1 seconds; a larger number is not portable JSON and the
//! envelope is refused) is a long deadline, not an overflow, and an answer past the
//! client's bound is refused unread rather than buffered whole.

use std::process::Stdio;

use edgerunner_protocol::envelope::EnvelopeRequirements;
use edgerunner_protocol::stable_json;
use serde_json::{json, Value};

use crate::double::*;

/// A double whose one job's envelope says `limits`, answering `path` with `answer` (`200`).
fn double_with(limits: Value, path: &'static str, answer: Option<Value>) -> Double {
    let content = json!({"template": "t"});
    let input = json!({"question": "2+2", "evaluationRunId": "evr_double"});
    let mut envelope = envelope(31);
    envelope.input_hash = stable_json::hash(&input);
    envelope.requirements = EnvelopeRequirements::from_value(json!({
        "executionKind": "prompt", "runtime": "python3.12", "limits": limits,
    }))
    .expect("requirements");
    let artifact = json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&content).as_str(),
        "content": content,
    });
    one_job_double(
        &envelope,
        input,
        (200, artifact),
        (path, answer.map(|body| (200, body))),
    )
}

fn completions(double: &Double) -> Vec<Value> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/complete")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect()
}

#[test]
fn the_largest_wall_time_an_envelope_carries_runs_the_job_instead_of_overflowing() {
    const LARGEST: u64 = (1 << 53) - 1;
    let limits = json!({
        "cpuSeconds": LARGEST, "memoryMb": LARGEST, "wallSeconds": LARGEST, "outputBytes": LARGEST,
    });
    let double = double_with(limits, "", None);
    let dir = scratch();
    let output = runner_start(&double, &dir, "echo fine")
        .stdout(Stdio::null())
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let completions = completions(&double);
    assert_eq!(completions.len(), 1, "{stderr}");
    assert_eq!(completions[0]["status"], "succeeded", "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_past_the_bound_is_refused_unread_and_the_runner_goes_on() {
    // The job's input, padded past 16 MiB: the runner refuses it and never runs the command.
    let padded = json!({"question": "2+2", "padding": "x".repeat(17 * 1024 * 1024)});
    let limits =
        json!({"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 30, "outputBytes": 1048576});
    let double = double_with(
        limits,
        "/api/remote-runners/jobs/job_double/input",
        Some(padded),
    );
    let dir = scratch();
    let marker = dir.join("ran");
    let output = runner_start(&double, &dir, &format!("touch {}", marker.display()))
        .stdout(Stdio::null())
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("larger than 16777216 bytes"), "{stderr}");
    assert!(
        !marker.exists(),
        "the command ran on an input it could not read"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
