//! `edgerunner runner enroll`: a key of its own, enrolled for an admin to approve.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::keypair::sign_enrollment;
use serde_json::{json, Value};

use super::ENROLLMENT_TOKEN;
use crate::cli::{capabilities_from, print_json, say, CliError};
use crate::client::enroll;
use crate::config::{self, RunnerConfig};
use crate::http::Http;
use crate::keyfile;

#[derive(Debug, Args)]
pub struct EnrollArgs {
    /// The control plane's URL
    #[arg(long, env = "EVALGATE_BASE_URL")]
    pub server: String,
    /// The organization to enroll into
    #[arg(long, env = "EVALGATE_ORGANIZATION_ID")]
    pub organization: String,
    /// Display name [default: this machine's host name]
    #[arg(long)]
    pub name: Option<String>,
    /// Where to write the runner config [default: $XDG_CONFIG_HOME/edgerunner/runner.json]
    #[arg(long, env = "EDGERUNNER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The private key file, made if missing [default: runner.key beside the config]
    #[arg(long, env = "EDGERUNNER_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// The whole capability document (JSON, @FILE or -); overrides the flags below
    #[arg(long)]
    pub capabilities: Option<String>,
    /// Execution kinds this runner supports (prompt, scorer, tool, workflow, agent)
    #[arg(long = "execution-kind", value_name = "KIND")]
    pub execution_kinds: Vec<String>,
    /// Immutable runtime ids it provides (e.g. python3.12)
    #[arg(long = "runtime", value_name = "RUNTIME")]
    pub runtimes: Vec<String>,
    /// Problem types it serves
    #[arg(long = "problem-type", value_name = "TYPE")]
    pub problem_types: Vec<String>,
    /// It is an external runner
    #[arg(long)]
    pub external: bool,
    #[arg(long)]
    pub max_concurrent_jobs: Option<u32>,
    /// Product name reported to the server
    #[arg(long, default_value = "edgerunner")]
    pub product: String,
    /// A file holding an enrollment token from an admin (ere_…), for an organization whose
    /// policy asks for one; `-` for standard input [default: $EDGERUNNER_ENROLLMENT_TOKEN].
    /// Used for this enrollment only, never saved
    #[arg(long, value_name = "FILE")]
    pub enrollment_token_file: Option<PathBuf>,
    /// Refused: use EDGERUNNER_ENROLLMENT_TOKEN or --enrollment-token-file
    #[arg(long, hide = true)]
    pub enrollment_token: Option<String>,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "edgerunner".to_owned())
}

pub(super) async fn run(args: EnrollArgs) -> Result<ExitCode, CliError> {
    let enrollment_token = ENROLLMENT_TOKEN.read(
        args.enrollment_token_file.as_deref(),
        args.enrollment_token.as_deref(),
    )?;
    // What it can run is checked before any file is made: a refused enroll leaves no key behind.
    let mut capabilities = capabilities_from(
        args.capabilities.as_deref(),
        &args.execution_kinds,
        &args.runtimes,
    )?;
    if let (Some(max), Value::Object(document)) = (args.max_concurrent_jobs, &mut capabilities) {
        document.insert("maxConcurrentJobs".into(), max.into());
    }
    let config_path = args
        .config
        .clone()
        .unwrap_or_else(config::default_config_path);
    let existing = config::load(&config_path)?;
    let key_path = args
        .key_file
        .clone()
        .or_else(|| existing.as_ref().and_then(|c| c.key_file.clone()))
        .unwrap_or_else(|| config::default_key_path(&config_path));
    let key_path = absolute(&key_path);
    let (key, created) = keyfile::load_or_generate(&key_path)?;
    let public_key = key.public_key();
    let fingerprint = public_key.fingerprint();

    let mut body = json!({
        "organizationId": args.organization,
        "publicKey": public_key.to_base64(),
        // Proof of possession: nobody enrolls a public key they saw but do not hold.
        "signature": sign_enrollment(&key, &args.organization),
        "name": args.name.clone().unwrap_or_else(host_name),
        "product": args.product,
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": capabilities,
        "machine": {
            "os": std::env::consts::OS,
            "arch": std::env::consts::ARCH,
            "cpus": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
            "hostname": host_name(),
        },
    });
    if !args.problem_types.is_empty() {
        body["problemTypes"] = json!(args.problem_types);
    }
    if args.external {
        body["external"] = Value::Bool(true);
    }
    if let Some(token) = enrollment_token {
        body["enrollmentToken"] = token.into();
    }
    let http = Http::new(&args.server)?;
    let answer = match enroll(&http, &body).await {
        Ok(answer) => answer,
        Err(error) if error.code() == Some(ErrorCode::FingerprintTaken) => {
            return Err(CliError::Failed(format!(
                "the key in {} (fingerprint {fingerprint}) is already enrolled; an admin finds \
                 it with `edgerunner admin runners list`",
                key_path.display()
            )))
        }
        Err(error) => {
            let hint = match error.code() {
                Some(ErrorCode::EnrollmentTokenRequired) => Some(
                    "enrolling here takes an enrollment token (or the organization is closed, \
                     or --organization names none: the server answers all three alike): check \
                     the organization id, ask an admin for a token (edgerunner admin enrollment \
                     tokens create) and set EDGERUNNER_ENROLLMENT_TOKEN or pass \
                     --enrollment-token-file FILE",
                ),
                Some(ErrorCode::EnrollmentTokenInvalid) => Some(
                    "the enrollment token does not admit this enrollment (unknown, expired, \
                     revoked or used up, of another organization, or the organization is \
                     closed): ask an admin for a new one",
                ),
                Some(ErrorCode::EnrollmentClosed) => Some(
                    "this organization does not accept enrollments now: ask an admin \
                     (edgerunner admin enrollment policy)",
                ),
                _ => None,
            };
            return Err(match hint {
                Some(hint) => CliError::Failed(format!("{error}\n{hint}")),
                None => error.into(),
            });
        }
    };
    let runner = &answer["runner"];
    let runner_id = runner["id"].as_str().unwrap_or_default().to_owned();
    let saved = RunnerConfig {
        server: Some(http.base().to_owned()),
        organization_id: Some(args.organization.clone()),
        runner_id: Some(runner_id.clone()),
        fingerprint: Some(fingerprint.as_str().to_owned()),
        key_file: Some(key_path.clone()),
        ..existing.unwrap_or_default()
    };
    config::save(&config_path, &saved)?;
    if args.json {
        print_json(&json!({
            "runner": runner,
            "fingerprint": fingerprint.as_str(),
            "keyFile": key_path,
            "keyCreated": created,
            "config": absolute(&config_path),
        }))?;
    } else {
        let config = absolute(&config_path);
        say(format_args!(
            "enrolled runner {runner_id} ({})\n\
             fingerprint: {fingerprint}\n\
             key:         {} ({})\n\
             config:      {}\n\
             \n\
             An admin approves it after comparing the fingerprint above with the server's:\n  \
             edgerunner admin runners approve {runner_id} --fingerprint {fingerprint} \
             --reason \"fingerprint checked\"\n\
             Then start it:\n  \
             edgerunner runner start --config {} --exec '<command>'",
            runner["state"].as_str().unwrap_or("pending_approval"),
            key_path.display(),
            if created { "made now" } else { "existing" },
            config.display(),
            config.display(),
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map(|dir| dir.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}
