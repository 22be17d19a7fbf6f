//! A job cannot reach past its own run on the runner host. The runner starts the real CLI the
//! README's way on a job written as an attacker would write it, and then looks at the host (its
//! process table) or at the job's stored stream for what the job managed to do.
//!
//! - Processes a job leaves behind, even in a session of their own or double-forked, end with
//!   the job; where the host lets the runner create cgroups, each job runs in one of its own,
//!   removed when it ends.
//! - A job has no controlling terminal, even when the runner has one.
//! - A job whose requirements say `network: deny_all` cannot open a connection, and the
//!   runner's record says what it enforces.
//! - A job past its `memoryMb` fails, and its exited event says which limit it ran into, even
//!   when it says nothing itself, where its cgroup holds the limit.
//! - Whoever may write above the runner's work directory cannot make the runner create, fill or
//!   hand over a job directory somewhere else: a swapped-in link is never followed, and a
//!   group- or world-writable ancestor is refused before any job is taken.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use edgerunner_e2e::jobs::*;
use edgerunner_e2e::terminal::terminal_args;
use edgerunner_e2e::*;
use serde_json::{json, Value};

use super::job_env::{
    assert_line, clean_command, run_runner, runner_start_args, shown, stored_stream, succeeded,
};

/// One organization, a release, a runner's registration and one queued job with
/// `requirements`: what the tests below each need. Returns the org, the runner's environment
/// and the job's id.
async fn one_job(name: &str, requirements: &Value) -> (Org, Vec<(&'static str, String)>, String) {
    let org = bootstrap_org(name);
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let (runner, token) = register_runner(&org.admin_key, &registration(name)).await;
    let run_id = evaluation_run(&org.admin_key).await;
    let enqueued = enqueue_job(
        &org.admin_key,
        &release,
        &json!({"evaluationRunId": run_id.to_json(), "task": name}),
        requirements,
    )
    .await;
    let env = vec![
        ("EVALGATE_BASE_URL", base_url()),
        ("EVALGATE_RUNNER_ID", id_of(&runner)),
        ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", token),
    ];
    (org, env, id_of(&enqueued))
}

fn borrowed<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// A number no other process on this host has as its `sleep` argument.
fn unique_seconds() -> u64 {
    let text = unique("sleep");
    let digits: u64 = text.bytes().fold(0u64, |acc, b| {
        acc.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    5_000_000 + digits % 1_000_000
}

/// The pids whose whole command line is exactly `argv` (zombies have none, and do not count).
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted))
        .collect()
}

/// The job's `exited` event, as stored in its stream.
async fn exited_event(admin_key: &str, job_id: &str) -> Value {
    let (text, _) = stored_stream(admin_key, job_id).await;
    // Each page is a JSON object on its own; the event is in one chunk's payload.
    let mut found = None;
    for page in serde_json::Deserializer::from_str(&text).into_iter::<Value>() {
        let page = page.expect("a stored page is JSON");
        for chunk in page["chunks"].as_array().into_iter().flatten() {
            if chunk["payload"]["event"] == "exited" {
                found = Some(chunk["payload"].clone());
            }
        }
    }
    found.unwrap_or_else(|| panic!("no exited event in the stream of {job_id}: {text}"))
}

#[tokio::test]
async fn processes_a_job_leaves_behind_in_a_new_session_or_double_forked_end_with_it() {
    let (org, env, job_id) = one_job("attack-leftovers", &requirements("prompt")).await;
    let (alone, orphan) = (unique_seconds(), unique_seconds() + 1);
    let (alone, orphan) = (alone.to_string(), orphan.to_string());
    // One leaves the job's process group and session (setsid); the other is double-forked
    // (its parent shell exits at once) as well. Both then say they are running.
    let command = format!(
        "setsid sleep {alone} </dev/null >/dev/null 2>&1 & \
         sh -c 'setsid sleep {orphan} </dev/null >/dev/null 2>&1 &'; \
         for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do \
           pgrep -fx 'sleep {alone}' >/dev/null && pgrep -fx 'sleep {orphan}' >/dev/null && break; \
           sleep 0.1; \
         done; \
         pgrep -fx 'sleep {alone}' >/dev/null && echo alone-running; \
         pgrep -fx 'sleep {orphan}' >/dev/null && echo orphan-running; true"
    );
    let scratch = Scratch::new("leftovers");
    let project = scratch.dir("project");
    let output = run_runner(&scratch, &project, &["--exec", &command], &borrowed(&env)).await;
    let left: Vec<i32> = [&alone, &orphan]
        .iter()
        .flat_map(|seconds| processes_running(&["sleep", seconds]))
        .collect();
    // Never leave them running for the next test, whatever this one finds.
    for pid in &left {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    // The control: both were running while the job was.
    assert_line(&stdout, "alone-running");
    assert_line(&stdout, "orphan-running");
    assert!(
        left.is_empty(),
        "processes of the finished job are still running: {left:?}"
    );
}

fn under_a_terminal(scratch: &Scratch, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = clean_command("python3", scratch, dir, &terminal_args(args), env);
    command.stdout(Stdio::piped());
    command
}

const OPEN_TTY: &str =
    "if (exec 3</dev/tty) 2>/dev/null; then echo tty-opened; else echo no-tty; fi";

#[tokio::test]
async fn a_job_has_no_controlling_terminal_even_when_the_runner_has_one() {
    let (org, env, job_id) = one_job("attack-tty", &requirements("prompt")).await;
    let scratch = Scratch::new("tty");
    let project = scratch.dir("project");
    // The control: what runs under the wrapper has a terminal to open.
    let control = under_a_terminal(&scratch, &project, &["sh", "-c", OPEN_TTY], &[])
        .output()
        .expect("python3 runs");
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("tty-opened"),
        "{}",
        shown(&control)
    );

    let bin = required_env("EDGERUNNER_BIN");
    let work = scratch.path("work");
    let mut args = vec![bin.as_str()];
    args.extend(runner_start_args(&work, &["--exec", OPEN_TTY]));
    let child = under_a_terminal(&scratch, &project, &args, &borrowed(&env))
        .spawn()
        .expect("python3 runs");
    let output: Output = output_within(child, Duration::from_secs(90), "the runner").await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_line(&stdout, "no-tty");
}

/// Connects to the server's host and port; prints `connected`, or `refused: <error>`.
fn connect_script() -> String {
    let base = base_url();
    let authority = base
        .split("://")
        .nth(1)
        .expect("a URL")
        .split('/')
        .next()
        .expect("an authority");
    let (host, port) = authority.rsplit_once(':').expect("a port");
    format!(
        "python3 -c \"import socket\ntry:\n    socket.create_connection(('{host}', {port}), 5)\n    \
         print('connected')\nexcept OSError as e:\n    print('refused:', e)\""
    )
}

#[tokio::test]
async fn a_deny_all_job_cannot_open_a_connection_to_the_server() {
    let wanted = requirements("prompt");
    assert_eq!(wanted["network"]["mode"], "deny_all");
    let (org, env, job_id) = one_job("attack-network", &wanted).await;
    let script = connect_script();
    // The control: from the test's own process, the same script reaches the server.
    let control = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("sh runs");
    assert_eq!(
        String::from_utf8_lossy(&control.stdout).trim(),
        "connected",
        "{}",
        shown(&control)
    );
    let scratch = Scratch::new("network");
    let project = scratch.dir("project");
    let output = run_runner(&scratch, &project, &["--exec", &script], &borrowed(&env)).await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert!(
        stdout.iter().any(|line| line.starts_with("refused:")),
        "a deny_all job reached the server: {stdout:#?}"
    );
    assert!(
        !stdout.iter().any(|line| line == "connected"),
        "{stdout:#?}"
    );
    // What the runner enforces is in its record, for an admin to read.
    let enforced = recorded_isolation(&org, &env).await;
    assert_eq!(enforced["networkDenyAll"], true, "{enforced}");
    assert_eq!(enforced["processSweep"], true, "{enforced}");
    assert_eq!(enforced["session"], true, "{enforced}");
}

/// What the runner recorded it enforces on this host (its file `isolation.json`).
async fn recorded_isolation(org: &Org, env: &[(&'static str, String)]) -> Value {
    let (_, runner_id) = env
        .iter()
        .find(|(name, _)| *name == "EVALGATE_RUNNER_ID")
        .expect("the runner's id");
    let recorded = get(
        &format!("/api/remote-runners/{runner_id}/files/isolation.json"),
        &org.admin_key,
    )
    .await;
    assert_eq!(recorded.status, 200, "{}", recorded.text);
    serde_json::from_str(&recorded.text).expect("JSON")
}

/// This process's directory in the unified (v2) cgroup hierarchy, when this host has one
/// mounted where the kernel's own files say.
fn own_unified_cgroup() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let point = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        (after.starts_with("cgroup2 ") && fields.get(3) == Some(&"/")).then(|| fields[4].to_owned())
    })?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroup.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(Path::new(&point).join(path.trim_start_matches('/')))
}

/// Whether this test process may create a cgroup below its own (as the runner it starts,
/// the same user, would): tried with a throwaway one.
fn may_create_cgroups() -> Option<std::path::PathBuf> {
    let own = own_unified_cgroup()?;
    let probe = own.join(unique("e2e-cgroup-probe"));
    std::fs::create_dir(&probe).ok()?;
    std::fs::remove_dir(&probe).expect("an empty cgroup is removed");
    Some(own)
}

/// Whether a cgroup made below this process's own would have a memory controller: the
/// unified hierarchy hands it down, or a v1 `memory` hierarchy is mounted.
fn memory_controller_for_children() -> bool {
    let handed_down = own_unified_cgroup()
        .and_then(|own| std::fs::read_to_string(own.join("cgroup.subtree_control")).ok())
        .is_some_and(|text| text.split_whitespace().any(|c| c == "memory"));
    let v1 = std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|text| {
        text.lines().any(|line| {
            line.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "memory"))
        })
    });
    handed_down || v1
}

#[tokio::test]
async fn a_job_runs_in_a_cgroup_of_its_own_that_is_gone_when_it_ends() {
    let (org, env, job_id) = one_job("attack-cgroup", &requirements("prompt")).await;
    let scratch = Scratch::new("cgroup");
    let project = scratch.dir("project");
    let output = run_runner(
        &scratch,
        &project,
        &["--exec", "cat /proc/self/cgroup"],
        &borrowed(&env),
    )
    .await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let enforced = recorded_isolation(&org, &env).await;
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    let Some(own) = may_create_cgroups() else {
        // Where no cgroup may be made, the runner says so and the subreaper alone holds.
        assert_eq!(enforced["processContainment"], "subreaper", "{enforced}");
        return;
    };
    assert_eq!(enforced["processContainment"], "cgroup", "{enforced}");
    let unified = stdout
        .iter()
        .find_map(|line| line.strip_prefix("0::"))
        .unwrap_or_else(|| panic!("the job's cgroups: {stdout:#?}"));
    let (parent, name) = unified.rsplit_once('/').expect("a cgroup path");
    assert!(
        name.starts_with("edgerunner-job-"),
        "the job ran in {unified}"
    );
    // A child of the runner's cgroup (this test's, which started the runner), gone with the
    // job.
    let ours = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroups");
    let ours = ours
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .expect("unified");
    assert_eq!(
        parent.trim_end_matches('/'),
        ours.trim_end_matches('/'),
        "{unified}"
    );
    let dir = own.join(name);
    assert!(!dir.exists(), "{} outlived its job", dir.display());
}

fn requirements_with_memory(memory_mb: u64) -> Value {
    let mut wanted = requirements("prompt");
    wanted["limits"] = limits(60, memory_mb, 120, 1_048_576);
    wanted
}

#[tokio::test]
async fn a_job_past_its_memory_limit_fails_and_its_exited_event_says_why() {
    let (org, env, job_id) = one_job("attack-memory", &requirements_with_memory(64)).await;
    let scratch = Scratch::new("memory");
    let project = scratch.dir("project");
    let allocate = "python3 -c 'b = bytearray(300 * 1024 * 1024); print(\"allocated\", len(b))'";
    let output = run_runner(&scratch, &project, &["--exec", allocate], &borrowed(&env)).await;
    assert!(output.status.success(), "{}", shown(&output));
    let done = job(&org.admin_key, &job_id).await;
    assert_eq!(done["state"], "failed", "{done}\n{}", shown(&output));
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert!(
        !stdout.iter().any(|line| line.starts_with("allocated")),
        "{stdout:#?}"
    );
    let exited = exited_event(&org.admin_key, &job_id).await;
    assert_eq!(exited["limit"], "memoryMb", "{exited}");

    // A job that says nothing of it: where its cgroup holds the limit, the kernel's count of
    // what it killed tells; under an rlimit alone, a silent failure is any failure.
    let silent = "python3 -c 'b = bytearray(300 * 1024 * 1024)' 2>/dev/null";
    let (org, env, job_id) = one_job("attack-memory-silent", &requirements_with_memory(64)).await;
    let output = run_runner(&scratch, &project, &["--exec", silent], &borrowed(&env)).await;
    assert!(output.status.success(), "{}", shown(&output));
    let done = job(&org.admin_key, &job_id).await;
    assert_eq!(done["state"], "failed", "{done}\n{}", shown(&output));
    let exited = exited_event(&org.admin_key, &job_id).await;
    let enforced = recorded_isolation(&org, &env).await;
    match enforced["memoryLimit"].as_str() {
        Some("cgroup") => assert_eq!(exited["limit"], "memoryMb", "{exited}"),
        Some("rlimit") => assert!(exited["limit"].is_null(), "{exited}"),
        other => panic!("memoryLimit {other:?} in {enforced}"),
    }
    // Where the test may make cgroups, the runner's cgroup holds the job's memory as well
    // when the host's memory controller is there for it (v2's handed down, or v1's).
    if may_create_cgroups().is_some() && memory_controller_for_children() {
        assert_eq!(enforced["memoryLimit"], "cgroup", "{enforced}");
    }

    // The control: under the same limit, an allocation it allows succeeds.
    let small = "python3 -c 'b = bytearray(16 * 1024 * 1024); print(\"allocated\", len(b))'";
    let (org, env, job_id) = one_job("attack-memory-small", &requirements_with_memory(64)).await;
    let output = run_runner(&scratch, &project, &["--exec", small], &borrowed(&env)).await;
    assert!(output.status.success(), "{}", shown(&output));
    succeeded(&org, &job_id, &output).await;
    let (_, stdout) = stored_stream(&org.admin_key, &job_id).await;
    assert_line(&stdout, "allocated 16777216");
}

/// Each job of the swap test runs this: it says how many entries the victim directory holds,
/// and the first one renames the runner's directory away and plants a link to the victim in
/// its place, as a local user who may write the work directory's parent could.
fn swap_script(victim: &Path) -> String {
    format!(
        "v='{}'; d=$(dirname \"$EDGERUNNER_WORKDIR\"); \
         echo \"victim holds $(ls -A \"$v\" | wc -l)\"; \
         if [ ! -L \"$d\" ]; then mv \"$d\" \"$d.moved\" && ln -s \"$v\" \"$d\" && echo swapped; fi",
        victim.display()
    )
}

#[tokio::test]
async fn a_runner_directory_swapped_for_a_link_sends_no_later_job_through_it() {
    let (org, env, first) = one_job("attack-swap", &requirements("prompt")).await;
    let release = release(&org.admin_key, "prompt", prompt_content(), &["staging"]).await;
    let run_id = evaluation_run(&org.admin_key).await;
    let input = json!({"evaluationRunId": run_id.to_json(), "task": "second"});
    let second =
        id_of(&enqueue_job(&org.admin_key, &release, &input, &requirements("prompt")).await);
    let scratch = Scratch::new("swap");
    let project = scratch.dir("project");
    let victim = scratch.dir("victim");
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let before = std::fs::metadata(&victim).expect("the victim");

    let script = swap_script(&victim);
    let output = run_runner(&scratch, &project, &["--exec", &script], &borrowed(&env)).await;
    assert!(output.status.success(), "{}", shown(&output));
    let mut swapped = 0;
    for job_id in [&first, &second] {
        succeeded(&org, job_id, &output).await;
        let (_, stdout) = stored_stream(&org.admin_key, job_id).await;
        // While each job ran, nothing of the runner's was in the victim.
        assert_line(&stdout, "victim holds 0");
        swapped += stdout.iter().filter(|line| *line == "swapped").count();
    }
    assert_eq!(swapped, 1, "the first job planted the link");
    let after = std::fs::metadata(&victim).expect("the victim");
    assert_eq!(
        std::fs::read_dir(&victim).expect("readable").count(),
        0,
        "nothing was made in the link's target"
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode()),
        "the link's target kept its owner and mode"
    );
}

#[tokio::test]
async fn a_work_directory_below_a_group_writable_one_is_refused_before_any_job() {
    use std::os::unix::fs::PermissionsExt;
    let (org, env, job_id) = one_job("attack-shared-parent", &requirements("prompt")).await;
    let scratch = Scratch::new("shared-parent");
    let project = scratch.dir("project");
    let shared = scratch.dir("shared");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).expect("chmod");
    let work = shared.join("work");
    let args = runner_start_args(&work, &["--exec", "echo ran"]);
    let child = super::job_env::edgerunner(&scratch, &project, &args, &borrowed(&env))
        .spawn()
        .expect("edgerunner starts");
    let refused = output_within(child, Duration::from_secs(60), "the runner").await;
    assert!(!refused.status.success(), "{}", shown(&refused));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("writable by other users"), "{said}");
    assert!(said.contains(shared.to_str().expect("UTF-8")), "{said}");
    assert!(
        !work.exists(),
        "nothing was made below the shared directory"
    );
    let untouched = job(&org.admin_key, &job_id).await;
    assert_eq!(untouched["state"], "queued", "{untouched}");

    // The control: the same directory without group write runs the job.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let child = super::job_env::edgerunner(&scratch, &project, &args, &borrowed(&env))
        .spawn()
        .expect("edgerunner starts");
    let ran = output_within(child, Duration::from_secs(90), "the runner").await;
    assert!(ran.status.success(), "{}", shown(&ran));
    succeeded(&org, &job_id, &ran).await;
}
