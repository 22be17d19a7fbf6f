//! `edgerunner admin …`: the REST operations an admin uses daily. `--json` prints the server's
//! answer as is, for scripts; otherwise a short rendering for a person.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use edgerunner_protocol::state::JobState;
use edgerunner_protocol::time::UnixMillis;
use serde_json::{json, Value};

use super::{admin_logs, json_argument, print_json, CliError};
use crate::admin::AdminClient;
use crate::clock::{Clock, SystemClock};
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
    /// Enqueue, list, show and cancel jobs; print their logs; fetch a custody bundle
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Create artifacts, add immutable versions, promote them, show and list them
    #[command(subcommand)]
    Releases(ReleasesCommand),
    /// Run one bounded recovery pass over this organization's expired leases
    Reap {
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Create evaluation runs for completions to name
    #[command(subcommand)]
    Evidence(EvidenceCommand),
    /// Who may enroll a key-pair runner: the policy, and enrollment tokens
    #[command(subcommand)]
    Enrollment(EnrollmentCommand),
}

#[derive(Debug, Subcommand)]
pub enum EnrollmentCommand {
    /// Show the organization's enrollment policy, or set it: open (anyone who knows the
    /// organization id), token (only with an enrollment token) or closed
    Policy {
        #[arg(value_parser = ["open", "token", "closed"])]
        policy: Option<String>,
    },
    /// Create, list and revoke enrollment tokens
    #[command(subcommand)]
    Tokens(TokensCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Issue a token; it is printed once (give it to the runner's `enroll --enrollment-token`)
    Create {
        /// What the token is for
        #[arg(long)]
        name: Option<String>,
        /// Enrollments it admits, 1-1000 [default: 1]
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        uses: Option<u16>,
        /// Lifetime: seconds, or a number with s, m, h or d (60s to 30d) [default: 24h]
        #[arg(long, value_parser = lifetime_seconds)]
        expires_in: Option<u32>,
    },
    /// List the tokens, newest first (never their secrets)
    List,
    /// Revoke a token (runners it already admitted are not touched)
    Revoke { id: String },
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
        /// Only jobs in this state (queued, claimed, running, cancel_requested, succeeded,
        /// failed, cancelled, lost)
        #[arg(long, value_parser = job_state)]
        state: Option<String>,
    },
    /// Show a job with its claims, events, stream and completions
    Show { id: String },
    /// Print a job's log lines (stdout to stdout, stderr to stderr) and trajectory events
    Logs(admin_logs::LogsArgs),
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
    /// The whole requirements document (JSON, @FILE or -); or build it with the flags below
    #[arg(long, conflicts_with_all = ["runtime", "cpu_seconds", "memory_mb", "wall_seconds", "output_bytes", "network"])]
    pub requirements: Option<String>,
    #[command(flatten)]
    pub flags: RequirementFlags,
}

/// Requirements as flags; the execution kind is the subject's `--kind`.
#[derive(Debug, Args, Default)]
pub struct RequirementFlags {
    /// The runtime the runner must offer (e.g. python3.12)
    #[arg(long)]
    pub runtime: Option<String>,
    /// limits.cpuSeconds
    #[arg(long)]
    pub cpu_seconds: Option<u64>,
    /// limits.memoryMb
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// limits.wallSeconds (the runner stops the job past it)
    #[arg(long)]
    pub wall_seconds: Option<u64>,
    /// limits.outputBytes (output past it is counted, not sent)
    #[arg(long)]
    pub output_bytes: Option<u64>,
    /// deny_all, or an origin the job may reach (https://host[:port]; repeatable) [default: deny_all]
    #[arg(long = "network", value_name = "deny_all|https://ORIGIN")]
    pub network: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ReleasesCommand {
    /// Create an artifact; prints its id (art_…)
    CreateArtifact {
        /// prompt, scorer, tool, workflow or agent
        #[arg(long)]
        kind: String,
        /// Unique among the organization's artifacts of that kind
        #[arg(long)]
        name: String,
    },
    /// Add an immutable version to an artifact; prints its id (its content hash on stderr)
    AddVersion {
        /// The artifact id (art_…)
        artifact: String,
        /// The content (JSON, @FILE or -); number lexemes are kept as written (they are hashed)
        #[arg(long)]
        content: String,
    },
    /// Promote a version to an environment (promoting twice changes nothing)
    Promote {
        /// The version id
        version: u64,
        /// dev, staging or prod
        #[arg(long, visible_alias = "to")]
        environment: String,
    },
    /// Show an artifact (art_…) with its versions, or a version (its id) with its content
    Show { id: String },
    /// List the organization's artifacts, newest first
    List {
        /// Only artifacts of this kind
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
    },
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
            RunnersCommand::List => {
                let now = SystemClock.now().get();
                show(&admin.list_runners().await?, &|answer| {
                    render_runners(answer, now)
                })
            }
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
                let requirements = match &enqueue.requirements {
                    Some(text) => json_argument(text, "--requirements")?,
                    None => requirements_from_flags(&enqueue.kind, &enqueue.flags)?,
                };
                let body = json!({
                    "idempotencyKey": enqueue.idempotency_key,
                    "subject": {
                        "kind": enqueue.kind,
                        "artifactId": enqueue.artifact,
                        "versionId": enqueue.version,
                        "environment": enqueue.environment,
                    },
                    "input": json_argument(&enqueue.input, "--input")?,
                    "requirements": requirements,
                });
                show(&admin.enqueue(&body).await?, &render_job)
            }
            JobsCommand::List { limit, state } => show(
                &admin.list_jobs(limit, state.as_deref()).await?,
                &render_jobs,
            ),
            JobsCommand::Show { id } => show(&admin.job(&id).await?, &render_job),
            JobsCommand::Logs(logs) => admin_logs::run(&admin, &logs, json).await,
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
        AdminCommand::Releases(command) => releases(&admin, command, json).await,
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
        AdminCommand::Enrollment(command) => enrollment(&admin, command, &server, json).await,
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

async fn enrollment(
    admin: &AdminClient,
    command: EnrollmentCommand,
    server: &str,
    json: bool,
) -> Result<ExitCode, CliError> {
    let (answer, rendered) = match command {
        EnrollmentCommand::Policy { policy } => {
            let answer = match policy {
                Some(policy) => admin.set_enrollment_policy(&policy).await?,
                None => admin.enrollment_policy().await?,
            };
            let rendered = format!(
                "enrollment policy of {}: {}",
                text(&answer, "organizationId"),
                text(&answer, "policy")
            );
            (answer, rendered)
        }
        EnrollmentCommand::Tokens(TokensCommand::Create {
            name,
            uses,
            expires_in,
        }) => {
            let mut body = json!({});
            if let Some(name) = name {
                body["name"] = name.into();
            }
            if let Some(uses) = uses {
                body["maxUses"] = uses.into();
            }
            if let Some(seconds) = expires_in {
                body["expiresInSeconds"] = seconds.into();
            }
            let answer = admin.create_enrollment_token(&body).await?;
            let rendered = render_enrollment_token(&answer, server);
            (answer, rendered)
        }
        EnrollmentCommand::Tokens(TokensCommand::List) => {
            let answer = admin.list_enrollment_tokens().await?;
            let rendered = render_enrollment_tokens(&answer);
            (answer, rendered)
        }
        EnrollmentCommand::Tokens(TokensCommand::Revoke { id }) => {
            let answer = admin.revoke_enrollment_token(&id).await?;
            let rendered = format!(
                "enrollment token {} revoked at {}",
                text(&answer, "id"),
                text(&answer, "revokedAt")
            );
            (answer, rendered)
        }
    };
    if json {
        print_json(&answer)?;
    } else {
        println!("{rendered}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `--expires-in`: whole seconds, or a number with `s`, `m`, `h` or `d`, within what the server
/// accepts (60 s to 30 days), so a typo is a usage error before anything is sent.
fn lifetime_seconds(text: &str) -> Result<u32, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((at, c)) if c.is_ascii_alphabetic() => (&text[..at], c),
        _ => (text, 's'),
    };
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(format!("{text:?}: the unit is s, m, h or d")),
    };
    let seconds = digits
        .parse::<u32>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a lifetime such as 3600, 90m, 24h or 7d"))?;
    if (60..=30 * 86_400).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(format!("{text:?}: a token lives 60s to 30d"))
    }
}

fn render_enrollment_token(answer: &Value, server: &str) -> String {
    format!(
        "enrollment token {} ({}) — {} use(s), expires {}\n\
         the token (shown once; give it to the runner's operator):\n  {}\n\n\
         Enroll a runner with:\n  \
         EDGERUNNER_ENROLLMENT_TOKEN={} edgerunner runner enroll --server {server} \\\n      \
         --organization <organization id> --execution-kind <kind> --runtime <runtime>",
        text(answer, "id"),
        text(answer, "name"),
        text(answer, "maxUses"),
        text(answer, "expiresAt"),
        text(answer, "enrollmentToken"),
        text(answer, "enrollmentToken"),
    )
}

fn render_enrollment_tokens(answer: &Value) -> String {
    let tokens = answer["enrollmentTokens"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if tokens.is_empty() {
        return "no enrollment tokens".to_owned();
    }
    table(
        &[
            "ID",
            "NAME",
            "PREFIX",
            "STATE",
            "USES",
            "EXPIRES",
            "LAST USED",
        ],
        tokens
            .iter()
            .map(|t| {
                vec![
                    text(t, "id"),
                    text(t, "name"),
                    text(t, "prefix"),
                    text(t, "state"),
                    format!("{}/{}", text(t, "uses"), text(t, "maxUses")),
                    text(t, "expiresAt"),
                    text(t, "lastUsedAt"),
                ]
            })
            .collect(),
    )
}

async fn releases(
    admin: &AdminClient,
    command: ReleasesCommand,
    json: bool,
) -> Result<ExitCode, CliError> {
    let answer = match command {
        ReleasesCommand::CreateArtifact { kind, name } => {
            let artifact = admin.create_artifact(&kind, &name).await?;
            if !json {
                // The id alone on stdout, for `ART=$(edgerunner admin releases create-artifact …)`.
                println!("{}", text(&artifact, "id"));
                return Ok(ExitCode::SUCCESS);
            }
            artifact
        }
        ReleasesCommand::AddVersion { artifact, content } => {
            let content = json_argument(&content, "--content")?;
            let version = admin.add_version(&artifact, &content).await?;
            if !json {
                println!("{}", text(&version, "id"));
                eprintln!(
                    "version {} of {}, contentHash {}",
                    text(&version, "id"),
                    text(&version, "artifactId"),
                    text(&version, "contentHash")
                );
                return Ok(ExitCode::SUCCESS);
            }
            version
        }
        ReleasesCommand::Promote {
            version,
            environment,
        } => {
            let promotion = admin.promote(version, &environment).await?;
            if !json {
                println!(
                    "version {} is promoted to {} (since {})",
                    text(&promotion, "versionId"),
                    text(&promotion, "environment"),
                    text(&promotion, "promotedAt")
                );
                return Ok(ExitCode::SUCCESS);
            }
            promotion
        }
        ReleasesCommand::Show { id } => {
            let answer = if id.starts_with("art_") {
                admin.artifact(&id).await?
            } else {
                let version = id.parse::<u64>().map_err(|_| {
                    CliError::Input(format!(
                        "{id:?} is neither an artifact id (art_…) nor a version id (a number)"
                    ))
                })?;
                admin.version(version).await?
            };
            if !json {
                println!("{}", render_release(&answer));
                return Ok(ExitCode::SUCCESS);
            }
            answer
        }
        ReleasesCommand::List { kind, limit } => {
            let answer = admin.list_artifacts(kind.as_deref(), limit).await?;
            if !json {
                println!("{}", render_artifacts(&answer));
                return Ok(ExitCode::SUCCESS);
            }
            answer
        }
    };
    print_json(&answer)?;
    Ok(ExitCode::SUCCESS)
}

/// A job state as the server names it (clap reports anything else as a usage error).
fn job_state(text: &str) -> Result<String, String> {
    JobState::parse(text)
        .map(|state| state.as_str().to_owned())
        .map_err(|_| {
            let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            format!("{text:?} is not a job state; one of {}", states.join(", "))
        })
}

/// The requirements document the flags state. All four limits and the runtime are needed (the
/// server refuses a job without them); `--network` is `deny_all` or one or more origins.
fn requirements_from_flags(kind: &str, flags: &RequirementFlags) -> Result<Value, CliError> {
    let mut missing = Vec::new();
    if flags.runtime.is_none() {
        missing.push("--runtime");
    }
    let limits = [
        ("cpuSeconds", "--cpu-seconds", flags.cpu_seconds),
        ("memoryMb", "--memory-mb", flags.memory_mb),
        ("wallSeconds", "--wall-seconds", flags.wall_seconds),
        ("outputBytes", "--output-bytes", flags.output_bytes),
    ];
    let mut limit_values = serde_json::Map::new();
    for (field, flag, value) in limits {
        match value {
            Some(value) => {
                limit_values.insert(field.to_owned(), value.into());
            }
            None => missing.push(flag),
        }
    }
    if !missing.is_empty() {
        return Err(CliError::Input(format!(
            "the job's requirements: missing {} (give --runtime, --cpu-seconds, --memory-mb, \
             --wall-seconds and --output-bytes, or the whole document with --requirements JSON|@FILE)",
            missing.join(", ")
        )));
    }
    let mut requirements = json!({
        "executionKind": kind,
        "runtime": flags.runtime,
        "limits": limit_values,
    });
    let deny = flags.network.iter().any(|n| n == "deny_all");
    match (deny, flags.network.len()) {
        (_, 0) => {}
        (true, 1) => requirements["network"] = json!({ "mode": "deny_all" }),
        (true, _) => {
            return Err(CliError::Input(
                "--network deny_all allows no origin; give either deny_all or origins".into(),
            ))
        }
        (false, _) => {
            requirements["network"] = json!({ "mode": "allowlist", "origins": flags.network });
        }
    }
    Ok(requirements)
}

/// How long ago `at` (RFC 3339) was: `12 s ago`, `3 min ago`, `5 h ago`, `2 d ago`; `never`
/// when absent. A time ahead of `now` (clocks disagree) reads as `just now`.
pub fn age(now_ms: i64, at: Option<&str>) -> String {
    let Some(at) = at else {
        return "never".to_owned();
    };
    let Ok(then) = UnixMillis::parse_rfc3339(at) else {
        return at.to_owned();
    };
    let seconds = now_ms.saturating_sub(then.get()) / 1000;
    match seconds {
        s if s <= 0 => "just now".to_owned(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3_600 => format!("{} min ago", s / 60),
        s if s < 48 * 3_600 => format!("{} h ago", s / 3_600),
        s => format!("{} d ago", s / 86_400),
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

fn render_runners(answer: &Value, now_ms: i64) -> String {
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
            "LAST HEARTBEAT",
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
                    age(now_ms, r["lastHeartbeatAt"].as_str()),
                    age(now_ms, r["lastSeenAt"].as_str()),
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

fn render_artifacts(answer: &Value) -> String {
    let artifacts = answer["artifacts"].as_array().cloned().unwrap_or_default();
    if artifacts.is_empty() {
        return "no artifacts".to_owned();
    }
    table(
        &["ID", "KIND", "NAME", "LATEST VERSION", "CREATED"],
        artifacts
            .iter()
            .map(|a| {
                vec![
                    text(a, "id"),
                    text(a, "kind"),
                    text(a, "name"),
                    text(a, "latestVersionId"),
                    text(a, "createdAt"),
                ]
            })
            .collect(),
    )
}

/// An artifact with its versions, or a version with its content.
fn render_release(answer: &Value) -> String {
    let promotions = |version: &Value| match version["promotions"].as_array() {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|p| p.as_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "-".to_owned(),
    };
    if let Some(versions) = answer["versions"].as_array() {
        let mut lines = vec![format!(
            "artifact {} ({}) {:?} — created {}",
            text(answer, "id"),
            text(answer, "kind"),
            text(answer, "name"),
            text(answer, "createdAt")
        )];
        if versions.is_empty() {
            lines.push("no versions".to_owned());
        } else {
            lines.push(table(
                &["VERSION", "CONTENT HASH", "PROMOTED TO", "CREATED"],
                versions
                    .iter()
                    .map(|v| {
                        vec![
                            text(v, "id"),
                            text(v, "contentHash"),
                            promotions(v),
                            text(v, "createdAt"),
                        ]
                    })
                    .collect(),
            ));
        }
        return lines.join("\n");
    }
    let content = serde_json::to_string_pretty(&answer["content"])
        .unwrap_or_else(|_| answer["content"].to_string());
    format!(
        "version {} of {} ({}) — created {}\ncontent hash    {}\npromoted to     {}\n{content}",
        text(answer, "id"),
        text(answer, "artifactId"),
        text(answer, "kind"),
        text(answer, "createdAt"),
        text(answer, "contentHash"),
        promotions(answer),
    )
}

fn render_job(job: &Value) -> String {
    let handed_back = match job["releasedAttempts"].as_u64() {
        Some(n) if n > 0 => format!("; {n} hand-back(s) not counted"),
        _ => String::new(),
    };
    let mut lines = vec![format!(
        "job {} — {} (attempt {}{handed_back})",
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
    fn a_new_enrollment_token_prints_once_with_a_line_to_copy() {
        let answer = serde_json::json!({
            "id": "ent_1", "name": "rack 4", "maxUses": 2, "expiresAt": "2026-12-05T00:00:00Z",
            "enrollmentToken": "ere_abc",
        });
        let rendered = render_enrollment_token(&answer, "https://runners.example");
        let lines: Vec<&str> = rendered.lines().collect();
        assert_eq!(
            lines,
            [
                "enrollment token ent_1 (rack 4) — 2 use(s), expires 2026-12-05T00:00:00Z",
                "the token (shown once; give it to the runner's operator):",
                "  ere_abc",
                "",
                "Enroll a runner with:",
                "  EDGERUNNER_ENROLLMENT_TOKEN=ere_abc edgerunner runner enroll --server https://runners.example \\",
                "      --organization <organization id> --execution-kind <kind> --runtime <runtime>",
            ]
        );
    }

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
    fn a_job_says_how_many_hand_backs_did_not_count() {
        let job = |released: u64| json!({"id": "job_1", "state": "queued", "dispatchAttempt": 4, "releasedAttempts": released, "subject": {}});
        let first = |job: &Value| render_job(job).lines().next().map(str::to_owned);
        assert_eq!(
            first(&job(1)).as_deref(),
            Some("job job_1 — queued (attempt 4; 1 hand-back(s) not counted)")
        );
        assert_eq!(
            first(&job(0)).as_deref(),
            Some("job job_1 — queued (attempt 4)")
        );
    }

    fn flags() -> RequirementFlags {
        RequirementFlags {
            runtime: Some("python3.12".into()),
            cpu_seconds: Some(60),
            memory_mb: Some(512),
            wall_seconds: Some(120),
            output_bytes: Some(1_048_576),
            network: vec![],
        }
    }

    #[test]
    fn flags_make_the_requirements_document() {
        assert_eq!(
            requirements_from_flags("prompt", &flags()).expect("a document"),
            json!({
                "executionKind": "prompt",
                "runtime": "python3.12",
                "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1_048_576},
            })
        );
        let deny = RequirementFlags {
            network: vec!["deny_all".into()],
            ..flags()
        };
        assert_eq!(
            requirements_from_flags("scorer", &deny).expect("a document")["network"],
            json!({"mode": "deny_all"})
        );
        let origins = RequirementFlags {
            network: vec![
                "https://api.example.com".into(),
                "https://b.example:8443".into(),
            ],
            ..flags()
        };
        let document = requirements_from_flags("agent", &origins).expect("a document");
        assert_eq!(document["executionKind"], "agent");
        assert_eq!(
            document["network"],
            json!({"mode": "allowlist", "origins": ["https://api.example.com", "https://b.example:8443"]})
        );
        // What the flags make is a document the server's parser accepts as is.
        let parsed = edgerunner_protocol::capability::Requirements::parse(&document)
            .expect("valid requirements");
        assert_eq!(parsed.limits().wall_seconds(), 120);
    }

    #[test]
    fn flag_requirements_name_every_missing_flag_and_refuse_deny_all_with_origins() {
        let partial = RequirementFlags {
            runtime: None,
            memory_mb: None,
            ..flags()
        };
        let message = requirements_from_flags("prompt", &partial)
            .expect_err("incomplete")
            .to_string();
        assert!(
            message.starts_with("the job's requirements: missing --runtime, --memory-mb ("),
            "{message}"
        );
        let mixed = RequirementFlags {
            network: vec!["deny_all".into(), "https://a.example".into()],
            ..flags()
        };
        assert!(requirements_from_flags("prompt", &mixed)
            .expect_err("contradiction")
            .to_string()
            .contains("deny_all allows no origin"));
    }

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        let at = "2026-01-01T00:00:00Z";
        let then = UnixMillis::parse_rfc3339(at).expect("a time").get();
        assert_eq!(age(then, None), "never");
        assert_eq!(age(then + 12_400, Some(at)), "12 s ago");
        assert_eq!(age(then + 59_999, Some(at)), "59 s ago");
        assert_eq!(age(then + 60_000, Some(at)), "1 min ago");
        assert_eq!(age(then + 3 * 60_000 + 59_000, Some(at)), "3 min ago");
        assert_eq!(age(then + 5 * 3_600_000, Some(at)), "5 h ago");
        assert_eq!(age(then + 47 * 3_600_000, Some(at)), "47 h ago");
        assert_eq!(age(then + 3 * 86_400_000, Some(at)), "3 d ago");
        assert_eq!(age(then + 400, Some(at)), "just now");
        assert_eq!(age(then - 5_000, Some(at)), "just now", "a clock behind");
        assert_eq!(age(then, Some("yesterday")), "yesterday", "shown as sent");
    }

    #[test]
    fn runner_lists_show_heartbeat_and_contact_as_ages() {
        let now = UnixMillis::parse_rfc3339("2026-01-01T00:10:00Z")
            .expect("a time")
            .get();
        let answer = json!({"runners": [{
            "id": "run_1", "name": "gpu-1", "state": "active", "identityModel": "bootstrap",
            "activeClaims": 0, "maxConcurrentJobs": 2, "fingerprint": null,
            "lastHeartbeatAt": "2026-01-01T00:09:48Z", "lastSeenAt": "2026-01-01T00:07:00Z",
        }, {
            "id": "run_2", "name": "idle", "state": "pending_approval", "identityModel": "keypair",
            "activeClaims": 0, "maxConcurrentJobs": 1, "fingerprint": "SHA256:x",
            "lastHeartbeatAt": null, "lastSeenAt": null,
        }]});
        let rendered = render_runners(&answer, now);
        let lines: Vec<&str> = rendered.lines().collect();
        assert!(lines[0].contains("LAST HEARTBEAT  LAST SEEN"), "{rendered}");
        assert!(
            lines[1].contains("12 s ago") && lines[1].contains("3 min ago"),
            "{rendered}"
        );
        assert_eq!(lines[2].matches("never").count(), 2, "{rendered}");
    }

    #[test]
    fn job_states_are_checked_before_asking() {
        assert_eq!(job_state("running"), Ok("running".to_owned()));
        assert!(job_state("done")
            .expect_err("not a state")
            .contains("cancel_requested"));
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
