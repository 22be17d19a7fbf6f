//! `edgerunner verify FILE`: a custody bundle, checked offline.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use edgerunner_protocol::envelope::JobSigningSecret;
use serde_json::Value;

use super::secret_arg::Secret;
use super::{print_json, say, CliError};

/// A runner's job-signing secret, from the environment or files (never a flag's value).
const SIGNING_SECRET: Secret = Secret {
    flag: "--signing-secret",
    env: "EDGERUNNER_SIGNING_SECRET",
};
use crate::custody::{verify_bundle, BundleReport};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle (`edgerunner admin jobs bundle JOB_ID -o FILE`), or `-` for stdin
    pub file: PathBuf,
    /// A file holding a runner's job-signing secret (`jobSigning.secret`), to check envelope
    /// signatures too; repeat for several runners [default: $EDGERUNNER_SIGNING_SECRET]
    #[arg(long = "signing-secret-file", value_name = "FILE")]
    pub signing_secret_files: Vec<PathBuf>,
    /// Refused: use EDGERUNNER_SIGNING_SECRET or --signing-secret-file
    #[arg(long = "signing-secret", hide = true)]
    pub signing_secrets: Vec<String>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &VerifyArgs) -> Result<ExitCode, CliError> {
    let from_stdin = |path: &PathBuf| path.as_os_str() == "-";
    if from_stdin(&args.file) && args.signing_secret_files.iter().any(from_stdin) {
        return Err(CliError::Usage(
            "the bundle and a signing secret cannot both come from standard input".into(),
        ));
    }
    let given = args.signing_secrets.first().map(String::as_str);
    let texts = match args.signing_secret_files.as_slice() {
        [] => SIGNING_SECRET
            .read(None, given)?
            .into_iter()
            .collect::<Vec<_>>(),
        files => files
            .iter()
            .map(|file| SIGNING_SECRET.read(Some(file), given))
            .filter_map(Result::transpose)
            .collect::<Result<Vec<_>, _>>()?,
    };
    let text = if args.file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| CliError::Input(format!("cannot read stdin: {error}")))?;
        text
    } else {
        std::fs::read_to_string(&args.file).map_err(|error| {
            CliError::Input(format!("cannot read {}: {error}", args.file.display()))
        })?
    };
    let bundle: Value = serde_json::from_str(&text)
        .map_err(|error| CliError::InvalidJson(format!("{}: {error}", args.file.display())))?;
    let secrets = texts
        .into_iter()
        .map(|secret| {
            JobSigningSecret::new(secret)
                .map_err(|error| CliError::Input(format!("the signing secret: {error}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let report = verify_bundle(&bundle, &secrets);
    if args.json {
        print_json(&report.to_json())?;
    } else {
        say(render(&report))?;
    }
    if report.is_valid() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Reported)
    }
}

/// The report for a person.
pub fn render(report: &BundleReport) -> String {
    let job = report.job_id.as_deref().unwrap_or("(unknown job)");
    let state = report.job_state.as_deref().unwrap_or("?");
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let accepted = match &report.accepted_status {
        Some(status) => format!("accepted: {status}"),
        None => "none accepted".to_owned(),
    };
    let signatures = if report.signatures_checked == 0 {
        "signatures not checked (set EDGERUNNER_SIGNING_SECRET or pass --signing-secret-file)"
            .to_owned()
    } else {
        format!(
            "{} verified",
            plural(report.signatures_checked, "signature")
        )
    };
    let summary = format!(
        "job {job} ({state}): {}, {}, {} ({accepted}); {signatures}",
        plural(report.claims, "claim"),
        plural(report.chunks, "chunk"),
        plural(report.completions, "completion"),
    );
    if report.is_valid() {
        return format!("OK {summary}");
    }
    let mut text = format!(
        "FAILED {summary}\n{} found:",
        plural(report.problems.len(), "problem")
    );
    for problem in &report.problems {
        text.push_str("\n  ");
        text.push_str(&problem.to_string());
    }
    text
}
