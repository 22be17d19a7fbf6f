//! A job's code cannot become the runner. A job's output is stored in its stream, which anyone
//! with `runs:read` reads back; so whatever a job can print, a reader of its stream owns. The
//! runner's credentials (bootstrap token, API keys, the key pair's key and where it is) must
//! therefore never be in what a job is given: its environment, its arguments, its directories.
//!
//! Each test starts the real CLI runner the README's way, with every secret the README's setup
//! puts in its environment, on a job that prints `env` and lists its directories, then reads the
//! stored stream back through the admin API (as `edgerunner admin jobs logs` does) and looks
//! for each secret in it; beside each absence, a control that the stream holds what the job
//! was meant to see.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::*;
use serde_json::{json, Value};

/// What each job prints: its environment, then its own directory, the directory it started in
/// and its TMPDIR.
const PRINT_ENV: &str = "env; echo '--- workdir'; ls -la \"$EDGERUNNER_WORKDIR\"; \
                         echo '--- start dir'; ls -la .; echo '--- tmp'; ls -la \"$TMPDIR\"";

/// `program ARGS` in `dir` with exactly `env` (and PATH, HOME, a private XDG_CONFIG_HOME),
/// standard input closed, standard error piped.
pub(super) fn clean_command(
    program: &str,
    scratch: &Scratch,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", scratch.dir("home"))
        .env("XDG_CONFIG_HOME", scratch.path("xdg"))
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    command.envs(env.iter().copied());
    command
}

/// `edgerunner ARGS` as [`clean_command`] runs it, its standard output discarded.
pub(super) fn edgerunner(
    scratch: &Scratch,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let mut command = clean_command(&required_env("EDGERUNNER_BIN"), scratch, dir, args, env);
    command.stdout(Stdio::null());
    command
}

pub(super) fn shown(output: &Output) -> String {
    format!(
        "status {}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `runner start` as the attack tests run it: JSON logs, a quick poll, exit when idle, its
/// work directory `work`, then `args`.
pub(super) fn runner_start_args<'a>(work: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
        "runner",
        "start",
        "--log-format",
        "json",
        "--poll-interval",
        "0.2",
        "--exit-when-idle",
        "--work-dir",
        work.to_str().expect("UTF-8 path"),
    ];
    all.extend_from_slice(args);
    all
}

/// `runner start … --exit-when-idle` in `dir`, run to its end (bounded).
pub(super) async fn run_runner(
    scratch: &Scratch,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let work = scratch.path("work");
    let all = runner_start_args(&work, args);
    let child = edgerunner(scratch, dir, &all, env)
        .spawn()
        .expect("edgerunner starts");
    output_within(child, Duration::from_secs(90), "the runner").await
}

/// The job's whole stored stream, read page by page as `admin jobs logs` reads it: the pages'
/// text (every chunk, every field) and the job's stdout lines.
pub(super) async fn stored_stream(admin_key: &str, job_id: &str) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut stdout = Vec::new();
    let mut cursor = "0.-1".to_owned();
    for _ in 0..100 {
        let page = get(
            &format!("/api/remote-runners/jobs/{job_id}/stream?after={cursor}&limit=500"),
            admin_key,
        )
        .await;
        text.push_str(&page.text);
        let page = page.expect(200);
        for chunk in page["chunks"].as_array().expect("chunks") {
            for segment in chunk["payload"]["segments"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if segment["stream"] == "stdout" {
                    let body = segment["text"].as_str().expect("a segment's text");
                    stdout.extend(body.lines().map(str::to_owned));
                }
            }
        }
        cursor = page["cursor"].as_str().expect("a cursor").to_owned();
        if page["more"] != true {
            return (text, stdout);
        }
    }
    panic!("the stream of {job_id} has more than 100 pages");
}

pub(super) async fn succeeded(org: &Org, job_id: &str, runner: &Output) {
    let done = job(&org.admin_key, job_id).await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", shown(runner));
}

fn assert_absent(stream: &str, secrets: &[(&str, &str)]) {
    for (what, secret) in secrets {
        assert!(
            !stream.contains(secret),
            "the {what} reached the job's stored stream"
        );
    }
}

pub(super) fn assert_line(stdout: &[String], wanted: &str) {
    assert!(
        stdout.iter().any(|line| line == wanted),
        "no line {wanted:?} in the job's output: {stdout:#?}"
    );
}

/// A registered runner, an evidence key (`runs:write`) for it, and one queued job whose input
/// names no evaluation run (so the runner makes the run with that key, which is then in use):
/// `(runner id, bootstrap token, evidence key, job id)`.
async fn runner_with_evidence_key_and_a_job(
    org: &Org,
    name: &str,
) -> (String, String, String, String) {
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let (runner, token) = register_runner(&org.admin_key, &registration(name)).await;
    let evidence_key = new_api_key(
        &org.admin_key,
        &json!({ "name": "runner evidence", "scopes": ["runs:write"] }),
    )
    .await["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    let enqueued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({ "task": name }),
        &requirements("prompt"),
    )
    .await;
    (id_of(&runner), token, evidence_key, id_of(&enqueued))
}

#[tokio::test]
async fn a_job_that_prints_env_and_lists_its_directories_finds_no_runner_secret() {
    let org = bootstrap_org("attack-job-env");
    // No evaluationRunId: the runner makes the run with its evidence key, so that key is in use.
    let (runner_id, token, evidence_key, job_id) =
        runner_with_evidence_key_and_a_job(&org, "job-env").await;
    let marker = unique("runner-only-marker");
    let base = base_url();
    // The README's setup: the admin's shell, then the runner's variables on top.
    let env = [
        ("EVALGATE_BASE_URL", base.as_str()),
        ("EDGERUNNER_API_KEY", org.admin_key.as_str()),
        ("EVALGATE_RUNNER_ID", runner_id.as_str()),
        ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token.as_str()),
        ("EDGERUNNER_EVIDENCE_API_KEY", evidence_key.as_str()),
        ("RUNNER_ONLY_MARKER", marker.as_str()),
        ("LC_MESSAGES", "C"),
    ];
    let scratch = Scratch::new("job-env");
    let project = scratch.dir("project");
    std::fs::write(project.join("evaluate.sh"), "echo evaluated\n").expect("a project file");
    let output = run_runner(&scratch, &project, &["--exec", PRINT_ENV], &env).await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;

    let (stream, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_absent(
        &stream,
        &[
            ("bootstrap token", &token),
            ("admin API key", &org.admin_key),
            ("evidence API key", &evidence_key),
            ("runner-only marker", &marker),
        ],
    );
    assert!(
        !stdout.iter().any(|line| line.starts_with("EVALGATE_")),
        "no EVALGATE_* variable reaches a job: {stdout:#?}"
    );
    // The controls: what the job is given is there, read through the same stream.
    assert_line(&stdout, &format!("EDGERUNNER_JOB_ID={job_id}"));
    assert_line(&stdout, "LC_MESSAGES=C");
    assert!(
        stdout.iter().any(|line| line.starts_with("PATH=/")),
        "{stdout:#?}"
    );
    let workdir = stdout
        .iter()
        .find_map(|line| line.strip_prefix("EDGERUNNER_WORKDIR="))
        .expect("EDGERUNNER_WORKDIR");
    assert_line(&stdout, &format!("TMPDIR={workdir}/tmp"));
    assert!(
        stdout.iter().any(|line| line.ends_with(" input.json")),
        "{stdout:#?}"
    );
    assert!(
        stdout.iter().any(|line| line.ends_with(" evaluate.sh")),
        "{stdout:#?}"
    );
    // The stream was the runner's, and its evidence came from the key the job never saw.
    let done = job(&org.admin_key, &job_id).await;
    assert!(
        done["completions"][0]["evidence"]["evaluationRunId"].is_string(),
        "{done}"
    );
}

#[tokio::test]
async fn pass_env_gives_a_job_exactly_the_variables_it_names_and_never_a_credential() {
    let org = bootstrap_org("attack-pass-env");
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let (runner, token) = register_runner(&org.admin_key, &registration("pass-env")).await;
    let runner_id = id_of(&runner);
    let run_id = evaluation_run(&org.admin_key).await;
    let enqueued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({"evaluationRunId": run_id.to_json(), "task": "pass-env"}),
        &requirements("prompt"),
    )
    .await;
    let job_id = id_of(&enqueued);
    let base = base_url();
    let named = unique("named-value");
    let unnamed = unique("unnamed-value");
    let env = [
        ("EVALGATE_BASE_URL", base.as_str()),
        ("EDGERUNNER_API_KEY", org.admin_key.as_str()),
        ("EVALGATE_RUNNER_ID", runner_id.as_str()),
        ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token.as_str()),
        ("SOME_MARKER", named.as_str()),
        ("OTHER_MARKER", unnamed.as_str()),
    ];
    let scratch = Scratch::new("pass-env");
    let project = scratch.dir("project");

    // Naming a credential is a usage error at start: nothing is claimed.
    for credential in [
        "EVALGATE_RUNNER_BOOTSTRAP_TOKEN",
        "EDGERUNNER_API_KEY",
        "EDGERUNNER_EVIDENCE_API_KEY",
    ] {
        let output = run_runner(
            &scratch,
            &project,
            &["--exec", PRINT_ENV, "--pass-env", credential],
            &env,
        )
        .await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{credential}: {}",
            shown(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(credential), "{stderr}");
        assert!(
            !stderr.contains(&token) && !stderr.contains(&org.admin_key),
            "{stderr}"
        );
    }
    assert_eq!(job(&org.admin_key, &job_id).await["state"], "queued");

    // The control: the variable it names arrives, the one it does not stays behind.
    let output = run_runner(
        &scratch,
        &project,
        &["--exec", PRINT_ENV, "--pass-env", "SOME_MARKER"],
        &env,
    )
    .await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (stream, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_line(&stdout, &format!("SOME_MARKER={named}"));
    assert_absent(
        &stream,
        &[
            ("unnamed variable", &unnamed),
            ("bootstrap token", &token),
            ("admin API key", &org.admin_key),
        ],
    );
}

#[tokio::test]
async fn a_key_pair_runners_key_and_config_stay_out_of_its_jobs() {
    let org = bootstrap_org("attack-keypair-env");
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let scratch = Scratch::new("keypair-env");
    let config_dir = scratch.dir("config");
    let config = config_dir.join("runner.json");
    let config_arg = config.to_str().expect("UTF-8").to_owned();
    let base = base_url();
    let output = edgerunner(
        &scratch,
        scratch.root(),
        &[
            "runner",
            "enroll",
            "--server",
            base.as_str(),
            "--organization",
            org.id.as_str(),
            "--config",
            config_arg.as_str(),
            "--name",
            &unique("keypair-env"),
            "--execution-kind",
            "prompt",
            "--runtime",
            RUNTIME,
            "--json",
        ],
        &[],
    )
    .stdout(Stdio::piped())
    .output()
    .expect("edgerunner runs");
    assert!(output.status.success(), "{}", shown(&output));
    let enrolled: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let runner_id = enrolled["runner"]["id"].as_str().expect("id").to_owned();
    let fingerprint = enrolled["fingerprint"].as_str().expect("fingerprint");
    let key_file = enrolled["keyFile"].as_str().expect("key file").to_owned();
    approve(
        &org.admin_key,
        &runner_id,
        fingerprint,
        "fingerprint checked",
    )
    .await;
    let key_text = std::fs::read_to_string(&key_file).expect("the key file");
    let seed = key_text
        .lines()
        .nth(1)
        .expect("the key's second line")
        .to_owned();
    let run_id = evaluation_run(&org.admin_key).await;
    let enqueued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({"evaluationRunId": run_id.to_json(), "task": "keypair-env"}),
        &requirements("prompt"),
    )
    .await;
    let job_id = id_of(&enqueued);
    let env = [
        ("EDGERUNNER_CONFIG", config_arg.as_str()),
        ("EDGERUNNER_KEY_FILE", key_file.as_str()),
    ];

    // Started where its config and key lie, the runner refuses: a job could take them along.
    let output = run_runner(&scratch, &config_dir, &["--exec", PRINT_ENV], &env).await;
    assert_eq!(output.status.code(), Some(1), "{}", shown(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the directory jobs run in"), "{stderr}");
    assert_eq!(job(&org.admin_key, &job_id).await["state"], "queued");

    // Started from a project directory, it runs the job, which finds neither.
    let project = scratch.dir("project");
    let output = run_runner(&scratch, &project, &["--exec", PRINT_ENV], &env).await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (stream, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_absent(
        &stream,
        &[
            ("private key", &seed),
            ("key file's path", &key_file),
            ("config file's path", &config_arg),
        ],
    );
    assert!(
        !stdout
            .iter()
            .any(|line| line.contains("runner.key") || line.contains("runner.json")),
        "{stdout:#?}"
    );
    assert_line(&stdout, &format!("EDGERUNNER_JOB_ID={job_id}"));
}

/// What the job prints: every process's command line on the host (the runner's among them),
/// as any local process may read them, then the runner's environment where it may.
const READ_ARGV: &str = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\"; echo; done; \
                         echo '--- parent environ'; tr '\\0' '\\n' < /proc/$PPID/environ || true";

#[tokio::test]
async fn no_runner_secret_is_on_a_command_line_a_job_can_read() {
    let org = bootstrap_org("attack-argv");
    let (runner_id, token, evidence_key, job_id) =
        runner_with_evidence_key_and_a_job(&org, "argv").await;
    let base = base_url();
    let scratch = Scratch::new("argv");
    let project = scratch.dir("project");
    let base_env = [
        ("EVALGATE_BASE_URL", base.as_str()),
        ("EVALGATE_RUNNER_ID", runner_id.as_str()),
    ];

    // A secret as a flag's value, as the runner took them before: refused before anything is
    // claimed, with the ways to give it, and never echoed.
    for (flag, secret) in [
        ("--bootstrap-token", token.as_str()),
        ("--evidence-api-key", evidence_key.as_str()),
    ] {
        let mut env = base_env.to_vec();
        if flag != "--bootstrap-token" {
            env.push(("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token.as_str()));
        }
        let output = run_runner(&scratch, &project, &["--exec", "true", flag, secret], &env).await;
        assert_eq!(output.status.code(), Some(2), "{flag}: {}", shown(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("{flag}-file")), "{stderr}");
        assert!(!stderr.contains(secret), "{stderr}");
    }
    assert_eq!(job(&org.admin_key, &job_id).await["state"], "queued");

    // From files the flags name: the job reads every command line, and finds only paths.
    let token_file = scratch.path("bootstrap-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("the token file");
    let key_file = scratch.path("evidence-key");
    std::fs::write(&key_file, &evidence_key).expect("the key file");
    let output = run_runner(
        &scratch,
        &project,
        &[
            "--exec",
            READ_ARGV,
            "--bootstrap-token-file",
            token_file.to_str().expect("UTF-8"),
            "--evidence-api-key-file",
            key_file.to_str().expect("UTF-8"),
        ],
        &base_env,
    )
    .await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (stream, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_absent(
        &stream,
        &[
            ("bootstrap token", &token),
            ("evidence API key", &evidence_key),
        ],
    );
    // The control: the job did read the runner's command line, with its flags and paths.
    assert!(
        stdout.iter().any(|line| line.contains("runner start")
            && line.contains("--bootstrap-token-file")
            && line.contains(token_file.to_str().expect("UTF-8"))),
        "{stdout:#?}"
    );
    // And the evidence key from its file was used: the runner made the job's run with it.
    let done = job(&org.admin_key, &job_id).await;
    assert!(
        done["completions"][0]["evidence"]["evaluationRunId"].is_string(),
        "{done}"
    );
}
