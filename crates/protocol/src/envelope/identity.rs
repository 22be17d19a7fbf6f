//! Identities on the wire: the ids an envelope names (each a checked newtype), dispatch
//! attempts and credential generations.

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::stable_json::{FieldError, Fields};

/// Longest identifier accepted from the wire, in bytes: generous for UUIDs and client keys,
/// small enough that a request cannot make the server store or hash megabytes of "id".
pub const MAX_IDENTIFIER_BYTES: usize = 256;

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub(super) String);

        impl $name {
            /// Accepts 1 to [`MAX_IDENTIFIER_BYTES`] bytes without control characters.
            pub fn parse(text: &str) -> Result<Self, InvalidId> {
                check_identifier(text, $what)?;
                Ok(Self(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:?})"), self.0)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }

        impl From<$name> for Value {
            fn from(id: $name) -> Self {
                Value::String(id.0)
            }
        }
    };
}

identifier!(
    /// The organization every row and request is scoped to.
    OrganizationId,
    "organization id"
);
identifier!(
    /// A remote job.
    JobId,
    "job id"
);
identifier!(
    /// One claim: one runner's hold on one dispatch attempt of one job.
    ClaimId,
    "claim id"
);
identifier!(
    /// A registered runner.
    RunnerId,
    "runner id"
);

impl ClaimId {
    /// The claim of `job`'s dispatch `attempt`, as the server names it: `<job id>-a<attempt>`,
    /// so that a request naming only its claim (a heartbeat) reaches its job without a lookup.
    pub fn for_attempt(job: &JobId, attempt: DispatchAttempt) -> Result<Self, InvalidId> {
        Self::parse(&format!("{}-a{}", job.as_str(), attempt.get()))
    }

    /// The job and attempt a claim id of the server's shape ([`ClaimId::for_attempt`]) names;
    /// `None` for any other text.
    pub fn job_and_attempt(text: &str) -> Option<(&str, DispatchAttempt)> {
        let (job, attempt) = text.rsplit_once("-a")?;
        let attempt = attempt
            .parse::<u32>()
            .ok()
            .filter(|_| attempt.bytes().all(|b| b.is_ascii_digit()))
            .and_then(DispatchAttempt::new)?;
        (!job.is_empty()).then_some((job, attempt))
    }
}
identifier!(
    /// The enqueuer's key that makes a repeated enqueue return the original job.
    IdempotencyKey,
    "idempotency key"
);
identifier!(
    /// A release artifact.
    ArtifactId,
    "artifact id"
);
identifier!(
    /// What kind of artifact a job runs (`prompt`, `scorer`, `tool`, `workflow`, `agent`).
    /// Kept as text: the capability rules, not this envelope, decide which kinds exist.
    SubjectKind,
    "subject kind"
);
identifier!(
    /// The single-use value that makes each signed envelope distinct; runners refuse one they
    /// have seen.
    Nonce,
    "nonce"
);
identifier!(
    /// Names a runner's job-signing key without revealing it: `rk_` + 16 hex digits.
    KeyId,
    "key id"
);

impl Nonce {
    /// A nonce from 32 caller-provided random bytes (this crate has no random source).
    pub fn from_random(bytes: [u8; 32]) -> Self {
        Self(hex::encode(bytes))
    }
}

fn check_identifier(text: &str, what: &'static str) -> Result<(), InvalidId> {
    let problem = if text.is_empty() {
        "is empty"
    } else if text.len() > MAX_IDENTIFIER_BYTES {
        "is longer than 256 bytes"
    } else if text.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(InvalidId { what, problem })
}

/// Why a text is not an identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidId {
    pub what: &'static str,
    pub problem: &'static str,
}

impl InvalidId {
    pub fn code(&self) -> &'static str {
        "INVALID_IDENTIFIER"
    }

    pub fn http_status(&self) -> u16 {
        422
    }
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.problem)
    }
}

impl std::error::Error for InvalidId {}

/// A dispatch attempt: the first claim of a job is attempt 1, each redispatch adds one.
/// (0 means "never dispatched" in job records and never appears on the wire.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DispatchAttempt(u32);

impl DispatchAttempt {
    pub const FIRST: Self = Self(1);

    /// `None` for 0.
    pub fn new(attempt: u32) -> Option<Self> {
        (attempt > 0).then_some(Self(attempt))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    pub(crate) fn read(fields: &Fields<'_>, name: &str) -> Result<Self, FieldError> {
        fields
            .uint(name)?
            .try_into()
            .ok()
            .and_then(Self::new)
            .ok_or_else(|| fields.error(name, "must be a dispatch attempt (1 or more)"))
    }
}

impl fmt::Display for DispatchAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<DispatchAttempt> for Value {
    fn from(attempt: DispatchAttempt) -> Self {
        Value::from(attempt.0)
    }
}

impl Serialize for DispatchAttempt {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(self.0)
    }
}

impl<'de> Deserialize<'de> for DispatchAttempt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::new(u32::deserialize(deserializer)?)
            .ok_or_else(|| serde::de::Error::custom("a dispatch attempt is 1 or more"))
    }
}

/// Which of a runner's credential generations a key belongs to. Rotation bumps it, which
/// changes the derived signing secret and key id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CredentialGeneration(pub u64);

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::envelope::fixtures::*;
    use crate::envelope::Environment;
    use crate::testkit::{assert_refusal, check};

    #[test]
    fn a_claim_id_names_its_job_and_attempt_and_nothing_else_does() {
        let job = id(JobId::parse, "job_6c-a1");
        let third = DispatchAttempt::new(3).expect("3");
        let claim = ClaimId::for_attempt(&job, third).expect("a claim id");
        assert_eq!(claim.as_str(), "job_6c-a1-a3");
        assert_eq!(
            ClaimId::job_and_attempt(claim.as_str()),
            Some(("job_6c-a1", third))
        );
        for other in [
            "job_1",
            "job_1-a",
            "-a1",
            "job_1-a0",
            "job_1-a+1",
            "job_1-a1x",
            "job_1-a99999999999",
        ] {
            assert_eq!(ClaimId::job_and_attempt(other), None, "{other}");
        }
    }

    #[test]
    fn identifiers_refuse_empty_long_and_control_text() {
        assert!(JobId::parse("job_1").is_ok());
        assert!(JobId::parse("ジョブ").is_ok());
        assert_eq!(
            JobId::parse(""),
            Err(InvalidId {
                what: "job id",
                problem: "is empty"
            })
        );
        assert!(JobId::parse(&"x".repeat(257)).is_err());
        assert!(JobId::parse("a\nb").is_err());
        assert!(JobId::parse("a\u{7f}").is_err());
        assert_eq!(DispatchAttempt::new(0), None);
        assert_eq!(DispatchAttempt::FIRST.next(), DispatchAttempt::new(2));
    }

    #[test]
    fn identifiers_are_what_they_read_or_typed_refusals() {
        check(500, |rng| {
            let text = if rng.chance(1, 2) {
                rng.json_string()
            } else {
                rng.edit_text(&"x".repeat(MAX_IDENTIFIER_BYTES))
            };
            let read = [
                OrganizationId::parse(&text).map(|id| id.to_string()),
                JobId::parse(&text).map(|id| id.to_string()),
                ClaimId::parse(&text).map(|id| id.to_string()),
                RunnerId::parse(&text).map(|id| id.to_string()),
                IdempotencyKey::parse(&text).map(|id| id.to_string()),
                ArtifactId::parse(&text).map(|id| id.to_string()),
                SubjectKind::parse(&text).map(|id| id.to_string()),
                Nonce::parse(&text).map(|id| id.to_string()),
                KeyId::parse(&text).map(|id| id.to_string()),
            ];
            for result in read {
                match result {
                    Ok(read) => {
                        assert_eq!(read, text);
                        assert!(!text.is_empty() && text.len() <= MAX_IDENTIFIER_BYTES);
                    }
                    Err(error) => assert_refusal(error.code(), error.http_status(), &error),
                }
            }
            match Environment::parse(&text) {
                Ok(environment) => assert_eq!(environment.as_str(), text),
                Err(error) => assert_refusal(error.code(), error.http_status(), &error),
            }
        });
    }
}
