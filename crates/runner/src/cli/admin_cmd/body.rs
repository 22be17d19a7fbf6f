//! The request bodies the flags make: a job's requirements, a runner's registration.

use serde_json::{json, Value};

use super::{RegisterArgs, RequirementFlags};
use crate::cli::{capabilities_from, CliError};

/// The requirements document the flags state. All four limits and the runtime are needed (the
/// server refuses a job without them); `--network` is `deny_all` or one or more origins.
pub(super) fn requirements_from_flags(
    kind: &str,
    flags: &RequirementFlags,
) -> Result<Value, CliError> {
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

pub(crate) fn registration(args: &RegisterArgs) -> Result<Value, CliError> {
    let flags = &args.runner;
    let capabilities = capabilities_from(
        flags.capabilities.as_deref(),
        &flags.execution_kinds,
        &flags.runtimes,
    )?;
    let mut body = json!({
        "name": args.name,
        "runnerKey": args.runner_key,
        "capabilities": capabilities,
    });
    if let Some(max) = args.max_concurrent_jobs {
        body["maxConcurrentJobs"] = max.into();
    }
    if !flags.tags.is_empty() {
        body["tags"] = json!(flags.tags);
    }
    if let Some(ttl) = args.bootstrap_token_ttl {
        body["bootstrapTokenTtlSeconds"] = ttl.into();
    }
    if args.ephemeral {
        body["ephemeral"] = true.into();
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::admin_cmd::RunnerFlags;

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
    fn registration_needs_kinds_and_runtimes_or_a_document() {
        let args = RegisterArgs {
            name: "n".into(),
            runner_key: "k".into(),
            runner: RunnerFlags {
                execution_kinds: vec!["prompt".into()],
                ..RunnerFlags::default()
            },
            max_concurrent_jobs: None,
            bootstrap_token_ttl: None,
            ephemeral: false,
            identity_dir: None,
        };
        assert!(registration(&args).is_err());
        let args = RegisterArgs {
            runner: RunnerFlags {
                runtimes: vec!["python3.12".into()],
                tags: vec!["gpu".into()],
                ..args.runner.clone()
            },
            max_concurrent_jobs: Some(2),
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
        let one_job = RegisterArgs {
            ephemeral: true,
            max_concurrent_jobs: None,
            ..args
        };
        assert_eq!(registration(&one_job).expect("a body")["ephemeral"], true);
    }
}
