//! A job's output cannot take over the operator's terminal. A job prints escape sequences (a
//! window title, a screen clear, a one-byte CSI, a right-to-left override) and the operator
//! reads its logs with `edgerunner admin jobs logs` on a real terminal: what reaches the
//! terminal is those bytes escaped, unless the operator asks for them raw (`--raw`), and a pipe
//! gets the bytes as the job sent them.

use std::process::{Command, Output, Stdio};

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::terminal::under_a_terminal;
use edgerunner_e2e::*;
use serde_json::{json, Value};

use super::job_env::{run_runner, succeeded};

/// What the job prints, as `sh`'s `printf` writes it: on stdout a title change, a screen
/// clear, a C1 CSI (U+009B) and a right-to-left override (U+202E); on stderr a colour.
const HOSTILE_JOB: &str = "printf 'title\\033]0;pwned\\007 clear\\033[2J csi\\302\\23331m \
                           rtl\\342\\200\\256cba\\n'; printf 'err\\033[31mred\\n' >&2";
const HOSTILE_OUT: &str = "title\u{1b}]0;pwned\u{7} clear\u{1b}[2J csi\u{9b}31m rtl\u{202e}cba";
/// What must never reach a terminal unasked.
const RAW: [&str; 3] = ["\u{1b}", "\u{9b}", "\u{202e}"];

/// `edgerunner admin --server BASE ARGS`, on a terminal of its own when `terminal`, with the
/// organization's key and nothing else of ours in its environment: its exit code and what it
/// wrote (to the terminal, or to its standard output).
fn admin_logs(org: &Org, args: &[&str], terminal: bool) -> (Option<i32>, String) {
    let bin = required_env("EDGERUNNER_BIN");
    let base = base_url();
    let mut all = vec![bin.as_str(), "admin", "--server", base.as_str()];
    all.extend_from_slice(args);
    let mut command = if terminal {
        under_a_terminal(&all)
    } else {
        let mut command = Command::new(&bin);
        command.args(&all[1..]);
        command
    };
    let output = command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("EDGERUNNER_API_KEY", &org.admin_key)
        .stdin(Stdio::null())
        .output()
        .expect("the command runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

fn logs_on_a_terminal(org: &Org, args: &[&str]) -> (Option<i32>, String) {
    admin_logs(org, args, true)
}

fn assert_nothing_raw(text: &str) {
    for raw in RAW {
        assert!(
            !text.contains(raw),
            "{raw:?} reached the terminal: {text:?}"
        );
    }
}

#[tokio::test]
async fn a_jobs_escape_sequences_reach_the_operators_terminal_escaped_and_raw_only_when_asked() {
    let org = bootstrap_org("attack-escapes");
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let (runner, token) = register_runner(&org.admin_key, &registration("attack-escapes")).await;
    let run_id = evaluation_run(&org.admin_key).await;
    let input = json!({"evaluationRunId": run_id.to_json()});
    let enqueued = enqueue_job(&org.admin_key, &release, &input, &requirements("prompt")).await;
    let job_id = id_of(&enqueued);
    let scratch = Scratch::new("escapes");
    let project = scratch.dir("project");
    let env = [
        ("EVALGATE_BASE_URL", base_url()),
        ("EVALGATE_RUNNER_ID", id_of(&runner)),
        ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let ran: Output = run_runner(&scratch, &project, &["--exec", HOSTILE_JOB], &env).await;
    succeeded(&org, &job_id, &ran).await;

    // On a terminal: shown escaped, stdout and stderr alike, and nothing raw reaches it.
    let (status, text) = logs_on_a_terminal(&org, &["jobs", "logs", &job_id]);
    assert_eq!(status, Some(0), "{text}");
    assert!(
        text.contains("title\\x1b]0;pwned\\x07 clear\\x1b[2J csi\\u{9b}31m rtl\\u{202e}cba"),
        "{text:?}"
    );
    assert!(text.contains("err\\x1b[31mred"), "{text:?}");
    assert_nothing_raw(&text);

    // --json on a terminal: JSON's own escapes, each line still JSON holding the bytes sent.
    let (status, text) = logs_on_a_terminal(&org, &["--json", "jobs", "logs", &job_id]);
    assert_eq!(status, Some(0), "{text}");
    assert_nothing_raw(&text);
    let lines: Vec<Value> = text
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line.trim_end()).expect("a JSON line"))
        .collect();
    assert!(
        lines.iter().any(|line| line["line"] == HOSTILE_OUT),
        "{text:?}"
    );

    // The control: --raw on a terminal, and a pipe without it, get the bytes as sent.
    let (status, text) = logs_on_a_terminal(&org, &["jobs", "logs", &job_id, "--raw"]);
    assert_eq!(status, Some(0), "{text}");
    assert!(text.contains(HOSTILE_OUT), "{text:?}");
    let (status, piped) = admin_logs(&org, &["jobs", "logs", &job_id], false);
    assert_eq!(status, Some(0), "{piped}");
    assert!(piped.lines().any(|line| line == HOSTILE_OUT), "{piped:?}");
}
