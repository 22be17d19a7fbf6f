//! Who may enroll a key-pair runner into an organization: its enrollment policy
//! (`/api/developer/enrollment-policy`) and the enrollment tokens an admin issues for the
//! `token` policy (`/api/developer/enrollment-tokens`, shown once, stored hashed); and the
//! decision `POST /api/remote-runners/enroll` makes from them ([`admit`]).
//!
//! An organization id is no secret (it is in every runner's configuration), so under `open`
//! anyone can make a runner wait for approval. `token` asks for an admin's say-so up front, and
//! `closed` refuses every enrollment.

pub(crate) use edgerunner_protocol::enrollment::{EnrollmentPolicy as Policy, TokenState};
use edgerunner_protocol::error_code::ErrorCode;
use edgerunner_protocol::kind::EventKind;
use serde_json::{json, Map, Value};
use worker::{Request, Response};

use super::views::enrollment::{PolicyView, RevokedTokenView, TokenListView, TokenView};
use super::views::respond;
use super::{optional_name, refuse_unknown, required_str};
use crate::auth;
use crate::ctx::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::http::{json_object_capped, SMALL_BODY_BYTES};
use crate::platform::{random_id, random_secret, rfc3339, secret_hash};
use crate::store::writes::Writes;
use crate::store::{self, enrollment, events};

/// What an enrollment token starts with, so a leaked one is recognisable (API keys are `erk_`).
pub(crate) const TOKEN_PREFIX: &str = "ere";
/// `ere_` and 64 hex digits, as [`random_secret`] makes it.
const TOKEN_LEN: usize = 4 + 64;
pub(crate) const MAX_USES: i64 = 1000;
const DEFAULT_USES: i64 = 1;
const MIN_EXPIRES_IN_SECONDS: i64 = 60;
/// 30 days; the schema holds every token to it too.
pub(crate) const MAX_EXPIRES_IN_SECONDS: i64 = 30 * 24 * 3600;
const DEFAULT_EXPIRES_IN_SECONDS: i64 = 24 * 3600;
/// The listing's bound: live tokens are capped at 100 by the schema, and a dead one is listed
/// until the reaper deletes it.
const MAX_LISTED: i64 = 200;
const DEFAULT_NAME: &str = "enrollment token";

/// What an enrollment presented, as [`admit`] reads it.
pub(crate) enum Presented<'a> {
    Nothing,
    /// A token this organization does not hold (or that is not even a token's shape).
    Unknown,
    Found(&'a enrollment::TokenRow),
}

/// The one answer to an enrollment that presented no token and is not admitted: whether the
/// organization asks for a token, is closed, or does not exist. Telling them apart would tell
/// a stranger which organizations exist and what their policy is (`/challenge` is alike); the
/// message says what each case needs, which is all a legitimate enroller must know.
pub(crate) fn token_required() -> ApiError {
    ApiError::new(
        403,
        ErrorCode::EnrollmentTokenRequired,
        "enrollment refused: this organization enrolls runners only with an enrollment token from an administrator (enrollmentToken), or accepts no enrollment now, or does not exist; ask an administrator",
    )
}

/// One answer for every token that does not admit: unknown, another organization's, expired,
/// revoked or used up, and any token presented to an organization that is closed or does not
/// exist. Telling them apart would tell a guesser which tokens and organizations exist.
pub(crate) fn token_invalid() -> ApiError {
    ApiError::new(
        403,
        ErrorCode::EnrollmentTokenInvalid,
        "enrollment refused: the enrollment token is unknown, expired, revoked or used up, or this organization accepts no enrollment now, or does not exist; ask an administrator",
    )
}

/// The decision, from the organization's policy (`None`: no organization has this id) and what
/// was presented: `Ok(Some(id))` admits through that token (the insert spends a use),
/// `Ok(None)` admits without one. A presented token is always checked and spent, under any
/// policy but `closed`, so a runner given one is counted whatever the policy is when it
/// enrolls. Every refusal is one of two answers, chosen by what was presented alone.
pub(crate) fn admit<'a>(
    policy: Option<Policy>,
    presented: &Presented<'a>,
    now: i64,
) -> ApiResult<Option<&'a str>> {
    let refused = || match presented {
        Presented::Nothing => token_required(),
        Presented::Unknown | Presented::Found(_) => token_invalid(),
    };
    let policy = match policy {
        None | Some(Policy::Closed) => return Err(refused()),
        Some(policy) => policy,
    };
    match presented {
        Presented::Nothing if policy == Policy::Token => Err(refused()),
        Presented::Nothing => Ok(None),
        Presented::Unknown => Err(refused()),
        Presented::Found(token) => match token.state(now) {
            TokenState::Live => Ok(Some(token.id.as_str())),
            _ => Err(refused()),
        },
    }
}

/// Whether `text` has the shape of a token [`create`] hands out (looked up only if so).
pub(crate) fn token_shaped(text: &str) -> bool {
    text.len() == TOKEN_LEN
        && text.starts_with("ere_")
        && text[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The enrollment body's `enrollmentToken`, looked up in the organization.
pub(crate) async fn presented_token(
    body: &Map<String, Value>,
    org: &str,
    ctx: &Ctx,
) -> ApiResult<Option<enrollment::TokenRow>> {
    match body.get("enrollmentToken") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if token_shaped(text) => {
            enrollment::by_hash(&ctx.db, org, &secret_hash(text)).await
        }
        Some(_) => Err(token_invalid()),
    }
}

/// `GET /api/developer/enrollment-policy`.
pub(crate) async fn get_policy(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let org = caller.organization_id.as_str();
    let row = enrollment::policy(&ctx.db, org)
        .await?
        .ok_or_else(|| ApiError::internal("an authenticated key's organization vanished"))?;
    respond(200, &PolicyView::new(org, row.enrollment_policy))
}

/// `PUT /api/developer/enrollment-policy`: `{"policy": "open" | "token" | "closed"}`. Runners
/// already enrolled (pending or approved) are not touched; the policy decides new enrollments.
pub(crate) async fn put_policy(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["policy"])?;
    let policy = Policy::parse(required_str(&body, "policy", 16)?).ok_or_else(|| {
        ApiError::unprocessable(
            ErrorCode::InvalidEnrollmentPolicy,
            "policy must be open, token or closed",
        )
    })?;
    let org = caller.organization_id.as_str();
    let actor = caller.actor();
    let detail = json!({ "policy": policy.as_str() }).to_string();
    events::set_organization_setting(
        &ctx.db,
        enrollment::set_policy(&ctx.db, org, policy)?,
        &events::NewEvent::of_organization(
            org,
            &actor,
            EventKind::EnrollmentPolicySet,
            Some(&detail),
            ctx.now,
        ),
    )
    .await?;
    respond(200, &PolicyView::new(org, policy))
}

/// A whole number field within `range`, `default` when absent or null.
fn bounded_int(
    body: &Map<String, Value>,
    field: &str,
    range: std::ops::RangeInclusive<i64>,
    default: i64,
    code: ErrorCode,
) -> ApiResult<i64> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value.as_i64().filter(|n| range.contains(n)).ok_or_else(|| {
            ApiError::unprocessable(
                code,
                format!(
                    "{field} must be a whole number from {} to {}",
                    range.start(),
                    range.end()
                ),
            )
        }),
    }
}

/// `POST /api/developer/enrollment-tokens`: a new token, in this answer only.
pub(crate) async fn create_token(mut req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let body = json_object_capped(&mut req, SMALL_BODY_BYTES).await?;
    refuse_unknown(&body, &["name", "maxUses", "expiresInSeconds"])?;
    let name = optional_name(&body, "name", 200)?.unwrap_or(DEFAULT_NAME);
    let max_uses = bounded_int(
        &body,
        "maxUses",
        1..=MAX_USES,
        DEFAULT_USES,
        ErrorCode::InvalidMaxUses,
    )?;
    let expires_in = bounded_int(
        &body,
        "expiresInSeconds",
        MIN_EXPIRES_IN_SECONDS..=MAX_EXPIRES_IN_SECONDS,
        DEFAULT_EXPIRES_IN_SECONDS,
        ErrorCode::InvalidExpiresIn,
    )?;
    let org = caller.organization_id.as_str();
    let id = random_id("ent")?;
    let secret = random_secret(TOKEN_PREFIX)?;
    let hash = secret_hash(&secret);
    let actor = caller.actor();
    let row = enrollment::NewToken {
        id: &id,
        organization_id: org,
        name,
        token_prefix: &secret[..12],
        token_hash: &hash,
        max_uses,
        created_at: ctx.now,
        created_by: &actor,
        expires_at: ctx.now + expires_in * 1000,
    };
    let detail = json!({ "enrollmentTokenId": id, "maxUses": max_uses, "expiresAt": rfc3339(row.expires_at) })
        .to_string();
    // At 100 live tokens the schema refuses the insert: 409 ENROLLMENT_TOKENS_AT_CAP.
    store::batch(
        &ctx.db,
        vec![
            enrollment::insert(&ctx.db, &row)?,
            events::insert(
                &ctx.db,
                &events::NewEvent {
                    reason: Some(name),
                    ..events::NewEvent::of_organization(
                        org,
                        &actor,
                        EventKind::EnrollmentTokenCreated,
                        Some(&detail),
                        ctx.now,
                    )
                },
            )?,
        ],
    )
    .await?;
    let stored = enrollment::TokenRow {
        id: id.clone(),
        name: name.to_owned(),
        token_prefix: secret[..12].to_owned(),
        max_uses,
        uses: 0,
        created_at: ctx.now,
        created_by: actor.clone(),
        expires_at: row.expires_at,
        revoked_at: None,
        last_used_at: None,
    };
    respond(201, &TokenView::made(&stored, ctx.now, secret))
}

/// `GET /api/developer/enrollment-tokens`: newest first, never a secret.
pub(crate) async fn list_tokens(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let rows = enrollment::list(&ctx.db, &caller.organization_id, MAX_LISTED).await?;
    respond(
        200,
        &TokenListView {
            enrollment_tokens: rows.iter().map(|t| TokenView::new(t, ctx.now)).collect(),
        },
    )
}

/// `DELETE /api/developer/enrollment-tokens/{id}`: the token admits no more runners. Runners it
/// already admitted are not touched (revoke them one by one if they should go too).
pub(crate) async fn revoke_token(req: Request, ctx: &Ctx, id: &str) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_admin()?;
    let org = caller.organization_id.as_str();
    let actor = caller.actor();
    let detail = json!({ "enrollmentTokenId": id }).to_string();
    let event = events::NewEvent::of_organization(
        org,
        &actor,
        EventKind::EnrollmentTokenRevoked,
        Some(&detail),
        ctx.now,
    );
    let mut writes = Writes::default();
    let revoked = writes.any(enrollment::revoke(&ctx.db, org, id, ctx.now)?);
    writes.any(events::insert_if_changed(&ctx.db, &event)?);
    let changed = store::writes::write(&ctx.db, writes).await?;
    store::expect_one(changed.at(revoked), || {
        ApiError::not_found("no unrevoked enrollment token of this organization has that id")
    })?;
    respond(
        200,
        &RevokedTokenView {
            id,
            revoked_at: rfc3339(ctx.now),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_780_000_000_000;

    fn token(
        uses: i64,
        max_uses: i64,
        expires_at: i64,
        revoked_at: Option<i64>,
    ) -> enrollment::TokenRow {
        enrollment::TokenRow {
            id: "ent_1".to_owned(),
            name: "rack".to_owned(),
            token_prefix: "ere_01234567".to_owned(),
            max_uses,
            uses,
            created_at: NOW - 1000,
            created_by: "api_key:key_1".to_owned(),
            expires_at,
            revoked_at,
            last_used_at: None,
        }
    }

    #[test]
    fn open_admits_without_a_token_and_closed_refuses_even_with_one() {
        assert_eq!(
            admit(Some(Policy::Open), &Presented::Nothing, NOW).ok(),
            Some(None)
        );
        let live = token(0, 1, NOW + 1, None);
        let err = admit(Some(Policy::Closed), &Presented::Nothing, NOW).expect_err("closed");
        assert_eq!(
            (err.status(), err.code()),
            (403, ErrorCode::EnrollmentTokenRequired)
        );
        for presented in [Presented::Unknown, Presented::Found(&live)] {
            let err = admit(Some(Policy::Closed), &presented, NOW).expect_err("closed");
            assert_eq!(
                (err.status(), err.code()),
                (403, ErrorCode::EnrollmentTokenInvalid)
            );
        }
    }

    #[test]
    fn token_policy_asks_for_a_token_and_admits_a_live_one() {
        let err = admit(Some(Policy::Token), &Presented::Nothing, NOW).expect_err("required");
        assert_eq!(err.code(), ErrorCode::EnrollmentTokenRequired);
        let live = token(0, 2, NOW + 1, None);
        for policy in [Policy::Token, Policy::Open] {
            assert_eq!(
                admit(Some(policy), &Presented::Found(&live), NOW).ok(),
                Some(Some("ent_1"))
            );
        }
    }

    #[test]
    fn an_unknown_closed_or_token_organization_gets_one_answer_per_presentation() {
        let live = token(0, 1, NOW + 1, None);
        let answer = |policy, presented: &Presented<'_>| {
            let err = admit(policy, presented, NOW).expect_err("refused");
            err.body().to_string()
        };
        let without = answer(None, &Presented::Nothing);
        assert_eq!(without, answer(Some(Policy::Closed), &Presented::Nothing));
        assert_eq!(without, answer(Some(Policy::Token), &Presented::Nothing));
        let with = answer(None, &Presented::Unknown);
        assert_eq!(with, answer(None, &Presented::Found(&live)));
        assert_eq!(with, answer(Some(Policy::Closed), &Presented::Found(&live)));
        assert_eq!(with, answer(Some(Policy::Open), &Presented::Unknown));
        assert_eq!(with, answer(Some(Policy::Token), &Presented::Unknown));
    }

    #[test]
    fn every_token_that_does_not_admit_gets_one_answer() {
        let dead = [
            token(1, 1, NOW + 1, None),      // used up
            token(0, 1, NOW, None),          // expired at this instant
            token(0, 1, NOW + 1, Some(NOW)), // revoked
        ];
        for policy in [Policy::Token, Policy::Open] {
            let err = admit(Some(policy), &Presented::Unknown, NOW).expect_err("unknown");
            assert_eq!(
                (err.status(), err.code()),
                (403, ErrorCode::EnrollmentTokenInvalid)
            );
            for t in &dead {
                let err = admit(Some(policy), &Presented::Found(t), NOW).expect_err("dead");
                assert_eq!(
                    (err.status(), err.code()),
                    (403, ErrorCode::EnrollmentTokenInvalid)
                );
            }
        }
    }

    #[test]
    fn a_revoked_token_reads_revoked_before_used_up_or_expired() {
        assert_eq!(token(1, 1, NOW, Some(NOW)).state(NOW), TokenState::Revoked);
        assert_eq!(token(1, 1, NOW, None).state(NOW), TokenState::UsedUp);
        assert_eq!(token(0, 1, NOW, None).state(NOW), TokenState::Expired);
        assert_eq!(token(0, 1, NOW + 1, None).state(NOW), TokenState::Live);
    }

    #[test]
    fn only_the_shape_create_hands_out_is_looked_up() {
        let good = format!("ere_{}", "0a".repeat(32));
        assert!(token_shaped(&good));
        for bad in [
            String::new(),
            "ere_".to_owned(),
            format!("erk_{}", "0a".repeat(32)),
            format!("ere_{}", "0A".repeat(32)),
            format!("ere_{}0", "0a".repeat(32)),
            format!("ere_{}é", "0a".repeat(31)),
        ] {
            assert!(!token_shaped(&bad), "{bad:?}");
        }
    }

    #[test]
    fn a_policy_reads_back_what_it_wrote() {
        for p in [Policy::Open, Policy::Token, Policy::Closed] {
            assert_eq!(Policy::parse(p.as_str()), Some(p));
        }
        assert_eq!(Policy::parse("Open"), None);
    }
}
