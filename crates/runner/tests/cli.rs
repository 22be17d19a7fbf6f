//! The `edgerunner` binary as a process: exit statuses and messages.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn edgerunner(args: &[&str], stdin: &str) -> Output {
    edgerunner_into(args, stdin, Stdio::piped())
}

/// [`edgerunner`] with its stdout going to `stdout`.
fn edgerunner_into(args: &[&str], stdin: &str, stdout: impl Into<Stdio>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_edgerunner"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("edgerunner starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes())
        .expect("stdin accepts the document");
    child.wait_with_output().expect("edgerunner exits")
}

#[test]
fn hash_prints_h_and_a_newline() {
    let output = edgerunner(&["hash"], "{\"a\": 1.0}");
    assert!(output.status.success());
    // hash_remote_runner_payload({"a": 1.0}) from evalgate-sdk 3.15.0.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "c29a44abc114a1d75486434c013102c9e736f526b4fd19658d9492b7b224de6d\n"
    );
}

#[test]
fn stable_json_prints_the_canonical_text() {
    let output = edgerunner(&["stable-json"], "{\"b\": [1e+16], \"a\": \"\\u2028\"}\n");
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "{\"a\":\"\u{2028}\",\"b\":[1e+16]}\n"
    );
}

#[test]
fn invalid_json_exits_1_with_a_message() {
    let output = edgerunner(&["hash"], "{\"a\": }");
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.starts_with("edgerunner hash: invalid JSON: "),
        "{message}"
    );
}

#[test]
fn usage_errors_exit_2() {
    let output = edgerunner(&["frobnicate"], "");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage: edgerunner"));
    let help = edgerunner(&["help"], "");
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("stable-json"));
}

/// A reader gone before the answer is written (`edgerunner verify b.json | head -0`): no panic,
/// nothing said about the pipe, and the exit status is still the verdict.
#[test]
fn an_answer_nobody_reads_is_no_error_and_the_verdict_still_exits() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = edgerunner_into(&["verify", "-"], "{}", writer);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "an empty bundle is invalid: {said}"
    );
    assert!(!said.contains("panicked"), "{said}");
    assert!(!said.contains("Broken pipe"), "{said}");
}

/// `runner enroll` that does not say what the runner can run is refused before it makes any
/// file: no key is left behind, and no request is sent (the server named does not exist).
#[test]
fn an_enroll_without_capabilities_is_refused_and_leaves_no_key() {
    let dir = std::env::temp_dir().join(format!("edgerunner-cli-enroll-{}", std::process::id()));
    let config = dir.join("runner.json");
    let config = config.to_str().expect("a UTF-8 path");
    let args = [
        "runner",
        "enroll",
        "--server",
        "http://127.0.0.1:9",
        "--organization",
    ];
    let output = edgerunner(&[&args[..], &["org_x", "--config", config]].concat(), "");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(
        said.contains("say what the runner can run: --execution-kind KIND"),
        "{said}"
    );
    assert!(
        !dir.join("runner.key").exists(),
        "a refused enroll made a key"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
