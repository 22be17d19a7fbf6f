//! `edgerunner verify FILE`: a custody bundle, checked offline.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use edgerunner_protocol::envelope::JobSigningSecret;
use serde_json::Value;

use super::{print_json, CliError};
use crate::custody::{verify_bundle, BundleReport};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The bundle (`edgerunner admin jobs bundle JOB_ID -o FILE`), or `-` for stdin
    pub file: PathBuf,
    /// A runner's job-signing secret (`jobSigning.secret`), to check envelope signatures too;
    /// repeat for several runners
    #[arg(
        long = "signing-secret",
        value_name = "SECRET",
        env = "EDGERUNNER_SIGNING_SECRET",
        hide_env_values = true
    )]
    pub signing_secrets: Vec<String>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &VerifyArgs) -> Result<ExitCode, CliError> {
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
    let secrets = args
        .signing_secrets
        .iter()
        .map(|secret| {
            JobSigningSecret::new(secret.clone())
                .map_err(|error| CliError::Input(format!("--signing-secret: {error}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let report = verify_bundle(&bundle, &secrets);
    if args.json {
        print_json(&report.to_json())?;
    } else {
        println!("{}", render(&report));
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
        "signatures not checked (pass --signing-secret)".to_owned()
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
