//! A job of the runner's own user may kill its launcher (`kill -9 $PPID`); what it leaves
//! behind then comes to the runner, which ends it. Its own test binary: this process becomes
//! a subreaper that ends every child that is not a launcher.

use std::path::PathBuf;
use std::time::Duration;

use edgerunner::exec::{self, ExecSpec};
use edgerunner::isolation::{self, Confinement};
use edgerunner::stream::LogLine;
use tokio::sync::{mpsc, watch};

mod common;
use common::running;

#[tokio::test]
async fn what_a_job_leaves_after_killing_its_launcher_still_ends() {
    isolation::adopt_strays().expect("a subreaper");
    let seconds = common::unique_seconds(8_000_000);
    let command = format!(
        "setsid sleep {seconds} </dev/null >/dev/null 2>&1 & \
         for _ in $(seq 100); do pgrep -fx 'sleep {seconds}' >/dev/null && break; sleep 0.05; done; \
         echo \"left $(pgrep -cfx 'sleep {seconds}')\"; kill -9 $PPID; exec sleep {seconds}"
    );
    let spec = ExecSpec {
        command,
        env: vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())],
        current_dir: std::env::temp_dir(),
        wall_limit: Some(Duration::from_secs(60)),
        grace: Duration::from_millis(300),
        run_as: None,
        launcher: Some(PathBuf::from(env!("CARGO_BIN_EXE_edgerunner"))),
        confinement: Confinement::default(),
    };
    let (tx, mut rx) = mpsc::channel::<LogLine>(64);
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(line) = rx.recv().await {
            all.push(line.line);
        }
        all
    });
    let (_keep, stop) = watch::channel(None);
    let outcome = exec::run(&spec, tx, stop).await.expect("runs");
    let lines = collector.await.expect("collector");
    let left = running(&seconds);
    for pid in &left {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert_eq!(
        outcome.signal,
        Some(9),
        "the launcher was killed: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "left 1"),
        "the control: {lines:?}"
    );
    assert!(left.is_empty(), "outlived its killed launcher: {left:?}");
}
