//! `edgerunner runner enroll|start|whoami|pool`: the arguments they share (a runner's identity),
//! `whoami`; `enroll` and `start` have a file each.

mod enroll;
mod start;

pub use enroll::EnrollArgs;
pub use start::StartArgs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};

use super::secret_arg::Secret;
use super::{print_json, say, CliError};
use crate::client::RunnerClient;
use crate::config::{self, IdentityInputs};
use crate::http::Http;
use crate::report::Format;
use crate::session::Credentials;

#[derive(Debug, Subcommand)]
pub enum RunnerCommand {
    /// Make this runner's ed25519 key (once, owner-only file) and enroll it; an admin then
    /// approves its fingerprint
    Enroll(EnrollArgs),
    /// Claim jobs up to capacity and run a shell command for each
    Start(Box<StartArgs>),
    /// Show this runner's record as the server has it
    Whoami(IdentityArgs),
    /// Keep between --min and --max one-job runner processes alive on this machine, each
    /// under a runner the pool registers for it, following the queue (an admin key)
    Pool(Box<super::pool_cmd::PoolArgs>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human lines on a terminal, JSON lines otherwise
    Auto,
    Human,
    Json,
}

impl LogFormat {
    fn resolve(self) -> Format {
        match self {
            Self::Auto => Format::detect(),
            Self::Human => Format::Human,
            Self::Json => Format::Json,
        }
    }
}

/// The secrets `runner` takes, from the environment or a file (never a flag's value).
const BOOTSTRAP_TOKEN: Secret = Secret {
    flag: "--bootstrap-token",
    env: "EVALGATE_RUNNER_BOOTSTRAP_TOKEN",
};
const ENROLLMENT_TOKEN: Secret = Secret {
    flag: "--enrollment-token",
    env: "EDGERUNNER_ENROLLMENT_TOKEN",
};
const EVIDENCE_API_KEY: Secret = Secret {
    flag: "--evidence-api-key",
    env: "EDGERUNNER_EVIDENCE_API_KEY",
};

/// Who the runner is: the bootstrap-token model from the environment (as the seed names it) or
/// flags, or the key-pair model from the config file `runner enroll` wrote.
#[derive(Debug, Args)]
pub struct IdentityArgs {
    /// The control plane's URL
    #[arg(long, env = "EVALGATE_BASE_URL")]
    pub server: Option<String>,
    /// The runner id (bootstrap-token model)
    #[arg(long, env = "EVALGATE_RUNNER_ID")]
    pub runner_id: Option<String>,
    /// A file holding the bootstrap token (bootstrap-token model), `-` for standard input
    /// [default: $EVALGATE_RUNNER_BOOTSTRAP_TOKEN]. Never on the command line, which every local
    /// user and every job can read
    #[arg(long, value_name = "FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Refused: use EVALGATE_RUNNER_BOOTSTRAP_TOKEN or --bootstrap-token-file
    #[arg(long, hide = true)]
    pub bootstrap_token: Option<String>,
    /// The config file [default: $XDG_CONFIG_HOME/edgerunner/runner.json]
    #[arg(long, env = "EDGERUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The private key file (key-pair model) [default: the config file's keyFile]
    #[arg(long, env = "EDGERUNNER_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// The organization this runner belongs to: a session bound to another is refused
    /// [default: the config file's organizationId]
    #[arg(long, env = "EVALGATE_ORGANIZATION_ID")]
    pub organization: Option<String>,
    /// How to write progress and logs (stderr); RUST_LOG filters them (default
    /// `warn,edgerunner=info`). On a terminal `runner start` also keeps a status line
    #[arg(long, value_enum, default_value = "auto")]
    pub log_format: LogFormat,
}

impl IdentityArgs {
    fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(config::default_config_path)
    }

    fn client(&self) -> Result<(RunnerClient, &'static str), CliError> {
        let resolved = self.resolve()?;
        Ok((resolved.client, resolved.model))
    }

    fn resolve(&self) -> Result<Resolved, CliError> {
        let path = self.config_path();
        let file = config::load(&path)?;
        let pass_env = file
            .as_ref()
            .map(|f| f.pass_env.clone())
            .unwrap_or_default();
        let mut secrets: Vec<String> = file
            .as_ref()
            .and_then(|f| f.bootstrap_token.clone())
            .into_iter()
            .collect();
        let identity = config::resolve(
            IdentityInputs {
                server: self.server.clone(),
                runner_id: self.runner_id.clone(),
                bootstrap_token: BOOTSTRAP_TOKEN.read(
                    self.bootstrap_token_file.as_deref(),
                    self.bootstrap_token.as_deref(),
                )?,
                key_file: self.key_file.clone(),
                organization_id: self.organization.clone(),
            },
            &path,
            file,
        )?;
        let model = identity.model();
        secrets.push(match &identity.credentials {
            Credentials::Bootstrap { token, .. } => token.expose().to_owned(),
            Credentials::KeyPair(key) => STANDARD.encode(key.to_seed()),
        });
        let http = Http::new(&identity.server)?;
        let client =
            RunnerClient::new(http, identity.credentials).with_expected_binding(identity.expected);
        Ok(Resolved {
            client,
            model,
            config_path: path,
            pass_env,
            key_file: identity.key_file,
            secrets,
        })
    }
}

/// The runner's identity, and what `runner start` must keep from its jobs.
struct Resolved {
    client: RunnerClient,
    model: &'static str,
    config_path: PathBuf,
    /// The config file's `passEnv`.
    pass_env: Vec<String>,
    key_file: Option<PathBuf>,
    /// The credentials as values: the bootstrap token (the config file's too) or the key.
    secrets: Vec<String>,
}

pub(super) fn positive_seconds(text: &str) -> Result<Duration, String> {
    let value = seconds(text)?;
    if value.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(value)
}

fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(value).map_err(|_| format!("{text:?} is not a duration"))
}

pub async fn run(command: RunnerCommand) -> Result<ExitCode, CliError> {
    match command {
        RunnerCommand::Enroll(args) => enroll::run(args).await,
        RunnerCommand::Start(args) => start::run(*args).await,
        RunnerCommand::Whoami(args) => whoami(args).await,
        RunnerCommand::Pool(args) => super::pool_cmd::run(*args).await,
    }
}

async fn whoami(args: IdentityArgs) -> Result<ExitCode, CliError> {
    let (client, model) = args.client()?;
    let record = client.whoami().await?;
    if args.log_format == LogFormat::Json {
        print_json(&record)?;
    } else {
        let text = |key: &str| record[key].as_str().unwrap_or("-").to_owned();
        let mut lines = vec![
            format!(
                "runner {} ({}) — {}",
                text("id"),
                text("name"),
                text("state")
            ),
            format!("identity:     {model}"),
            format!("organization: {}", text("organizationId")),
        ];
        if record["fingerprint"].is_string() {
            lines.push(format!("fingerprint:  {}", text("fingerprint")));
        }
        lines.push(format!(
            "capacity:     {} active of {}",
            record["activeClaims"], record["maxConcurrentJobs"]
        ));
        lines.push(format!("last seen:    {}", text("lastSeenAt")));
        say(lines.join("\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_seconds_with_fractions() {
        assert_eq!(seconds("0.25"), Ok(Duration::from_millis(250)));
        assert!(seconds("-1").is_err());
        assert!(seconds("soon").is_err());
    }
}
