//! A job's command run through the job launcher (`edgerunner __job-launcher`, the real binary):
//! what it leaves behind ends with it however it ends, and its limits hold. The attack suite
//! proves the same against a real server; these run in a second and cover the endings a
//! server cannot provoke on cue (wall time, cancellation).

use std::path::PathBuf;
use std::time::Duration;

use edgerunner::exec::{self, Ending, ExecOutcome, ExecSpec, StopRequest};
use edgerunner::isolation::Confinement;
use edgerunner::stream::LogLine;
use tokio::sync::{mpsc, watch};

mod common;
use common::running;

fn spec(command: &str) -> ExecSpec {
    ExecSpec {
        command: command.to_owned(),
        env: vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())],
        current_dir: std::env::temp_dir(),
        wall_limit: None,
        grace: Duration::from_millis(300),
        run_as: None,
        launcher: Some(PathBuf::from(env!("CARGO_BIN_EXE_edgerunner"))),
        confinement: Confinement::default(),
    }
}

async fn run(
    spec: ExecSpec,
    stop: watch::Receiver<Option<StopRequest>>,
) -> (ExecOutcome, Vec<String>) {
    let (tx, mut rx) = mpsc::channel::<LogLine>(64);
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(line) = rx.recv().await {
            all.push(line.line);
        }
        all
    });
    let outcome = exec::run(&spec, tx, stop).await.expect("runs");
    (outcome, collector.await.expect("collector"))
}

/// A `sleep` argument no other process on this host has.
fn unique_seconds() -> String {
    common::unique_seconds(7_000_000)
}

/// Leaves one `setsid` process and one double-forked one, says so, then runs `then`.
fn leave_two_behind(seconds: &str, then: &str) -> String {
    format!(
        "setsid sleep {seconds} </dev/null >/dev/null 2>&1 & \
         sh -c 'setsid sleep {seconds} </dev/null >/dev/null 2>&1 &'; \
         for _ in $(seq 50); do [ \"$(pgrep -cfx 'sleep {seconds}')\" = 2 ] && break; sleep 0.05; done; \
         echo \"left $(pgrep -cfx 'sleep {seconds}')\"; {then}"
    )
}

fn assert_swept(seconds: &str, lines: &[String]) {
    let left = running(seconds);
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(
        lines.iter().any(|l| l == "left 2"),
        "the control: {lines:?}"
    );
    assert!(left.is_empty(), "still running after the job: {left:?}");
}

#[tokio::test]
async fn what_a_job_leaves_behind_ends_when_it_exits() {
    let seconds = unique_seconds();
    let (_keep, stop) = watch::channel(None);
    let (outcome, lines) = run(spec(&leave_two_behind(&seconds, "exit 4")), stop).await;
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!(
        outcome.exit_code,
        Some(4),
        "the shell's own status: {lines:?}"
    );
    assert_swept(&seconds, &lines);
}

#[tokio::test]
async fn what_a_job_leaves_behind_ends_when_its_wall_time_is_up() {
    let seconds = unique_seconds();
    let (_keep, stop) = watch::channel(None);
    let mut timed = spec(&leave_two_behind(
        &seconds,
        "trap '' TERM; while :; do sleep 0.05; done",
    ));
    timed.wall_limit = Some(Duration::from_secs(2));
    let (outcome, lines) = run(timed, stop).await;
    assert_eq!(outcome.ending, Ending::WallTimeExceeded);
    assert!(outcome.killed, "it ignored SIGTERM");
    assert_eq!(outcome.signal, Some(9));
    assert_swept(&seconds, &lines);
}

#[tokio::test]
async fn what_a_job_leaves_behind_ends_when_it_is_cancelled() {
    let seconds = unique_seconds();
    let (stop_tx, stop) = watch::channel(None);
    let cancelled = spec(&leave_two_behind(&seconds, "echo ready; sleep 600"));
    let (lines_tx, mut lines_rx) = mpsc::channel::<LogLine>(64);
    let running_job = tokio::spawn(async move { exec::run(&cancelled, lines_tx, stop).await });
    let mut lines = Vec::new();
    // Bounded: the job says ready within its first second or two.
    for _ in 0..100 {
        match tokio::time::timeout(Duration::from_secs(10), lines_rx.recv()).await {
            Ok(Some(line)) => {
                let ready = line.line == "ready";
                lines.push(line.line);
                if ready {
                    break;
                }
            }
            _ => break,
        }
    }
    stop_tx
        .send(Some(StopRequest::Cancel { reason: None }))
        .expect("sent");
    let outcome = running_job.await.expect("joined").expect("ran");
    assert_eq!(
        outcome.ending,
        Ending::Stopped(StopRequest::Cancel { reason: None })
    );
    assert_eq!(outcome.signal, Some(15), "the shell took SIGTERM");
    assert_swept(&seconds, &lines);
}

#[tokio::test]
async fn a_job_in_its_own_session_has_no_terminal_and_a_fresh_group() {
    let (_keep, stop) = watch::channel(None);
    let (outcome, lines) = run(
        spec("ps -o sid=,pgid= -p $$; (exec 3</dev/tty) 2>&1 || echo no-tty"),
        stop,
    )
    .await;
    assert_eq!(outcome.exit_code, Some(0), "{lines:?}");
    assert!(lines.iter().any(|l| l == "no-tty"), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("No such device or address")),
        "ENXIO: {lines:?}"
    );
    let ids: Vec<&str> = lines[0].split_whitespace().collect();
    let own_session = nix::unistd::getsid(None).expect("sid").to_string();
    assert_eq!(ids.len(), 2, "{lines:?}");
    assert_eq!(
        ids[0], ids[1],
        "the session's leader leads its group: {lines:?}"
    );
    assert_ne!(ids[0], own_session, "not the runner's session");
}

#[tokio::test]
async fn a_job_past_its_memory_limit_fails_and_says_an_allocation_failed() {
    let (_keep, stop) = watch::channel(None);
    let mut limited = spec("head -c 300M /dev/zero | tail | wc -c; exit 1");
    limited.confinement.memory_mb = Some(64);
    let (outcome, lines) = run(limited, stop.clone()).await;
    assert_eq!(outcome.ending, Ending::Exited);
    assert_eq!(outcome.exit_code, Some(1), "{lines:?}");
    assert!(outcome.allocation_failed, "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("memory exhausted")),
        "{lines:?}"
    );

    // The control: without the limit the same pipeline goes through.
    let (outcome, lines) = run(spec("head -c 300M /dev/zero | tail | wc -c"), stop).await;
    assert_eq!(outcome.exit_code, Some(0), "{lines:?}");
    assert!(!outcome.allocation_failed);
}

#[tokio::test]
async fn a_job_past_its_cpu_time_is_killed_and_the_ending_says_so() {
    let (_keep, stop) = watch::channel(None);
    let mut spinning = spec("while :; do :; done");
    spinning.confinement.cpu_seconds = Some(1);
    spinning.wall_limit = Some(Duration::from_secs(30));
    let (outcome, _) = run(spinning, stop).await;
    assert_eq!(outcome.ending, Ending::CpuTimeExceeded);
    assert!(outcome.elapsed < Duration::from_secs(20));
}

#[tokio::test]
async fn a_deny_all_job_has_no_network_where_the_host_allows_a_namespace() {
    let launcher = PathBuf::from(env!("CARGO_BIN_EXE_edgerunner"));
    if !edgerunner::isolation::probe(&launcher).network_namespace {
        eprintln!("skipped: this host gives no network namespace (needs root or user namespaces)");
        return;
    }
    let (_keep, stop) = watch::channel(None);
    let mut denied = spec("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
    denied.confinement.deny_network = true;
    let (outcome, lines) = run(denied, stop.clone()).await;
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(lines, ["lo"], "only the loopback");
    let (_, lines) = run(spec("cat /proc/net/dev | tail -n +3 | wc -l"), stop).await;
    assert_ne!(
        lines,
        ["1"],
        "the control: the host has more than a loopback"
    );
}

/// The runner killed outright (no chance to stop its jobs): its launchers see it go and end
/// their jobs, leftovers included.
#[test]
fn a_job_ends_when_the_runner_that_started_it_dies() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let (left, shell) = (unique_seconds(), format!("{}1", unique_seconds()));
    let launcher = env!("CARGO_BIN_EXE_edgerunner");
    // A stand-in for the runner: it prints its pid, then launches a job that leaves a
    // process behind, says ready once it runs, and sleeps.
    let runner = format!(
        "echo $$; \"{launcher}\" __job-launcher -- sh -c \
         'setsid sleep {left} </dev/null >/dev/null 2>&1 & \
          for _ in $(seq 100); do pgrep -fx \"sleep {left}\" >/dev/null && break; sleep 0.05; done; \
          echo ready; exec sleep {shell}'"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&runner)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sh runs");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let pid: Option<i32> = lines
        .next()
        .and_then(Result::ok)
        .and_then(|line| line.trim().parse().ok());
    let ready = lines.next().and_then(Result::ok);
    // The job says ready just before it execs its sleep: wait (bounded, 5 s) until both run.
    let started = std::time::Instant::now() + Duration::from_secs(5);
    let mut running_before = (running(&left).len(), running(&shell).len());
    while running_before != (1, 1) && std::time::Instant::now() < started {
        std::thread::sleep(Duration::from_millis(20));
        running_before = (running(&left).len(), running(&shell).len());
    }

    // Killed whatever the controls found, so that nothing is left behind on failure.
    let stand_in = pid.map_or(nix::unistd::Pid::from_raw(child.id() as i32), |pid| {
        nix::unistd::Pid::from_raw(pid)
    });
    let _ = nix::sys::signal::kill(stand_in, nix::sys::signal::SIGKILL);
    let _ = child.wait();
    // Bounded: the kernel wakes the launcher at once; it has ten seconds.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && !(running(&left).is_empty() && running(&shell).is_empty())
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let remaining: Vec<i32> = running(&left).into_iter().chain(running(&shell)).collect();
    for pid in &remaining {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert_eq!(ready.as_deref(), Some("ready"));
    assert_eq!(
        running_before,
        (1, 1),
        "the control: the job and its leftover ran"
    );
    assert!(remaining.is_empty(), "outlived the runner: {remaining:?}");
}
