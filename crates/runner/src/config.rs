//! Runner configuration: where the server is and which identity to use.
//!
//! Sources, strongest first: command-line flags; the environment the seed names
//! (`EVALGATE_BASE_URL`, `EVALGATE_RUNNER_ID`, `EVALGATE_RUNNER_BOOTSTRAP_TOKEN`); the config
//! file (`--config`, `EDGERUNNER_CONFIG`, or `$XDG_CONFIG_HOME/edgerunner/runner.json`), a JSON
//! object with any of `server`, `runnerId`, `bootstrapToken` (bootstrap-token model) and
//! `organizationId`, `fingerprint`, `keyFile` (key-pair model; `runner enroll` writes these), and
//! `passEnv`: names of the runner's environment variables its jobs get, as `--pass-env` (both
//! count; [`crate::job_env`]).
//!
//! A runner id with a bootstrap token selects the bootstrap-token model; otherwise a key file
//! selects the key-pair model. A config file holding a bootstrap token must be owner-only,
//! like the key file.
//!
//! The runner id and organization the configuration names (`runnerId`, `organizationId`,
//! `--organization` / `EVALGATE_ORGANIZATION_ID`) are what every session must be bound to:
//! [`Identity::expected`].

use core::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use edgerunner_protocol::envelope::{OrganizationId, RunnerId};
use serde::{Deserialize, Serialize};

use crate::keyfile::{self, KeyFileError};
use crate::session::{BootstrapToken, Credentials, ExpectedBinding};

/// The config file's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunnerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organization_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// Variables jobs get from the runner's environment, beside `--pass-env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
}

/// `$XDG_CONFIG_HOME/edgerunner/runner.json`, or `~/.config/edgerunner/runner.json`.
pub fn default_config_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("edgerunner").join("runner.json")
}

/// The key file beside a config file: `runner.key` in the same directory.
pub fn default_key_path(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .map_or_else(|| PathBuf::from("runner.key"), |dir| dir.join("runner.key"))
}

/// Reads the config file; `None` when it does not exist.
pub fn load(path: &Path) -> Result<Option<RunnerConfig>, ConfigError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(ConfigError::Io {
                path: path.to_owned(),
                detail: error.to_string(),
            })
        }
    };
    let config: RunnerConfig =
        serde_json::from_str(&text).map_err(|error| ConfigError::Malformed {
            path: path.to_owned(),
            detail: error.to_string(),
        })?;
    if config.bootstrap_token.is_some() {
        keyfile::check_private(path).map_err(ConfigError::Key)?;
    }
    Ok(Some(config))
}

/// Writes the config file (owner-only, replacing the old one whole).
pub fn save(path: &Path, config: &RunnerConfig) -> Result<(), ConfigError> {
    let mut text =
        serde_json::to_string_pretty(config).map_err(|error| ConfigError::Malformed {
            path: path.to_owned(),
            detail: error.to_string(),
        })?;
    text.push('\n');
    keyfile::write_private(path, text.as_bytes(), true).map_err(ConfigError::Key)
}

/// What the flags and the environment said (clap reads both).
#[derive(Clone, Debug, Default)]
pub struct IdentityInputs {
    pub server: Option<String>,
    pub runner_id: Option<String>,
    pub bootstrap_token: Option<String>,
    pub key_file: Option<PathBuf>,
    pub organization_id: Option<String>,
}

/// A runner identity ready to connect.
#[derive(Debug)]
pub struct Identity {
    pub server: String,
    pub credentials: Credentials,
    /// What the server's sessions must be bound to.
    pub expected: ExpectedBinding,
    /// The key file the key-pair model read (jobs must not find it in their directory).
    pub key_file: Option<PathBuf>,
}

impl Identity {
    /// `"bootstrap-token"` or `"key-pair"`, for messages.
    pub fn model(&self) -> &'static str {
        match self.credentials {
            Credentials::Bootstrap { .. } => "bootstrap-token",
            Credentials::KeyPair(_) => "key-pair",
        }
    }
}

/// Combines flags and environment (`inputs`) with the config file at `config_path` (if any).
pub fn resolve(
    inputs: IdentityInputs,
    config_path: &Path,
    config: Option<RunnerConfig>,
) -> Result<Identity, ConfigError> {
    let config = config.unwrap_or_default();
    let config_dir = config_path.parent().unwrap_or(Path::new("."));
    let server = inputs
        .server
        .filter(|s| !s.is_empty())
        .or(config.server)
        .ok_or_else(|| {
            ConfigError::Missing(
                "no server: pass --server URL, set EVALGATE_BASE_URL, or put \"server\" in the \
                 config file"
                    .into(),
            )
        })?;
    let runner_id = inputs
        .runner_id
        .filter(|s| !s.is_empty())
        .or(config.runner_id);
    let token = inputs
        .bootstrap_token
        .filter(|s| !s.is_empty())
        .or(config.bootstrap_token);
    let organization_id = inputs
        .organization_id
        .filter(|s| !s.is_empty())
        .or(config.organization_id)
        .map(|id| {
            OrganizationId::parse(&id)
                .map_err(|error| ConfigError::Invalid(format!("organization id: {error}")))
        })
        .transpose()?;
    let parsed_runner_id = runner_id
        .as_deref()
        .map(|id| {
            RunnerId::parse(id).map_err(|error| ConfigError::Invalid(format!("runner id: {error}")))
        })
        .transpose()?;
    let expected = ExpectedBinding {
        runner_id: parsed_runner_id.clone(),
        organization_id,
    };
    if let (Some(runner_id), Some(token)) = (parsed_runner_id, &token) {
        let token =
            BootstrapToken::new(token).map_err(|error| ConfigError::Invalid(error.to_string()))?;
        return Ok(Identity {
            server,
            credentials: Credentials::Bootstrap { runner_id, token },
            expected,
            key_file: None,
        });
    }
    if token.is_some() {
        return Err(ConfigError::Missing(
            "a bootstrap token without a runner id: set EVALGATE_RUNNER_ID (or \"runnerId\")"
                .into(),
        ));
    }
    let key_file = inputs.key_file.or_else(|| {
        config.key_file.map(|path| {
            if path.is_absolute() {
                path
            } else {
                config_dir.join(path)
            }
        })
    });
    let Some(key_file) = key_file else {
        return Err(ConfigError::Missing(format!(
            "no runner identity: set EVALGATE_RUNNER_ID and EVALGATE_RUNNER_BOOTSTRAP_TOKEN \
             (bootstrap-token model), or run `edgerunner runner enroll` first (key-pair model; \
             no config at {})",
            config_path.display()
        )));
    };
    let key = keyfile::load(&key_file).map_err(ConfigError::Key)?;
    if let Some(expected) = &config.fingerprint {
        let actual = key.public_key().fingerprint();
        if actual.as_str() != expected {
            return Err(ConfigError::Invalid(format!(
                "{} holds the key {actual}, but the config enrolled {expected}",
                key_file.display()
            )));
        }
    }
    Ok(Identity {
        server,
        credentials: Credentials::KeyPair(key),
        expected,
        key_file: Some(key_file),
    })
}

/// Why the runner has no usable configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    Io { path: PathBuf, detail: String },
    Malformed { path: PathBuf, detail: String },
    Missing(String),
    Invalid(String),
    Key(KeyFileError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, detail } => write!(f, "{}: {detail}", path.display()),
            Self::Malformed { path, detail } => {
                write!(f, "{} is not a runner config: {detail}", path.display())
            }
            Self::Missing(detail) | Self::Invalid(detail) => f.write_str(detail),
            Self::Key(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_bootstrap_token_selects_the_bootstrap_model() {
        let inputs = IdentityInputs {
            server: Some("http://127.0.0.1:1".into()),
            runner_id: Some("run_1".into()),
            bootstrap_token: Some("erb_x".into()),
            key_file: None,
            organization_id: None,
        };
        let identity =
            resolve(inputs, Path::new("/nonexistent/runner.json"), None).expect("resolved");
        assert_eq!(identity.model(), "bootstrap-token");
        assert_eq!(identity.server, "http://127.0.0.1:1");
    }

    #[test]
    fn the_config_file_fills_what_the_environment_leaves_out() {
        let config = RunnerConfig {
            server: Some("http://from-config".into()),
            runner_id: Some("run_9".into()),
            bootstrap_token: Some("erb_y".into()),
            ..RunnerConfig::default()
        };
        let identity = resolve(
            IdentityInputs::default(),
            Path::new("/x/runner.json"),
            Some(config),
        )
        .expect("resolved");
        assert_eq!(identity.server, "http://from-config");
        match identity.credentials {
            Credentials::Bootstrap { runner_id, .. } => assert_eq!(runner_id.as_str(), "run_9"),
            Credentials::KeyPair(_) => panic!("expected the bootstrap model"),
        }
    }

    #[test]
    fn nothing_configured_says_how_to_configure() {
        let error = resolve(
            IdentityInputs {
                server: Some("http://x".into()),
                ..IdentityInputs::default()
            },
            Path::new("/x/runner.json"),
            None,
        )
        .expect_err("no identity");
        assert!(
            error
                .to_string()
                .contains("EVALGATE_RUNNER_BOOTSTRAP_TOKEN"),
            "{error}"
        );
        assert!(matches!(
            resolve(IdentityInputs::default(), Path::new("/x/runner.json"), None),
            Err(ConfigError::Missing(_))
        ));
    }

    #[test]
    fn the_configured_runner_and_organization_are_what_sessions_must_match() {
        let config = RunnerConfig {
            server: Some("http://127.0.0.1:1".into()),
            runner_id: Some("run_9".into()),
            bootstrap_token: Some("erb_y".into()),
            organization_id: Some("org_9".into()),
            ..RunnerConfig::default()
        };
        let identity = resolve(
            IdentityInputs::default(),
            Path::new("/x/runner.json"),
            Some(config.clone()),
        )
        .expect("resolved");
        assert_eq!(
            identity.expected,
            ExpectedBinding {
                runner_id: Some(RunnerId::parse("run_9").expect("id")),
                organization_id: Some(OrganizationId::parse("org_9").expect("id")),
            }
        );
        let flagged = resolve(
            IdentityInputs {
                organization_id: Some("org_flag".into()),
                ..IdentityInputs::default()
            },
            Path::new("/x/runner.json"),
            Some(config.clone()),
        )
        .expect("resolved");
        assert_eq!(
            flagged
                .expected
                .organization_id
                .map(|id| id.as_str().to_owned()),
            Some("org_flag".to_owned()),
            "a flag outranks the file"
        );
        let unknown = resolve(
            IdentityInputs::default(),
            Path::new("/x/runner.json"),
            Some(RunnerConfig {
                organization_id: None,
                ..config.clone()
            }),
        )
        .expect("resolved");
        assert_eq!(unknown.expected.organization_id, None);
        let malformed = resolve(
            IdentityInputs::default(),
            Path::new("/x/runner.json"),
            Some(RunnerConfig {
                organization_id: Some("not an id\n".into()),
                ..config
            }),
        );
        assert!(matches!(malformed, Err(ConfigError::Invalid(_))));
    }

    #[test]
    fn config_round_trips_in_camel_case() {
        let config = RunnerConfig {
            server: Some("http://s".into()),
            organization_id: Some("org_1".into()),
            fingerprint: Some("SHA256:abc".into()),
            key_file: Some(PathBuf::from("runner.key")),
            pass_env: vec!["MODEL_ENDPOINT".into()],
            ..RunnerConfig::default()
        };
        let text = serde_json::to_string(&config).expect("serializes");
        assert!(
            text.contains("\"organizationId\"")
                && text.contains("\"keyFile\"")
                && text.contains("\"passEnv\":[\"MODEL_ENDPOINT\"]"),
            "{text}"
        );
        assert_eq!(
            serde_json::from_str::<RunnerConfig>(&text).ok(),
            Some(config)
        );
    }
}
