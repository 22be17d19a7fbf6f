//! The `admin` subcommands' arguments, and the parsers that refuse a bad value before anything
//! is sent.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use edgerunner_protocol::state::JobState;

use crate::cli::admin_logs;

#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The control plane's URL
    #[arg(long, env = "EVALGATE_BASE_URL", global = true)]
    pub server: Option<String>,
    /// A file holding the API key (erk_…), `-` for standard input [default: $EDGERUNNER_API_KEY].
    /// Never on the command line, which every local user can read
    #[arg(long, value_name = "FILE", global = true)]
    pub api_key_file: Option<PathBuf>,
    /// Refused: use EDGERUNNER_API_KEY or --api-key-file
    #[arg(long, hide = true, global = true)]
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
    /// Show how many days the organization keeps its finished jobs, or set it (1-400)
    Retention {
        #[arg(value_parser = clap::value_parser!(u16).range(1..=400))]
        days: Option<u16>,
    },
    /// What the organization stores: jobs live, archived, held and expiring; R2 objects and
    /// bytes; the oldest job; what the next retention cut would delete
    Usage,
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
    /// Issue a token; it is printed once (give it to the runner's `enroll` as EDGERUNNER_ENROLLMENT_TOKEN)
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

/// What a registered runner can run and where it is routed: its capability document, or the
/// flags that make one, and its operator tags (`admin runners register`, `runner pool`).
#[derive(Debug, Args, Clone, Default)]
pub struct RunnerFlags {
    /// The whole capability document (JSON, @FILE or -); overrides the flags below
    #[arg(long)]
    pub capabilities: Option<String>,
    #[arg(long = "execution-kind", value_name = "KIND")]
    pub execution_kinds: Vec<String>,
    #[arg(long = "runtime", value_name = "RUNTIME")]
    pub runtimes: Vec<String>,
    /// Operator tags for routing (repeatable)
    #[arg(long = "tag", value_name = "TAG")]
    pub tags: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RegisterArgs {
    #[arg(long)]
    pub name: String,
    /// Stable, unique in the organization
    #[arg(long)]
    pub runner_key: String,
    #[command(flatten)]
    pub runner: RunnerFlags,
    #[arg(long)]
    pub max_concurrent_jobs: Option<u32>,
    /// Make the bootstrap token expire after this many seconds
    #[arg(long)]
    pub bootstrap_token_ttl: Option<u64>,
    /// For exactly one job: its grant drains it and the server then revokes it (run it with
    /// `runner start --ephemeral`); needs a capacity of 1
    #[arg(long)]
    pub ephemeral: bool,
    /// Write the runner's id (`runner-id`) and bootstrap token (`bootstrap-token`, owner-only)
    /// into this directory instead of printing the token: what `runner start --runner-id …
    /// --bootstrap-token-file DIR/bootstrap-token` reads (a pod's init container, say)
    #[arg(long, value_name = "DIR")]
    pub identity_dir: Option<PathBuf>,
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
    /// Hold a finished job: retention keeps it until it is released
    Hold {
        id: String,
        /// Why it is kept (an audit, an incident); shown with the job
        #[arg(long)]
        reason: String,
    },
    /// Release a held job: retention applies to it again
    Unhold { id: String },
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

/// A job state as the server names it (clap reports anything else as a usage error).
fn job_state(text: &str) -> Result<String, String> {
    JobState::parse(text)
        .map(|state| state.as_str().to_owned())
        .map_err(|_| {
            let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            format!("{text:?} is not a job state; one of {}", states.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_are_checked_before_asking() {
        assert_eq!(job_state("running"), Ok("running".to_owned()));
        assert!(job_state("done")
            .expect_err("not a state")
            .contains("cancel_requested"));
    }
}
