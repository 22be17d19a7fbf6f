//! The Worker's configured secrets, checked at use: the signing root
//! (`REMOTE_RUNNER_SIGNING_SECRET`) and the cron trigger's `CRON_SECRET`. A secret that is the
//! shipped placeholder, or too short to be trusted, is refused with a `503` naming it.

use edgerunner_protocol::envelope::MasterSigningSecret;
use edgerunner_protocol::error_code::ErrorCode;
use serde::{Deserialize, Serialize};
use worker::Env;

use crate::error::{ApiError, ApiResult};

/// The signing root, or `503` when it is missing or too short to be trusted.
pub(crate) fn master_secret(env: &Env) -> Result<MasterSigningSecret, SecretRefusal> {
    let secret = configured_secret(env, "REMOTE_RUNNER_SIGNING_SECRET")?;
    MasterSigningSecret::new(secret).map_err(|_| SecretRefusal::SigningSecretTooShort)
}

/// A configured secret that may not be used. Typed rather than an [`ApiError`] because a job's
/// object needs the signing root too, and answers this refusal to the edge across its wire.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum SecretRefusal {
    /// The secret `name` is the value `.dev.vars.example` ships.
    Placeholder(String),
    /// `REMOTE_RUNNER_SIGNING_SECRET` is unset or shorter than [`MIN_SECRET_CHARS`].
    SigningSecretTooShort,
}

impl From<SecretRefusal> for ApiError {
    fn from(refusal: SecretRefusal) -> Self {
        match refusal {
            SecretRefusal::Placeholder(name) => ApiError::unavailable(
                ErrorCode::SecretIsPlaceholder,
                format!("{name} is the placeholder from .dev.vars.example; set a random value of at least {MIN_SECRET_CHARS} characters"),
            ),
            SecretRefusal::SigningSecretTooShort => ApiError::unavailable(
                ErrorCode::SigningSecretTooShort,
                format!("REMOTE_RUNNER_SIGNING_SECRET must be configured with at least {MIN_SECRET_CHARS} characters"),
            ),
        }
    }
}

/// The shortest secret we accept, for both `REMOTE_RUNNER_SIGNING_SECRET` and `CRON_SECRET`.
const MIN_SECRET_CHARS: usize = 32;

/// What `.dev.vars.example` ships: a value every reader of the repository knows.
const PLACEHOLDER_PREFIX: &str = "replace-with-";

/// A secret as configured, refused (`503`, naming the secret and why) when it is the shipped
/// placeholder. Unset reads as empty; the caller decides what empty means.
fn configured_secret(env: &Env, name: &str) -> Result<String, SecretRefusal> {
    let secret = env.secret(name).map(|s| s.to_string()).unwrap_or_default();
    refuse_placeholder(name, &secret)?;
    Ok(secret)
}

fn refuse_placeholder(name: &str, secret: &str) -> Result<(), SecretRefusal> {
    if secret.starts_with(PLACEHOLDER_PREFIX) {
        return Err(SecretRefusal::Placeholder(name.to_owned()));
    }
    Ok(())
}

/// Whether `token` is the configured `CRON_SECRET`, compared in constant time. An unset secret
/// matches nothing; one that is set but shorter than 32 characters, or the shipped placeholder,
/// is refused with `503` naming it, so a weak secret is never usable.
pub(crate) fn is_cron_secret(env: &Env, token: &str) -> ApiResult<bool> {
    let secret = configured_secret(env, "CRON_SECRET")?;
    if secret.is_empty() {
        return Ok(false);
    }
    if secret.chars().count() < MIN_SECRET_CHARS {
        return Err(ApiError::unavailable(
            ErrorCode::CronSecretTooShort,
            format!("CRON_SECRET must be at least {MIN_SECRET_CHARS} characters"),
        ));
    }
    Ok(edgerunner_protocol::envelope::constant_time_eq(
        secret.as_bytes(),
        token.as_bytes(),
    ))
}

#[cfg(test)]
mod tests {
    use super::refuse_placeholder;
    use crate::error::ApiError;
    use edgerunner_protocol::error_code::ErrorCode;

    #[test]
    fn the_shipped_placeholders_are_refused_by_name() {
        let example = include_str!("../.dev.vars.example");
        let mut seen = 0;
        for line in example
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('='))
        {
            let (name, value) = line.split_once('=').expect("KEY=VALUE");
            let err = refuse_placeholder(name, value).expect_err(line);
            assert_eq!(ApiError::from(err).code(), ErrorCode::SecretIsPlaceholder);
            seen += 1;
        }
        assert_eq!(seen, 2, "both secrets of .dev.vars.example are checked");
        assert!(refuse_placeholder("CRON_SECRET", &"a".repeat(64)).is_ok());
    }
}
