//! The `edgerunner` command line.
//!
//! Parsing is clap's ([`Cli`]); each subcommand lives in its own module and is testable without
//! a process. `main.rs` only calls [`main`].
//!
//! - `edgerunner stable-json`, `edgerunner hash`: stable JSON and `H` of documents on stdin.
//! - `edgerunner verify FILE`: checks a custody bundle offline ([`crate::custody`]).
//! - `edgerunner runner enroll|start|whoami`: the runner ([`crate::worker`]).
//! - `edgerunner admin …`: the admin REST operations ([`crate::admin`]).
//!
//! Exit status: 0 on success, 1 when the command failed (invalid input, a refusal, a bundle
//! that does not verify), 2 on a usage error (clap's, and [`CliError::Usage`]).

use core::fmt;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use crate::config::ConfigError;
use crate::http::ClientError;
use crate::keyfile::KeyFileError;

pub mod admin_cmd;
pub mod admin_logs;
pub mod json_tools;
pub mod pool_cmd;
pub mod runner_cmd;
pub mod secret_arg;
pub mod terminal;
pub mod verify_cmd;

/// One line of the usage, in the words the old hand-written parser used.
pub const USAGE: &str =
    "usage: edgerunner <command> [options]   (edgerunner help lists the commands)";

#[derive(Debug, Parser)]
#[command(
    name = "edgerunner",
    version,
    about = "The edgerunner runner and admin tool: run signed jobs, administer the control plane, verify custody bundles."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read one JSON document on stdin, print its stable JSON
    StableJson(JsonArgs),
    /// Read one JSON document on stdin, print H (SHA-256 of its stable JSON)
    Hash(JsonArgs),
    /// Check every hash and link of a job's custody bundle, offline
    Verify(verify_cmd::VerifyArgs),
    /// Run jobs: enroll a key pair, start claiming, show this runner
    #[command(subcommand)]
    Runner(runner_cmd::RunnerCommand),
    /// Administer runners and jobs with an API key
    Admin(admin_cmd::AdminArgs),
}

#[derive(Debug, Args)]
pub struct JsonArgs {
    /// Every input line is one document; every output line one answer
    #[arg(long, hide = true)]
    pub lines: bool,
}

impl Command {
    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::StableJson(_) => "stable-json",
            Self::Hash(_) => "hash",
            Self::Verify(_) => "verify",
            Self::Runner(_) => "runner",
            Self::Admin(_) => "admin",
        }
    }
}

/// Parses the process's arguments, runs the command, and says how the process should exit.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    let name = cli.command.name();
    match run(cli.command) {
        Ok(code) => code,
        Err(error) => {
            if !matches!(error, CliError::Reported) {
                eprintln!("edgerunner {name}: {error}");
            }
            ExitCode::from(error.exit_code())
        }
    }
}

/// Help and version go to stdout with status 0; anything else is a usage error (status 2).
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    let text = error.render().to_string().replacen("Usage: ", "usage: ", 1);
    eprint!("{text}");
    if !text.contains("usage: edgerunner") {
        eprintln!("\n{USAGE}");
    }
    ExitCode::from(2)
}

/// Runs one command.
pub fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::StableJson(args) => json(json_tools::Render::StableJson, &args),
        Command::Hash(args) => json(json_tools::Render::Hash, &args),
        Command::Verify(args) => verify_cmd::run(&args),
        Command::Runner(command) => runtime()?.block_on(runner_cmd::run(command)),
        Command::Admin(args) => runtime()?.block_on(admin_cmd::run(args)),
    }
}

fn json(render: json_tools::Render, args: &JsonArgs) -> Result<ExitCode, CliError> {
    let input = if args.lines {
        json_tools::Input::Lines
    } else {
        json_tools::Input::Document
    };
    let stdin = io::stdin().lock();
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    json_tools::run(render, input, stdin, &mut stdout)?;
    stdout
        .flush()
        .map_err(|error| CliError::Output(error.to_string()))?;
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::Failed(format!("cannot start the async runtime: {error}")))
}

/// A JSON argument: the JSON text itself, `@PATH` for a file's contents, or `-` for stdin.
/// Number lexemes are kept as written (they are hashed).
pub fn json_argument(text: &str, what: &str) -> Result<Value, CliError> {
    let source = if text == "-" {
        let mut buffer = String::new();
        io::stdin()
            .read_to_string(&mut buffer)
            .map_err(|error| CliError::Input(format!("{what}: cannot read stdin: {error}")))?;
        buffer
    } else if let Some(path) = text.strip_prefix('@') {
        std::fs::read_to_string(path)
            .map_err(|error| CliError::Input(format!("{what}: cannot read {path}: {error}")))?
    } else {
        text.to_owned()
    };
    serde_json::from_str(&source).map_err(|error| CliError::InvalidJson(format!("{what}: {error}")))
}

/// Prints `value` as indented JSON (what `--json` prints).
pub fn print_json(value: &Value) -> Result<(), CliError> {
    let text =
        serde_json::to_string_pretty(value).map_err(|error| CliError::Output(error.to_string()))?;
    say(text)
}

/// A command's answer on stdout, and a newline. A reader that closed its end of the pipe
/// (`edgerunner admin jobs list | head -1`) took what it wanted: that is not an error, and the
/// command still exits by its own result (`verify` by its verdict).
pub fn say(text: impl fmt::Display) -> Result<(), CliError> {
    match writeln!(io::stdout().lock(), "{text}") {
        Err(error) if error.kind() != io::ErrorKind::BrokenPipe => {
            Err(CliError::Output(error.to_string()))
        }
        _ => Ok(()),
    }
}

/// A runner's capability document from its flags: `--capabilities` (JSON, @FILE or -) as given,
/// else the `--execution-kind`s and `--runtime`s it names, of which it needs one each at least.
pub fn capabilities_from(
    document: Option<&str>,
    execution_kinds: &[String],
    runtimes: &[String],
) -> Result<Value, CliError> {
    if let Some(text) = document {
        return json_argument(text, "--capabilities");
    }
    if execution_kinds.is_empty() || runtimes.is_empty() {
        return Err(CliError::Input(
            "say what the runner can run: --execution-kind KIND and --runtime RUNTIME \
             (repeatable), or --capabilities JSON"
                .into(),
        ));
    }
    Ok(serde_json::json!({ "executionKinds": execution_kinds, "runtimes": runtimes }))
}

/// Why a command failed. Every variant but [`CliError::Usage`] exits 1.
#[derive(Debug)]
pub enum CliError {
    /// Arguments clap accepted but the command refuses (exit 2, as clap's own).
    Usage(String),
    InvalidJson(String),
    Input(String),
    Output(String),
    Client(ClientError),
    Config(ConfigError),
    Key(KeyFileError),
    Failed(String),
    /// Already reported on stdout or stderr (e.g. the problems of a bundle).
    Reported,
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            _ => 1,
        }
    }
}

impl From<ClientError> for CliError {
    fn from(error: ClientError) -> Self {
        Self::Client(error)
    }
}

impl From<ConfigError> for CliError {
    fn from(error: ConfigError) -> Self {
        Self::Config(error)
    }
}

impl From<KeyFileError> for CliError {
    fn from(error: KeyFileError) -> Self {
        Self::Key(error)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidJson(detail) => write!(f, "invalid JSON: {detail}"),
            Self::Input(detail) | Self::Failed(detail) | Self::Usage(detail) => f.write_str(detail),
            Self::Output(detail) => write!(f, "cannot write output: {detail}"),
            Self::Client(error) => error.fmt(f),
            Self::Config(error) => error.fmt(f),
            Self::Key(error) => error.fmt(f),
            Self::Reported => f.write_str("failed"),
        }
    }
}

impl std::error::Error for CliError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("edgerunner").chain(args.iter().copied()))
    }

    #[test]
    fn parses_commands_and_the_lines_flag() {
        assert!(matches!(
            parse(&["hash"]).map(|cli| cli.command),
            Ok(Command::Hash(JsonArgs { lines: false }))
        ));
        assert!(matches!(
            parse(&["stable-json", "--lines"]).map(|cli| cli.command),
            Ok(Command::StableJson(JsonArgs { lines: true }))
        ));
        assert!(parse(&[]).is_err());
        assert!(parse(&["hash", "--bogus"]).is_err());
        assert!(parse(&["hash", "--lines", "x"]).is_err());
        assert!(parse(&["sign"]).is_err());
        assert_eq!(
            parse(&["--help"]).map(|_| ()).map_err(|e| e.kind()),
            Err(clap::error::ErrorKind::DisplayHelp)
        );
    }

    #[test]
    fn runner_start_batches_by_default_as_the_library_does() {
        let Ok(Command::Runner(runner_cmd::RunnerCommand::Start(args))) =
            parse(&["runner", "start", "--exec", "true"]).map(|cli| cli.command)
        else {
            panic!("runner start parses");
        };
        let defaults = crate::stream::BatchLimits::DEFAULT;
        assert_eq!(args.batch_bytes, defaults.max_bytes);
        assert_eq!(args.batch_lines as usize, defaults.max_lines);
        assert_eq!(args.batch_millis as u128, defaults.max_delay.as_millis());
        let at_limit = crate::stream::SERVER_MAX_CHUNK_BYTES.to_string();
        assert!(parse(&[
            "runner",
            "start",
            "--exec",
            "true",
            "--batch-bytes",
            &at_limit
        ])
        .is_ok());
        let over = (crate::stream::SERVER_MAX_CHUNK_BYTES + 1).to_string();
        assert!(parse(&["runner", "start", "--exec", "true", "--batch-bytes", &over]).is_err());
    }

    #[test]
    fn an_ephemeral_runner_takes_one_job_and_may_leave_when_idle() {
        let start = |extra: &[&str]| {
            let mut args = vec!["runner", "start", "--exec", "true"];
            args.extend_from_slice(extra);
            parse(&args)
        };
        assert!(start(&["--ephemeral"]).is_ok());
        assert!(start(&["--ephemeral", "--idle-exit", "30"]).is_ok());
        assert!(start(&["--idle-exit", "0.5"]).is_ok());
        // One job: no budget or capacity of its own.
        assert!(start(&["--ephemeral", "--max-jobs", "2"]).is_err());
        assert!(start(&["--ephemeral", "--capacity", "2"]).is_err());
        for bad in ["0", "-1", "soon"] {
            assert!(start(&["--idle-exit", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_runner_and_admin_commands() {
        assert!(parse(&["runner", "start", "--exec", "true", "--max-jobs", "1"]).is_ok());
        assert!(parse(&["runner", "start"]).is_err(), "--exec is required");
        assert!(parse(&[
            "runner",
            "enroll",
            "--server",
            "http://x",
            "--organization",
            "org_1",
            "--execution-kind",
            "prompt",
            "--runtime",
            "python3.12"
        ])
        .is_ok());
        assert!(parse(&["admin", "--json", "runners", "list"]).is_ok());
        assert!(parse(&[
            "admin",
            "runners",
            "approve",
            "run_1",
            "--fingerprint",
            "SHA256:x",
            "--reason",
            "checked"
        ])
        .is_ok());
        assert!(
            parse(&["admin", "runners", "approve", "run_1", "--reason", "checked"]).is_err(),
            "approval names the fingerprint compared"
        );
        assert!(
            parse(&["admin", "runners", "approve", "run_1"]).is_err(),
            "a reason is required"
        );
        assert!(parse(&["admin", "jobs", "cancel", "job_1", "--reason", "stop", "--json"]).is_ok());
        assert!(parse(&[
            "admin",
            "jobs",
            "logs",
            "job_1",
            "--follow",
            "--attempt",
            "2"
        ])
        .is_ok());
        assert!(parse(&["admin", "jobs", "logs", "job_1", "--attempt", "8"]).is_ok());
        assert!(parse(&["admin", "jobs", "logs", "job_1", "--attempt", "9"]).is_err());
        assert!(parse(&["admin", "jobs", "list", "--state", "running"]).is_ok());
        assert!(parse(&["admin", "jobs", "list", "--state", "done"]).is_err());
        let enqueue = [
            "admin",
            "jobs",
            "enqueue",
            "--idempotency-key",
            "k",
            "--kind",
            "prompt",
            "--artifact",
            "art_1",
            "--version",
            "1",
            "--environment",
            "dev",
            "--input",
            "{}",
        ];
        let with = |extra: &[&str]| parse(&[&enqueue[..], extra].concat());
        assert!(with(&["--requirements", "{}"]).is_ok());
        assert!(with(&[
            "--runtime",
            "python3.12",
            "--network",
            "https://a.example",
            "--network",
            "https://b.example"
        ])
        .is_ok());
        assert!(
            with(&["--requirements", "{}", "--runtime", "python3.12"]).is_err(),
            "a document or flags, not both"
        );
        assert!(parse(&[
            "admin",
            "releases",
            "add-version",
            "art_1",
            "--content",
            "@c.json"
        ])
        .is_ok());
        assert!(parse(&["admin", "releases", "promote", "7", "--to", "staging"]).is_ok());
        assert!(parse(&["admin", "releases", "list", "--kind", "prompt"]).is_ok());
        assert!(parse(&["verify", "bundle.json", "--signing-secret-file", "s"]).is_ok());
    }

    #[test]
    fn parses_retention_within_the_servers_bounds() {
        assert!(parse(&["admin", "retention"]).is_ok());
        for good in ["1", "90", "400"] {
            assert!(parse(&["admin", "retention", good]).is_ok(), "{good}");
        }
        for bad in ["0", "401", "1.5", "-1", "ninety"] {
            assert!(parse(&["admin", "retention", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_enrollment_commands_within_the_servers_bounds() {
        assert!(parse(&["admin", "enrollment", "policy"]).is_ok());
        for policy in ["open", "token", "closed"] {
            assert!(parse(&["admin", "enrollment", "policy", policy]).is_ok());
        }
        assert!(parse(&["admin", "enrollment", "policy", "Open"]).is_err());
        assert!(parse(&["admin", "enrollment", "tokens", "list"]).is_ok());
        assert!(parse(&["admin", "enrollment", "tokens", "revoke", "ent_1"]).is_ok());
        assert!(parse(&["admin", "enrollment", "tokens", "revoke"]).is_err());
        let create = |extra: &[&str]| {
            parse(&[&["admin", "enrollment", "tokens", "create"][..], extra].concat())
        };
        assert!(create(&[]).is_ok());
        for good in [
            &["--uses", "1"][..],
            &["--uses", "1000"],
            &["--expires-in", "60"],
            &["--expires-in", "90m"],
            &["--expires-in", "30d"],
            &["--name", "rack 4", "--uses", "3", "--expires-in", "2h"],
        ] {
            assert!(create(good).is_ok(), "{good:?}");
        }
        for bad in [
            &["--uses", "0"][..],
            &["--uses", "1001"],
            &["--expires-in", "59"],
            &["--expires-in", "31d"],
            &["--expires-in", "2w"],
            &["--expires-in", "h"],
            &["--expires-in", "-5m"],
        ] {
            assert!(create(bad).is_err(), "{bad:?}");
        }
        let Ok(Command::Runner(runner_cmd::RunnerCommand::Enroll(args))) = parse(&[
            "runner",
            "enroll",
            "--server",
            "http://x",
            "--organization",
            "org_1",
            "--runtime",
            "python3.12",
            "--enrollment-token-file",
            "token.txt",
        ])
        .map(|cli| cli.command) else {
            panic!("runner enroll parses");
        };
        assert_eq!(
            args.enrollment_token_file.as_deref(),
            Some(std::path::Path::new("token.txt"))
        );
    }

    #[test]
    fn json_arguments_keep_number_lexemes() {
        let value = json_argument("{\"x\": 1e-07}", "input").expect("parsed");
        assert_eq!(
            edgerunner_protocol::stable_json::stable_json(&value),
            "{\"x\":1e-07}"
        );
        assert!(matches!(
            json_argument("{", "input"),
            Err(CliError::InvalidJson(_))
        ));
    }
}
