//! A runner's object (`RunnerObject`, one per runner, `id_from_name(runner id)`): what it is
//! asked ([`RunnerOp`]: a claim), what it answers ([`RunnerReply`] or [`RunnerRefusal`], with
//! the refusal's one mapping to HTTP), and the stub the edge calls it through ([`call`]).
//!
//! The object itself lives beside its messages: [`object`] (the Durable Object: its claims and
//! its lease book) and [`grant`] (the grant it prepares and commits). The messages import
//! neither.

pub(crate) mod grant;
pub(crate) mod object;

use edgerunner_protocol::state::RunnerState;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use worker::{Env, Response};

use super::dispatch::Stamp;
use super::RUNNERS;
use crate::answers;
use crate::error::{json_response, ApiError, ApiResult};
use crate::platform::rfc3339;
use crate::secrets::SecretRefusal;
use crate::store::guards::{self, Guard};
use crate::store::jobs::ClaimAnswer;
use crate::store::RoundTrips;

/// The header in which a runner's object tells the edge the queue stamp of a confirmed
/// "nothing" (`object::Quiet`), for a long poll to wait on. Never sent to a client.
pub(crate) const QUIET_STAMP_HEADER: &str = "x-edgerunner-quiet-stamp";

/// An operation of a runner's object (`RunnerObject`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum RunnerOp {
    Claim {
        organization_id: String,
        runner_id: String,
        generation: i64,
        served_targets: Option<Value>,
        /// The runner's idempotency key: the same key again answers the same claim.
        request_id: Option<String>,
        /// How long the claim may wait for a job (the body's `waitSeconds`), 0 to answer at once.
        /// The edge does the waiting; the object only makes sure a long poll has a stamp to wait on.
        #[serde(default)]
        wait_ms: u32,
        /// The organization's queue stamp as the edge just looked at it (a woken long poll).
        #[serde(default)]
        stamp: Option<Stamp>,
    },
    /// The benchmark floor (the `bench-floor` build only).
    Floor,
}

impl RunnerOp {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            RunnerOp::Claim { .. } => "claim",
            RunnerOp::Floor => "floor",
        }
    }
}

/// Calls runner `runner_id`'s object: its answer, with a refusal as the client's answer to it
/// (`From<RunnerRefusal> for ApiError`), and (for a claim that found nothing) the queue stamp
/// of its confirmed "nothing".
pub(crate) async fn call(
    env: &Env,
    trips: &RoundTrips,
    runner_id: &str,
    op: &RunnerOp,
) -> ApiResult<(RunnerReply, Option<Stamp>)> {
    let (answer, headers): (Result<RunnerReply, RunnerRefusal>, _) =
        super::ask(env, trips, RUNNERS, runner_id, op.name(), op).await?;
    let stamp = headers
        .get(QUIET_STAMP_HEADER)?
        .and_then(|stamp| serde_json::from_str(&stamp).ok());
    Ok((answer?, stamp))
}

/// A granted claim as the runner's SDK reads it: from the grant, or from D1 for a retried
/// claim request (`store::jobs::ClaimAnswer`).
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClaimGrant {
    pub(crate) claim: GrantedClaim,
    /// The signed envelope exactly as signed and stored: a client-facing document the edge
    /// only forwards, kept a `Value` so that its number lexemes are the signed ones.
    pub(crate) signed_job: Value,
}

impl ClaimGrant {
    /// A claim's answer as its grant gave it, from the claim and the signed job as stored.
    pub(crate) fn replayed(stored: ClaimAnswer) -> ApiResult<Self> {
        let signed_job: Value = serde_json::from_str(
            stored
                .signed_job
                .as_deref()
                .ok_or_else(|| ApiError::internal("an active claim without its signed job"))?,
        )
        .map_err(ApiError::internal)?;
        Ok(ClaimGrant {
            claim: GrantedClaim {
                id: stored.id,
                job_id: stored.job_id,
                runner_id: stored.runner_id,
                dispatch_attempt: stored.dispatch_attempt,
                issued_at: rfc3339(stored.issued_at),
                expires_at: rfc3339(stored.expires_at),
                lease_expires_at: rfc3339(stored.lease_expires_at),
            },
            signed_job,
        })
    }
}

#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GrantedClaim {
    pub(crate) id: String,
    pub(crate) job_id: String,
    pub(crate) runner_id: String,
    pub(crate) dispatch_attempt: i64,
    pub(crate) issued_at: Option<String>,
    pub(crate) expires_at: Option<String>,
    pub(crate) lease_expires_at: Option<String>,
}

/// A runner's object's answer to a claim it carried out.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) enum RunnerReply {
    /// A job granted to the runner, or the grant a retried request already had.
    Granted(ClaimGrant),
    /// No job for the runner now (`204`).
    Nothing,
    /// The benchmark floor's write (the `bench-floor` build only).
    Floor,
}

impl RunnerReply {
    /// What the runner gets.
    pub(crate) fn into_response(self) -> ApiResult<Response> {
        match self {
            RunnerReply::Granted(grant) => {
                let document = serde_json::to_value(grant).map_err(ApiError::internal)?;
                json_response(200, &document).map_err(ApiError::from)
            }
            RunnerReply::Nothing => Ok(Response::empty()?.with_status(204)),
            RunnerReply::Floor => {
                let document =
                    serde_json::to_value(FloorWritten { ok: true }).map_err(ApiError::internal)?;
                json_response(200, &document).map_err(ApiError::from)
            }
        }
    }
}

/// The benchmark floor's answer: `{"ok": true}` once its write committed.
#[derive(Serialize)]
struct FloorWritten {
    ok: bool,
}

/// Why a runner's object did not carry out a claim.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) enum RunnerRefusal {
    /// The runner is `pending_approval`, `draining` or `lost` (the state named).
    NotActive(RunnerState),
    /// The runner holds as many claims as it may.
    AtCapacity,
    /// The credential's generation moved on, or the runner may no longer call.
    CredentialRevoked,
    /// The credential's runner no longer exists.
    RunnerGone,
    /// The signing root may not be used to sign the job.
    Secret(SecretRefusal),
    /// A schema guard the grant has no refusal of its own for refused its write; answered as
    /// the guard table says.
    Guard(#[serde(with = "guards::by_name")] &'static Guard),
    /// The benchmark floor asked of a build without it.
    NoSuchRoute,
    /// The object failed; its log has the detail.
    Internal,
}

impl RunnerRefusal {
    /// An internal failure: the detail is logged here, the answer is a bare `500`.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        ApiError::internal(detail).into()
    }
}

impl From<RunnerRefusal> for ApiError {
    fn from(refusal: RunnerRefusal) -> Self {
        use RunnerRefusal as R;
        match refusal {
            R::NotActive(state) => {
                ApiError::stating(answers::RUNNER_NOT_ACTIVE, format_args!("it is {state}"))
            }
            R::AtCapacity => ApiError::from(answers::RUNNER_AT_CAPACITY),
            R::CredentialRevoked => ApiError::from(answers::CREDENTIAL_REVOKED),
            R::RunnerGone => ApiError::unauthorized("the credential's runner no longer exists"),
            R::Secret(refusal) => refusal.into(),
            R::Guard(guard) => ApiError::guarded(guard),
            R::NoSuchRoute => ApiError::not_found("no such route"),
            R::Internal => ApiError::failed_elsewhere(),
        }
    }
}

/// What the runner's object meets through the helpers it shares with the edge: a failure
/// (it writes nothing a guard watches).
impl From<ApiError> for RunnerRefusal {
    fn from(err: ApiError) -> Self {
        if err.status() != 500 {
            worker::console_error!(
                "runner object: {} {} has no refusal of its own; answered as internal",
                err.status(),
                err.code()
            );
        }
        RunnerRefusal::Internal
    }
}

impl From<worker::Error> for RunnerRefusal {
    fn from(err: worker::Error) -> Self {
        ApiError::from(err).into()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error(code: &str, message: &str) -> Value {
        json!({ "error": { "code": code, "message": message } })
    }

    #[test]
    fn a_runners_object_refuses_a_claim_with_the_answers_clients_always_read() {
        let answered = |refusal: RunnerRefusal| {
            let wire = serde_json::to_string(&Err::<RunnerReply, _>(refusal)).unwrap();
            let back: Result<RunnerReply, RunnerRefusal> = serde_json::from_str(&wire).unwrap();
            let err = ApiError::from(back.unwrap_err());
            (err.status(), err.body())
        };
        assert_eq!(
            answered(RunnerRefusal::NotActive(RunnerState::Draining)),
            (
                503,
                error(
                    "RUNNER_NOT_ACTIVE",
                    "the runner is not active (it is draining)"
                )
            )
        );
        assert_eq!(
            answered(RunnerRefusal::AtCapacity),
            (
                503,
                error(
                    "RUNNER_AT_CAPACITY",
                    "the runner holds as many claims as it may"
                )
            )
        );
        assert_eq!(
            answered(RunnerRefusal::RunnerGone),
            (
                401,
                error(
                    "AUTHENTICATION_FAILED",
                    "the credential's runner no longer exists"
                )
            )
        );
        // The schema's capacity check answers as the object's own refusal does.
        let capacity = Guard::named(guards::RUNNER_AT_CAPACITY).unwrap();
        assert_eq!(
            answered(RunnerRefusal::Guard(capacity)),
            answered(RunnerRefusal::AtCapacity)
        );
        let inactive = Guard::named(guards::CLAIM_REQUIRES_ACTIVE_RUNNER).unwrap();
        assert_eq!(
            answered(RunnerRefusal::Guard(inactive)),
            (503, error("RUNNER_NOT_ACTIVE", "the runner is not active"))
        );
    }

    #[test]
    fn a_granted_claim_keeps_its_signed_number_lexemes_across_the_wire() {
        let signed: Value = serde_json::from_str(r#"{"requirements":{"cpu":1.50}}"#).unwrap();
        let grant = RunnerReply::Granted(ClaimGrant {
            claim: GrantedClaim {
                id: "job_1-a1".into(),
                job_id: "job_1".into(),
                runner_id: "run_1".into(),
                dispatch_attempt: 1,
                issued_at: Some("2025-01-01T00:00:00.000Z".into()),
                expires_at: None,
                lease_expires_at: None,
            },
            signed_job: signed,
        });
        let wire = serde_json::to_string(&Ok::<_, RunnerRefusal>(grant)).unwrap();
        let Ok(Ok(RunnerReply::Granted(back))) =
            serde_json::from_str::<Result<RunnerReply, RunnerRefusal>>(&wire)
        else {
            panic!("not a grant: {wire}");
        };
        let document = serde_json::to_value(back).unwrap();
        assert_eq!(
            document.to_string(),
            r#"{"claim":{"dispatchAttempt":1,"expiresAt":null,"id":"job_1-a1","issuedAt":"2025-01-01T00:00:00.000Z","jobId":"job_1","leaseExpiresAt":null,"runnerId":"run_1"},"signedJob":{"requirements":{"cpu":1.50}}}"#
        );
    }

    #[test]
    fn a_missing_field_is_an_error_not_a_default() {
        let refused = serde_json::from_value::<RunnerOp>(
            json!({ "claim": { "organizationId": "org_1", "runnerId": "run_1", "requestId": null } }),
        );
        assert!(refused.is_err());
    }
}
