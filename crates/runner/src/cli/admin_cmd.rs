//! `edgerunner admin …`: the REST operations an admin uses daily. `--json` prints the server's
//! answer as is, for scripts; otherwise a short rendering for a person.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::{json_argument, print_json, CliError};
use crate::admin::AdminClient;
use crate::http::Http;

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The control plane's URL
    #[arg(long, env = "EVALGATE_BASE_URL", global = true)]
    pub server: Option<String>,
    /// An API key (erk_…); prefer the environment variable
    #[arg(
        long,
        env = "EDGERUNNER_API_KEY",
        hide_env_values = true,
        global = true
    )]
    pub api_key: Option<String>,
    /// Print the server's JSON answer
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Register, list, approve, drain, activate, revoke and rotate runners
    #[command(subcommand)]
    Runners(RunnersCommand),
    /// Enqueue, list, show and cancel jobs; fetch a job's custody bundle
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Run one bounded recovery pass over this organization's expired leases
    Reap {
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Create evaluation runs for completions to name
    #[command(subcommand)]
    Evidence(EvidenceCommand),
}

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// List the organization's runners
    List,
    /// Show one runner
    Show { id: String },
    /// Register a runner (bootstrap-token model); prints its one-time bootstrap token
    Register(RegisterArgs),
    /// Approve a key-pair runner after comparing its fingerprint
    Approve(ApproveArgs),
    /// Stop giving a runner new work; its running jobs finish
    Drain(StatusArgs),
    /// Reactivate a draining or lost runner
    Activate(StatusArgs),
    /// Revoke a runner for good (and every credential it holds)
    Revoke(StatusArgs),
    /// Replace a runner's bootstrap token (the old one and its sessions stop working)
    Rotate { id: String },
    /// A runner's audit events
    Events { id: String },
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    pub id: String,
    /// The fingerprint you compared with the runner's own print-out (`SHA256:…`)
    #[arg(long)]
    pub fingerprint: String,
    /// Recorded in the audit trail
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    pub id: String,
    /// Recorded in the audit trail
    #[arg(long)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    #[arg(long)]
    pub name: String,
    /// Stable, unique in the organization
    #[arg(long)]
    pub runner_key: String,
    /// The whole capability document (JSON, @FILE or -); overrides the flags below
    #[arg(long)]
    pub capabilities: Option<String>,
    #[arg(long = "execution-kind", value_name = "KIND")]
    pub execution_kinds: Vec<String>,
    #[arg(long = "runtime", value_name = "RUNTIME")]
    pub runtimes: Vec<String>,
    #[arg(long)]
    pub max_concurrent_jobs: Option<u32>,
    /// Operator tags for routing (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
    /// Make the bootstrap token expire after this many seconds
    #[arg(long)]
    pub bootstrap_token_ttl: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Enqueue a job for an exact release version
    Enqueue(EnqueueArgs),
    /// List jobs, newest first
    List {
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Show a job with its claims, events, stream and completions
    Show { id: String },
    /// Cancel a job (running jobs are asked to stop)
    Cancel {
        id: String,
        #[arg(long)]
        reason: String,
    },
    /// Fetch a job's custody bundle (for `edgerunner verify`)
    Bundle {
        id: String,
        /// Write it here instead of stdout
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Repeating a key with the same intent returns the original job
    #[arg(long)]
    pub idempotency_key: String,
    /// The subject's kind (prompt, scorer, tool, workflow, agent)
    #[arg(long)]
    pub kind: String,
    /// The release artifact id
    #[arg(long)]
    pub artifact: String,
    /// The exact version id
    #[arg(long)]
    pub version: u64,
    /// dev, staging or prod
    #[arg(long)]
    pub environment: String,
    /// The input snapshot (JSON, @FILE or -)
    #[arg(long)]
    pub input: String,
    /// The requirements (JSON, @FILE or -)
    #[arg(long)]
    pub requirements: String,
}

#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Create an evaluation run; prints its id
    CreateRun {
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        evaluation_id: Option<String>,
    },
}

pub async fn run(args: AdminArgs) -> Result<ExitCode, CliError> {
    let server = args.server.clone().ok_or_else(|| {
        CliError::Input("no server: pass --server URL or set EVALGATE_BASE_URL".into())
    })?;
    let admin = AdminClient::new(Http::new(&server)?, args.api_key.as_deref().unwrap_or(""))?;
    let json = args.json;
    let show = |value: &Value, render: &dyn Fn(&Value) -> String| -> Result<ExitCode, CliError> {
        if json {
            print_json(value)?;
        } else {
            println!("{}", render(value));
        }
        Ok(ExitCode::SUCCESS)
    };
    match args.command {
        AdminCommand::Runners(command) => match command {
            RunnersCommand::List => show(&admin.list_runners().await?, &render_runners),
            RunnersCommand::Show { id } => show(&admin.runner(&id).await?, &render_runner),
            RunnersCommand::Register(register) => {
                let body = registration(&register)?;
                let answer = admin.register_runner(&body).await?;
                show(&answer, &|answer| render_token(answer, &server))
            }
            RunnersCommand::Approve(approve) => {
                let answer = admin
                    .approve_runner(&approve.id, &approve.fingerprint, &approve.reason)
                    .await?;
                show(&answer, &render_runner)
            }
            RunnersCommand::Activate(status) => {
                let answer = admin
                    .set_runner_status(&status.id, "active", &status.reason)
                    .await?;
                show(&answer, &render_runner)
            }
            RunnersCommand::Drain(status) => {
                let answer = admin
                    .set_runner_status(&status.id, "draining", &status.reason)
                    .await?;
                show(&answer, &render_runner)
            }
            RunnersCommand::Revoke(status) => {
                let answer = admin
                    .set_runner_status(&status.id, "revoked", &status.reason)
                    .await?;
                show(&answer, &render_runner)
            }
            RunnersCommand::Rotate { id } => {
                let answer = admin.rotate(&id).await?;
                show(&answer, &|answer| render_token(answer, &server))
            }
            RunnersCommand::Events { id } => show(&admin.runner_events(&id).await?, &render_events),
        },
        AdminCommand::Jobs(command) => match command {
            JobsCommand::Enqueue(enqueue) => {
                let body = json!({
                    "idempotencyKey": enqueue.idempotency_key,
                    "subject": {
                        "kind": enqueue.kind,
                        "artifactId": enqueue.artifact,
                        "versionId": enqueue.version,
                        "environment": enqueue.environment,
                    },
                    "input": json_argument(&enqueue.input, "--input")?,
                    "requirements": json_argument(&enqueue.requirements, "--requirements")?,
                });
                show(&admin.enqueue(&body).await?, &render_job)
            }
            JobsCommand::List { limit } => show(&admin.list_jobs(limit).await?, &render_jobs),
            JobsCommand::Show { id } => show(&admin.job(&id).await?, &render_job),
            JobsCommand::Cancel { id, reason } => {
                show(&admin.cancel_job(&id, &reason).await?, &render_job)
            }
            JobsCommand::Bundle { id, output } => {
                let bundle = admin.bundle(&id).await?;
                match output {
                    Some(path) => {
                        let text = serde_json::to_string_pretty(&bundle)
                            .map_err(|error| CliError::Output(error.to_string()))?;
                        std::fs::write(&path, format!("{text}\n")).map_err(|error| {
                            CliError::Output(format!("{}: {error}", path.display()))
                        })?;
                        if !json {
                            println!("bundle of job {id} written to {}", path.display());
                        }
                        Ok(ExitCode::SUCCESS)
                    }
                    None => {
                        print_json(&bundle)?;
                        Ok(ExitCode::SUCCESS)
                    }
                }
            }
        },
        AdminCommand::Reap { limit } => show(&admin.reap(limit).await?, &|report| {
            format!(
                "examined {}, requeued {}, ended {}, unchanged {}, failed {}{}",
                report["examined"],
                report["requeued"],
                report["ended"],
                report["unchanged"],
                report["failed"],
                if report["more"].as_bool() == Some(true) {
                    "; more to do"
                } else {
                    ""
                }
            )
        }),
        AdminCommand::Evidence(EvidenceCommand::CreateRun {
            name,
            evaluation_id,
        }) => {
            let mut body = json!({});
            if let Some(name) = name {
                body["name"] = name.into();
            }
            if let Some(evaluation_id) = evaluation_id {
                body["evaluationId"] = evaluation_id.into();
            }
            show(&admin.create_evaluation_run(&body).await?, &|run| {
                text(run, "id")
            })
        }
    }
}

fn registration(args: &RegisterArgs) -> Result<Value, CliError> {
    let capabilities = match &args.capabilities {
        Some(text) => json_argument(text, "--capabilities")?,
        None => {
            if args.execution_kinds.is_empty() || args.runtimes.is_empty() {
                return Err(CliError::Input(
                    "say what the runner can run: --execution-kind KIND and --runtime RUNTIME \
                     (repeatable), or --capabilities JSON"
                        .into(),
                ));
            }
            json!({ "executionKinds": args.execution_kinds, "runtimes": args.runtimes })
        }
    };
    let mut body = json!({
        "name": args.name,
        "runnerKey": args.runner_key,
        "capabilities": capabilities,
    });
    if let Some(max) = args.max_concurrent_jobs {
        body["maxConcurrentJobs"] = max.into();
    }
    if !args.tags.is_empty() {
        body["tags"] = json!(args.tags);
    }
    if let Some(ttl) = args.bootstrap_token_ttl {
        body["bootstrapTokenTtlSeconds"] = ttl.into();
    }
    Ok(body)
}

fn text(value: &Value, key: &str) -> String {
    match &value[key] {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.iter().map(|h| (*h).to_owned()).collect())];
    out.extend(rows.into_iter().map(line));
    out.join("\n")
}

fn render_runners(answer: &Value) -> String {
    let runners = answer["runners"].as_array().cloned().unwrap_or_default();
    if runners.is_empty() {
        return "no runners".to_owned();
    }
    table(
        &[
            "ID",
            "NAME",
            "STATE",
            "MODEL",
            "ACTIVE",
            "LAST SEEN",
            "FINGERPRINT",
        ],
        runners
            .iter()
            .map(|r| {
                vec![
                    text(r, "id"),
                    text(r, "name"),
                    text(r, "state"),
                    text(r, "identityModel"),
                    format!(
                        "{}/{}",
                        text(r, "activeClaims"),
                        text(r, "maxConcurrentJobs")
                    ),
                    text(r, "lastSeenAt"),
                    text(r, "fingerprint"),
                ]
            })
            .collect(),
    )
}

fn render_runner(answer: &Value) -> String {
    let runner = if answer["runner"].is_object() {
        &answer["runner"]
    } else {
        answer
    };
    let mut lines = vec![format!(
        "runner {} ({}) — {}",
        text(runner, "id"),
        text(runner, "name"),
        text(runner, "state")
    )];
    for (label, key) in [
        ("identity", "identityModel"),
        ("runner key", "runnerKey"),
        ("fingerprint", "fingerprint"),
        ("key id", "keyId"),
        ("state reason", "stateReason"),
        ("capacity", "maxConcurrentJobs"),
        ("active claims", "activeClaims"),
        ("completed jobs", "completedJobs"),
        ("last seen", "lastSeenAt"),
        ("address", "address"),
    ] {
        if !runner[key].is_null() {
            lines.push(format!("{label:<15} {}", text(runner, key)));
        }
    }
    lines.join("\n")
}

fn render_token(answer: &Value, server: &str) -> String {
    let runner = &answer["runner"];
    format!(
        "runner {} ({}) — {}\nbootstrap token (shown once; store it in your secret manager):\n  {}\n\n\
         Configure the runner with:\n  EVALGATE_BASE_URL={server}\n  EVALGATE_RUNNER_ID={}\n  \
         EVALGATE_RUNNER_BOOTSTRAP_TOKEN={}\n  edgerunner runner start --exec '<command>'",
        text(runner, "id"),
        text(runner, "name"),
        text(runner, "state"),
        text(answer, "bootstrapToken"),
        text(runner, "id"),
        text(answer, "bootstrapToken"),
    )
}

fn render_events(answer: &Value) -> String {
    let events = answer["events"].as_array().cloned().unwrap_or_default();
    if events.is_empty() {
        return "no events".to_owned();
    }
    table(
        &["AT", "TYPE", "ACTOR", "REASON"],
        events
            .iter()
            .map(|e| {
                vec![
                    text(e, "at"),
                    text(e, "type"),
                    text(e, "actor"),
                    text(e, "reason"),
                ]
            })
            .collect(),
    )
}

fn render_jobs(answer: &Value) -> String {
    let jobs = answer["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        return "no jobs".to_owned();
    }
    table(
        &["ID", "STATE", "ATTEMPT", "KIND", "VERSION", "CREATED"],
        jobs.iter()
            .map(|j| {
                vec![
                    text(j, "id"),
                    text(j, "state"),
                    text(j, "dispatchAttempt"),
                    text(&j["subject"], "kind"),
                    text(&j["subject"], "versionId"),
                    text(j, "createdAt"),
                ]
            })
            .collect(),
    )
}

fn render_job(job: &Value) -> String {
    let mut lines = vec![format!(
        "job {} — {} (attempt {})",
        text(job, "id"),
        text(job, "state"),
        text(job, "dispatchAttempt")
    )];
    let subject = &job["subject"];
    lines.push(format!(
        "subject         {} {} version {} ({}) {}",
        text(subject, "kind"),
        text(subject, "artifactId"),
        text(subject, "versionId"),
        text(subject, "environment"),
        text(subject, "contentHash"),
    ));
    for (label, key) in [
        ("idempotency key", "idempotencyKey"),
        ("input hash", "inputHash"),
        ("active claim", "activeClaimId"),
        ("lease expires", "leaseExpiresAt"),
        ("cancel reason", "cancelReason"),
        ("created", "createdAt"),
        ("finished", "finishedAt"),
    ] {
        if !job[key].is_null() {
            lines.push(format!("{label:<15} {}", text(job, key)));
        }
    }
    if let Some(events) = job["events"].as_array() {
        lines.push(String::new());
        lines.push(table(
            &["AT", "EVENT", "ATTEMPT", "ACTOR", "REASON"],
            events
                .iter()
                .map(|e| {
                    vec![
                        text(e, "at"),
                        text(e, "type"),
                        text(e, "attempt"),
                        text(e, "actor"),
                        text(e, "reason"),
                    ]
                })
                .collect(),
        ));
    }
    if let Some(stream) = job["stream"].as_array() {
        lines.push(format!("\nstream: {} chunk(s)", stream.len()));
    }
    if let Some(completions) = job["completions"].as_array() {
        for completion in completions {
            lines.push(format!(
                "completion {} ({}): {} — {}",
                text(completion, "id"),
                text(completion, "status"),
                text(completion, "decision"),
                text(completion, "rationale"),
            ));
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let rendered = table(
            &["ID", "STATE"],
            vec![
                vec!["run_1".into(), "active".into()],
                vec!["r".into(), "lost".into()],
            ],
        );
        assert_eq!(rendered, "ID     STATE\nrun_1  active\nr      lost");
    }

    #[test]
    fn registration_needs_kinds_and_runtimes_or_a_document() {
        let args = RegisterArgs {
            name: "n".into(),
            runner_key: "k".into(),
            capabilities: None,
            execution_kinds: vec!["prompt".into()],
            runtimes: vec![],
            max_concurrent_jobs: None,
            tags: vec![],
            bootstrap_token_ttl: None,
        };
        assert!(registration(&args).is_err());
        let args = RegisterArgs {
            runtimes: vec!["python3.12".into()],
            max_concurrent_jobs: Some(2),
            tags: vec!["gpu".into()],
            ..args
        };
        assert_eq!(
            registration(&args).expect("a body"),
            json!({
                "name": "n", "runnerKey": "k",
                "capabilities": {"executionKinds": ["prompt"], "runtimes": ["python3.12"]},
                "maxConcurrentJobs": 2, "tags": ["gpu"],
            })
        );
    }
}
