//! A job runs only what its envelope signs, in a fresh private directory, with a clean
//! environment: spoiled assignments, unreadable or mismatched artifacts, `--pass-env`, `--run-as`.

use std::path::PathBuf;
use std::process::Stdio;

use edgerunner::log_payload::log_lines;
use edgerunner_protocol::stable_json;
use serde_json::{json, Value};

use crate::double::*;

#[test]
fn a_spoiled_assignment_is_refused_and_never_run() {
    for (code, answer) in spoiled() {
        let double = Double::with_claims(vec![answer]);
        let dir = scratch();
        let marker = dir.join("ran");
        let output = runner_start(&double, &dir, &format!("touch {}", marker.display()))
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{code}: {stderr}");
        let refusal = stderr
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["event"] == "claim.refused")
            .unwrap_or_else(|| panic!("{code}: no claim.refused event in\n{stderr}"));
        assert_eq!(refusal["code"], code, "{stderr}");
        assert!(
            refusal["message"]
                .as_str()
                .is_some_and(|m| m.contains("it was not run")),
            "{refusal}"
        );
        assert!(!marker.exists(), "{code}: the command ran");
        let paths = double.paths();
        for forbidden in ["/input", "/artifact", "/heartbeat", "/stream", "/complete"] {
            assert!(
                paths.iter().all(|path| !path.ends_with(forbidden)),
                "{code}: the runner called {forbidden} after refusing: {paths:?}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The input the job double serves: it names its evaluation run, so no evidence is created.
fn job_input() -> Value {
    json!({"question": "2+2", "evaluationRunId": "evr_double"})
}

/// The artifact content the envelope's `contentHash` signs.
fn job_artifact_content() -> Value {
    json!({"template": "t"})
}

/// The artifact read's answer the envelope signs: version 1 with the content its hash names.
fn genuine_artifact() -> Value {
    json!({
        "versionId": 1,
        "contentHash": stable_json::hash(&job_artifact_content()).as_str(),
        "content": job_artifact_content(),
    })
}

/// Every log line the runner streamed to `double`, in order.
fn printed_lines(double: &Double) -> Vec<String> {
    streamed(double)
        .iter()
        .filter_map(log_lines)
        .flatten()
        .map(|line| line.line)
        .collect()
}

/// A server double with one genuine job whose artifact read is answered with `artifact`;
/// everything else a job needs is answered as the server would.
fn job_double(artifact: (u16, Value)) -> Double {
    let mut envelope = envelope(21);
    envelope.input_hash = stable_json::hash(&job_input());
    one_job_double(&envelope, job_input(), artifact, ("", None))
}

/// [`runner_start`] with `extra` arguments, expecting success; its log.
fn start_runner(double: &Double, dir: &std::path::Path, command: &str, extra: &[&str]) -> String {
    let output = runner_start(double, dir, command)
        .args(extra)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
}

/// The completions the double received.
fn completions(double: &Double) -> Vec<Value> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/complete")
        .map(|r| serde_json::from_str(&r.body).expect("JSON"))
        .collect()
}

fn refusals(double: &Double) -> Vec<String> {
    double
        .received()
        .into_iter()
        .filter(|r| r.path == "/api/remote-runners/stream")
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter(|chunk| chunk["payload"]["event"] == "refused")
        .map(|chunk| chunk["payload"]["reason"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_job_whose_artifact_cannot_be_read_fails_and_its_command_never_runs() {
    let unreadable = [
        (
            404,
            json!({"error": {"code": "NOT_FOUND", "message": "no bound artifact"}}),
        ),
        (
            403,
            json!({"error": {"code": "FORBIDDEN", "message": "not yours"}}),
        ),
        (200, json!("not an artifact document")),
    ];
    for artifact in unreadable {
        let label = artifact.1.to_string();
        let double = job_double(artifact);
        let dir = scratch();
        let marker = dir.join("ran");
        let stderr = start_runner(&double, &dir, &format!("touch {}", marker.display()), &[]);
        assert!(
            !marker.exists(),
            "{label}: the command ran without its artifact"
        );
        let sent = completions(&double);
        assert_eq!(sent.len(), 1, "{label}: one completion\n{stderr}");
        assert_eq!(sent[0]["status"], "failed", "{label}");
        assert_eq!(sent[0]["resultHash"], Value::Null, "{label}: nothing ran");
        let reasons = refusals(&double);
        assert_eq!(reasons.len(), 1, "{label}: {reasons:?}");
        assert!(
            reasons[0].contains("artifact"),
            "{label}: the reason names the artifact: {reasons:?}"
        );
        assert!(
            stderr.contains("job.inputs_refused"),
            "{label}: reported\n{stderr}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_job_runs_only_with_the_artifact_its_envelope_signs() {
    let genuine = genuine_artifact();
    let mut spoiled = genuine.clone();
    spoiled["content"]["template"] = "other".into();

    let double = job_double((200, spoiled));
    let dir = scratch();
    let marker = dir.join("ran");
    start_runner(&double, &dir, &format!("touch {}", marker.display()), &[]);
    assert!(!marker.exists(), "a spoiled artifact must not run");
    assert_eq!(completions(&double)[0]["status"], "failed");
    assert!(refusals(&double)[0].contains("not the signed contentHash"));
    let _ = std::fs::remove_dir_all(&dir);

    let double = job_double((200, genuine));
    let dir = scratch();
    let copy = dir.join("artifact-seen");
    start_runner(
        &double,
        &dir,
        &format!("cp \"$EDGERUNNER_ARTIFACT\" {}", copy.display()),
        &[],
    );
    assert_eq!(completions(&double)[0]["status"], "succeeded");
    let seen: Value =
        serde_json::from_slice(&std::fs::read(&copy).expect("the command ran")).expect("JSON");
    assert_eq!(seen, job_artifact_content());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn job_files_live_in_a_fresh_private_runner_directory() {
    use std::os::unix::fs::PermissionsExt;

    let genuine = genuine_artifact();
    let double = job_double((200, genuine));
    let dir = scratch();
    let seen = dir.join("workdir-seen");
    start_runner(
        &double,
        &dir,
        &format!("echo \"$EDGERUNNER_WORKDIR\" > {}", seen.display()),
        &["--keep-work"],
    );
    assert_eq!(completions(&double)[0]["status"], "succeeded");
    let job_dir = PathBuf::from(std::fs::read_to_string(&seen).expect("ran").trim());
    let runner_dir = job_dir.parent().expect("inside the runner directory");
    assert_eq!(runner_dir.parent(), Some(dir.join("work").as_path()));
    let name = runner_dir.file_name().expect("named").to_string_lossy();
    assert!(
        name.strip_prefix("edgerunner-").is_some_and(
            |suffix| suffix.len() == 16 && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
        ),
        "{name}"
    );
    let job_name = job_dir.file_name().expect("named").to_string_lossy();
    assert!(job_name.starts_with("job_double-1-"), "{job_name}");
    let mode = |path: &std::path::Path| {
        std::fs::symlink_metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode(runner_dir), 0o700);
    assert_eq!(mode(&job_dir), 0o700);
    assert_eq!(mode(&job_dir.join("input.json")), 0o600);
    assert_eq!(mode(&job_dir.join("artifact.json")), 0o600);
    assert_eq!(mode(&job_dir.join("tmp")), 0o700, "the job's TMPDIR");
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(job_dir.join("input.json")).expect("kept"))
            .expect("JSON"),
        job_input()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The job's environment as `env` printed it, one `NAME=value` per entry.
fn job_env_after(
    double: &Double,
    dir: &std::path::Path,
    extra_env: &[(&str, &str)],
    args: &[&str],
) -> Vec<String> {
    let seen = dir.join("env-seen");
    let output = runner_start(
        double,
        dir,
        &format!(
            "env > {}; echo \"tmp=$(cd \"$TMPDIR\" && pwd)\" >> {}",
            seen.display(),
            seen.display()
        ),
    )
    .envs(extra_env.iter().copied())
    .args(args)
    .output()
    .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(double)[0]["status"], "succeeded", "{stderr}");
    std::fs::read_to_string(&seen)
        .expect("the job ran")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_job_gets_a_clean_environment_and_exactly_what_pass_env_names() {
    const API_KEY: &str = "erk_runner_admin_key_never_for_jobs";
    let secrets = [
        ("EDGERUNNER_API_KEY", API_KEY),
        ("LC_MESSAGES", "C"),
        ("PASSED_MARKER", "passed-value"),
        ("UNNAMED_MARKER", "unnamed-value"),
    ];
    let genuine = genuine_artifact();
    let dir = scratch();
    let env = job_env_after(
        &job_double((200, genuine.clone())),
        &dir,
        &secrets,
        &["--pass-env", "PASSED_MARKER"],
    );
    let all = env.join("\n");
    for secret in [
        "erb_double",
        API_KEY,
        "unnamed-value",
        "EVALGATE_",
        "XDG_CONFIG_HOME",
    ] {
        assert!(!all.contains(secret), "{secret} reached the job:\n{all}");
    }
    for given in [
        "PASSED_MARKER=passed-value",
        "LC_MESSAGES=C",
        "EDGERUNNER_JOB_ID=job_double",
    ] {
        assert!(
            env.iter().any(|line| line == given),
            "{given} missing:\n{all}"
        );
    }
    let workdir = env
        .iter()
        .find_map(|line| line.strip_prefix("EDGERUNNER_WORKDIR="))
        .expect("EDGERUNNER_WORKDIR");
    let tmp = env
        .iter()
        .find_map(|line| line.strip_prefix("tmp="))
        .expect("TMPDIR existed");
    assert_eq!(tmp, format!("{workdir}/tmp"), "TMPDIR is the job's own");
    let _ = std::fs::remove_dir_all(&dir);

    // The control: without --pass-env the marker stays with the runner.
    let dir = scratch();
    let env = job_env_after(&job_double((200, genuine)), &dir, &secrets, &[]);
    assert!(!env.join("\n").contains("passed-value"), "{env:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pass_env_refuses_a_runner_credential_with_a_usage_error_before_connecting() {
    let double = Double::with_claims(Vec::new());
    let dir = scratch();
    for (args, names) in [
        (
            vec!["--pass-env", "EVALGATE_RUNNER_BOOTSTRAP_TOKEN"],
            "EVALGATE_RUNNER_BOOTSTRAP_TOKEN",
        ),
        (
            vec!["--pass-env", "EDGERUNNER_EVIDENCE_API_KEY"],
            "EDGERUNNER_EVIDENCE_API_KEY",
        ),
        (vec!["--pass-env", "not-a-name"], "not-a-name"),
    ] {
        let output = runner_start(&double, &dir, "true")
            .args(&args)
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{stderr}");
        assert!(!stderr.contains("erb_double"), "{stderr}");
    }
    // Past the bound, with the config file's names counted too.
    let config = dir.join("runner.json");
    let names: Vec<String> = (0..40).map(|i| format!("FILE_{i}")).collect();
    std::fs::write(&config, json!({ "passEnv": names }).to_string()).expect("config");
    let mut flags = Vec::new();
    for i in 0..25 {
        flags.push("--pass-env".to_owned());
        flags.push(format!("FLAG_{i}"));
    }
    let output = runner_start(&double, &dir, "true")
        .arg("--config")
        .arg(&config)
        .args(&flags)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("65 variables"), "{stderr}");
    assert!(
        double.received().is_empty(),
        "nothing was sent: {:?}",
        double.paths()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_config_file_inside_the_directory_jobs_run_in_is_refused() {
    let double = Double::with_claims(Vec::new());
    let dir = scratch();
    let config = dir.join("xdg").join("edgerunner").join("runner.json");
    std::fs::create_dir_all(config.parent().expect("parent")).expect("dirs");
    std::fs::write(&config, json!({ "passEnv": ["LANG"] }).to_string()).expect("config");
    let output = runner_start(&double, &dir, "true")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .current_dir(&dir)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("config file") && stderr.contains("runner.json"),
        "{stderr}"
    );
    assert!(double.received().is_empty(), "nothing was sent");
    // The control: the same runner started elsewhere runs.
    let elsewhere = dir.join("project");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    let output = runner_start(&double, &dir, "true")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .current_dir(&elsewhere)
        .output()
        .expect("edgerunner runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A job cannot read the runner's environment from `/proc/<runner>/environ` (nor attach to
/// it): the runner is not dumpable. Runner and job are one unprivileged user here (a root
/// test runs the runner as `nobody`, since root may read any process).
#[test]
fn a_job_cannot_read_the_runners_environment_through_proc() {
    use std::os::unix::process::CommandExt;

    let genuine = genuine_artifact();
    let double = job_double((200, genuine));
    let dir = scratch();
    // The job's parent is its launcher (which holds only the job's own environment); the
    // launcher's parent is the runner.
    let command = "runner=$(cut -d' ' -f4 /proc/$PPID/stat); echo \"runner=$runner\"; \
                   tr '\\0' '\\n' < /proc/$$/environ | grep -q EDGERUNNER_JOB_ID && echo own-environ-read; \
                   tr '\\0' '\\n' < /proc/$runner/environ 2>/dev/null || echo runner-environ-refused";
    let mut start = runner_start(&double, &dir, command);
    if nix::unistd::geteuid().is_root() {
        let nobody = nix::unistd::User::from_name("nobody")
            .expect("passwd")
            .expect("a user nobody");
        std::fs::create_dir_all(dir.join("work")).expect("work");
        std::os::unix::fs::chown(dir.join("work"), Some(nobody.uid.as_raw()), None).expect("chown");
        start.uid(nobody.uid.as_raw()).gid(nobody.gid.as_raw());
    }
    let child = start
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("edgerunner starts");
    let runner_pid = child.id();
    let output = child.wait_with_output().expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(&double)[0]["status"], "succeeded", "{stderr}");
    let printed = printed_lines(&double);
    assert!(
        !printed.iter().any(|l| l.contains("erb_double")),
        "{printed:?}"
    );
    // The controls: /proc is there to read, and the process asked about is the runner.
    assert!(
        printed.contains(&format!("runner={runner_pid}")),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l == "own-environ-read"),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l == "runner-environ-refused"),
        "{printed:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--run-as` is for a runner running as root: there it runs the command as that user with
/// the job's directory handed over; anywhere else it is refused before anything is sent.
#[test]
fn run_as_runs_the_command_as_another_user_only_for_a_root_runner() {
    let genuine = genuine_artifact();
    let double = job_double((200, genuine));
    let dir = scratch();
    let command = "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME\"; \
                   test -O \"$EDGERUNNER_WORKDIR\" && test -O \"$TMPDIR\" && test -O \"$HOME\" && echo owns-workdir; \
                   cat \"$EDGERUNNER_INPUT\" > /dev/null && echo reads-input; \
                   ls \"$EDGERUNNER_WORKDIR/..\" 2>/dev/null || echo cannot-list-runner-dir";
    let root = nix::unistd::geteuid().is_root();
    if !root {
        let output = runner_start(&double, &dir, command)
            .args(["--run-as", "nobody"])
            .output()
            .expect("edgerunner runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("root"), "{stderr}");
        assert!(double.received().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let refused = runner_start(&double, &dir, command)
        .args(["--run-as", "root"])
        .output()
        .expect("edgerunner runs");
    assert_eq!(
        refused.status.code(),
        Some(2),
        "running jobs as root is no separation"
    );
    // The work directory's parent and the start directory must be reachable by the user.
    std::fs::create_dir_all(dir.join("work")).expect("work");
    for path in [&dir, &dir.join("work")] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let output = runner_start(&double, &dir, command)
        .args(["--run-as", "nobody"])
        .current_dir(&dir)
        .output()
        .expect("edgerunner runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(completions(&double)[0]["status"], "succeeded", "{stderr}");
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("passwd")
        .expect("a user nobody");
    let printed = printed_lines(&double);
    let gid = nobody.gid.as_raw();
    // Its HOME is the job's own, not the user's (shared by every job run as that user).
    assert!(
        printed.iter().any(|line| line
            .starts_with(&format!("uid={} gid={gid} groups={gid} home=", nobody.uid))
            && line.ends_with("/home")
            && line.contains("/job_double-")),
        "{printed:?}"
    );
    for line in ["owns-workdir", "reads-input", "cannot-list-runner-dir"] {
        assert!(printed.iter().any(|l| l == line), "{line}: {printed:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
