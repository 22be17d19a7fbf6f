//! An organization's dispatcher (`Dispatcher`, one per organization, `id_from_name(organization
//! id)`): what it is asked ([`DispatchOp`]: a touch, or a look at the queue stamp that may wait
//! for it to move), what it answers ([`Looked`]), and the stubs the edge and the objects call
//! it through ([`touch`], [`stamp`], [`wait`]). See [`object`] for what the stamp means.
//!
//! The object itself lives beside its messages: [`object`] (the Durable Object). The messages
//! import nothing of it.

pub(crate) mod object;

use serde::{Deserialize, Serialize};
use worker::Env;

use super::DISPATCHERS;
use crate::error::{ApiError, ApiResult};
use crate::store::RoundTrips;

/// The longest wait a dispatcher holds (the claim's `waitSeconds` bound).
pub(crate) const MAX_WAIT_MILLIS: u32 = 25_000;

/// Where an organization's queue stands: the dispatcher's epoch and its count of touches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stamp {
    pub(crate) epoch: String,
    pub(crate) version: u64,
}

/// An operation of an organization's dispatcher (`Dispatcher`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
pub(crate) enum DispatchOp {
    /// The organization's claimable work may have changed.
    Touch { organization_id: String },
    /// The stamp now, or once it is no longer `known` (at most `wait_ms` later). With
    /// `pass_on`, the caller was woken at `known` and its runner found nothing: the wake goes
    /// on to another waiting claim (see [`object`]).
    Look {
        organization_id: String,
        known: Option<Stamp>,
        wait_ms: u32,
        #[serde(default)]
        pass_on: bool,
    },
}

impl DispatchOp {
    pub(crate) fn organization_id(&self) -> &str {
        match self {
            DispatchOp::Touch { organization_id }
            | DispatchOp::Look {
                organization_id, ..
            } => organization_id,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            DispatchOp::Touch { .. } => "touch",
            DispatchOp::Look { .. } => "look",
        }
    }
}

/// A look's (or a touch's) answer: the stamp, and whether this caller was woken by a touch (or
/// a wake passed on), rather than by the end of its wait or a stamp it had not seen yet.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Looked {
    pub(crate) stamp: Stamp,
    pub(crate) woken: bool,
}

/// Why a dispatcher did not answer: it holds no rows and refuses nothing, so only a failure.
#[derive(Serialize, Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) enum DispatchRefusal {
    /// The object failed; its log has the detail.
    Internal,
}

impl From<DispatchRefusal> for ApiError {
    fn from(refusal: DispatchRefusal) -> Self {
        match refusal {
            DispatchRefusal::Internal => ApiError::failed_elsewhere(),
        }
    }
}

/// Tells organization `org`'s dispatcher that its claimable work may have changed. Called after
/// the change committed, so it never fails the caller: a lost touch is logged, and the runners'
/// quiet time bounds what it costs.
pub(crate) async fn touch(env: &Env, org: &str) {
    let op = DispatchOp::Touch {
        organization_id: org.to_owned(),
    };
    if let Err(err) = call(env, &op).await {
        worker::console_error!("dispatcher: touching {org} failed: {err:?}");
    }
}

/// Organization `org`'s stamp, at once.
pub(crate) async fn stamp(env: &Env, org: &str, known: Option<&Stamp>) -> ApiResult<Stamp> {
    Ok(wait(env, org, known, 0, false).await?.stamp)
}

/// Organization `org`'s stamp: at once, or (when it is still `known`) after a wake reaches this
/// caller or `wait_ms` pass. `pass_on`: the caller was woken at `known` and found nothing.
pub(crate) async fn wait(
    env: &Env,
    org: &str,
    known: Option<&Stamp>,
    wait_ms: u32,
    pass_on: bool,
) -> ApiResult<Looked> {
    let op = DispatchOp::Look {
        organization_id: org.to_owned(),
        known: known.cloned(),
        wait_ms,
        pass_on,
    };
    call(env, &op).await
}

/// The dispatcher makes no D1 query: its round trips are nobody's.
async fn call(env: &Env, op: &DispatchOp) -> ApiResult<Looked> {
    let (answer, _): (Result<Looked, DispatchRefusal>, _) = super::ask(
        env,
        &RoundTrips::default(),
        DISPATCHERS,
        op.organization_id(),
        op.name(),
        op,
    )
    .await?;
    Ok(answer?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_look_without_its_wait_is_an_error_not_a_default() {
        let refused = serde_json::from_value::<DispatchOp>(
            json!({ "look": { "organizationId": "org_1", "known": null } }),
        );
        assert!(refused.is_err());
        let looked = serde_json::from_value::<DispatchOp>(
            json!({ "look": { "organizationId": "org_1", "known": null, "waitMs": 0 } }),
        );
        assert!(
            looked.is_ok(),
            "passOn alone has a default: a look that was not woken"
        );
    }
}
