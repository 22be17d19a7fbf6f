//! `edgerunner admin …`: the REST operations an admin uses daily. `--json` prints the server's
//! answer as is, for scripts; otherwise a short rendering for a person.
//!
//! Here the dispatch, one REST call per subcommand; `args` the subcommands' arguments, `body`
//! the request bodies flags make, `render` what a person reads.

use std::process::ExitCode;

use serde_json::{json, Value};

use super::secret_arg::Secret;
use super::{admin_logs, json_argument, print_json, say, CliError};
use crate::admin::AdminClient;
use crate::clock::{Clock, SystemClock};
use crate::http::Http;

mod args;
mod body;
mod render;

pub(crate) use body::registration;
use body::requirements_from_flags;
use render::{
    render_artifacts, render_enrollment_token, render_enrollment_tokens, render_events, render_job,
    render_jobs, render_release, render_runner, render_runners, render_token, render_usage, text,
};

pub use args::{
    AdminArgs, AdminCommand, ApproveArgs, EnqueueArgs, EnrollmentCommand, EvidenceCommand,
    JobsCommand, RegisterArgs, ReleasesCommand, RequirementFlags, RunnerFlags, RunnersCommand,
    StatusArgs, TokensCommand,
};
pub use render::age;

/// The admin's API key, from the environment or a file (never a flag's value).
const API_KEY: Secret = Secret {
    flag: "--api-key",
    env: "EDGERUNNER_API_KEY",
};

pub async fn run(args: AdminArgs) -> Result<ExitCode, CliError> {
    let server = args.server.clone().ok_or_else(|| {
        CliError::Input("no server: pass --server URL or set EVALGATE_BASE_URL".into())
    })?;
    let api_key = API_KEY.read(args.api_key_file.as_deref(), args.api_key.as_deref())?;
    let admin = AdminClient::new(Http::new(&server)?, api_key.as_deref().unwrap_or(""))?;
    let json = args.json;
    let show = |value: &Value, render: &dyn Fn(&Value) -> String| -> Result<ExitCode, CliError> {
        if json {
            print_json(value)?;
        } else {
            say(render(value))?;
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
                if let Some(dir) = &register.identity_dir {
                    identity_is_free(dir)?;
                }
                let mut answer = admin.register_runner(&body).await?;
                match &register.identity_dir {
                    Some(dir) => {
                        write_identity(dir, &answer)?;
                        if let Some(fields) = answer.as_object_mut() {
                            fields.remove("bootstrapToken");
                        }
                        show(&answer, &render_runner_in(dir))
                    }
                    None => show(&answer, &|answer| render_token(answer, &server)),
                }
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
            JobsCommand::Hold { id, reason } => {
                show(&admin.hold_job(&id, &reason).await?, &render_job)
            }
            JobsCommand::Unhold { id } => show(&admin.release_job_hold(&id).await?, &render_job),
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
                            say(format_args!(
                                "bundle of job {id} written to {}",
                                path.display()
                            ))?;
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
        AdminCommand::Retention { days } => {
            let answer = match days {
                Some(days) => admin.set_retention(days).await?,
                None => admin.retention().await?,
            };
            show(&answer, &|answer| {
                let plural = |key: &str, one: &str, many: &str| {
                    let n = text(answer, key);
                    format!("{n} {}", if n == "1" { one } else { many })
                };
                format!(
                    "{} keeps finished jobs {}; retention has deleted {}",
                    text(answer, "organizationId"),
                    plural("retentionDays", "day", "days"),
                    plural("deletedJobs", "job", "jobs")
                )
            })
        }
        AdminCommand::Usage => show(&admin.usage().await?, &render_usage),
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
        say(rendered)?;
    }
    Ok(ExitCode::SUCCESS)
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
                say(text(&artifact, "id"))?;
                return Ok(ExitCode::SUCCESS);
            }
            artifact
        }
        ReleasesCommand::AddVersion { artifact, content } => {
            let content = json_argument(&content, "--content")?;
            let version = admin.add_version(&artifact, &content).await?;
            if !json {
                say(text(&version, "id"))?;
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
                say(format_args!(
                    "version {} is promoted to {} (since {})",
                    text(&promotion, "versionId"),
                    text(&promotion, "environment"),
                    text(&promotion, "promotedAt")
                ))?;
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
                say(render_release(&answer))?;
                return Ok(ExitCode::SUCCESS);
            }
            answer
        }
        ReleasesCommand::List { kind, limit } => {
            let answer = admin.list_artifacts(kind.as_deref(), limit).await?;
            if !json {
                say(render_artifacts(&answer))?;
                return Ok(ExitCode::SUCCESS);
            }
            answer
        }
    };
    print_json(&answer)?;
    Ok(ExitCode::SUCCESS)
}

/// Refuses a directory that holds an identity already, before anything is registered.
fn identity_is_free(dir: &std::path::Path) -> Result<(), CliError> {
    if !dir.is_dir() {
        return Err(CliError::Input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    for name in ["runner-id", "bootstrap-token"] {
        if dir.join(name).exists() {
            return Err(CliError::Input(format!(
                "{} holds an identity already ({name}): nothing was registered",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// A registration's runner id and bootstrap token as files of `dir` (`runner-id`, and
/// `bootstrap-token` owner-only), each made new: an identity is never overwritten.
fn write_identity(dir: &std::path::Path, answer: &Value) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (Some(id), Some(token)) = (
        answer["runner"]["id"].as_str(),
        answer["bootstrapToken"].as_str(),
    ) else {
        return Err(CliError::Input(
            "the registration answered no runner id and token".into(),
        ));
    };
    for (name, text, mode) in [("runner-id", id, 0o644), ("bootstrap-token", token, 0o600)] {
        let path = dir.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .and_then(|mut file| file.write_all(text.as_bytes()).map(|()| file));
        if let Err(err) = file.as_mut().map(|file| file.flush()) {
            return Err(CliError::Input(format!(
                "cannot write {}: {err}",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The registered runner, and where its identity went.
fn render_runner_in(dir: &std::path::Path) -> impl Fn(&Value) -> String + '_ {
    move |answer| {
        format!(
            "{}\nidentity written to {} (runner-id, bootstrap-token)",
            render_runner(&answer["runner"]),
            dir.display()
        )
    }
}
