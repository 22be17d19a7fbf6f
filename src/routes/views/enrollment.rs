//! `EnrollmentPolicy` and `EnrollmentToken`: who may enroll, and the tokens that admit
//! key-pair runners (never a token's secret but in the answer that made it).

use serde::Serialize;

use crate::platform::rfc3339;
use crate::store::enrollment::TokenRow;
use edgerunner_protocol::enrollment::EnrollmentPolicy as Policy;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyView<'a> {
    organization_id: &'a str,
    policy: &'static str,
}

impl<'a> PolicyView<'a> {
    pub(crate) fn new(organization_id: &'a str, policy: Policy) -> Self {
        PolicyView {
            organization_id,
            policy: policy.as_str(),
        }
    }
}

/// A token as listed, and (with `enrollment_token`, its secret) as made.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenView<'a> {
    id: &'a str,
    name: &'a str,
    prefix: &'a str,
    state: &'static str,
    uses: i64,
    max_uses: i64,
    created_at: Option<String>,
    created_by: &'a str,
    expires_at: Option<String>,
    revoked_at: Option<String>,
    last_used_at: Option<String>,
    /// What an admin may do to it now: `revoke` until it is revoked.
    actions: Vec<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enrollment_token: Option<String>,
}

impl<'a> TokenView<'a> {
    /// The token as it stands at `now`.
    pub(crate) fn new(token: &'a TokenRow, now: i64) -> Self {
        let state = token.state(now);
        TokenView {
            id: &token.id,
            name: &token.name,
            prefix: &token.token_prefix,
            state: state.as_str(),
            uses: token.uses,
            max_uses: token.max_uses,
            created_at: rfc3339(token.created_at),
            created_by: &token.created_by,
            expires_at: rfc3339(token.expires_at),
            revoked_at: token.revoked_at.and_then(rfc3339),
            last_used_at: token.last_used_at.and_then(rfc3339),
            actions: state.actions(),
            enrollment_token: None,
        }
    }

    /// The answer that made it: with its secret, this once.
    pub(crate) fn made(token: &'a TokenRow, now: i64, secret: String) -> Self {
        TokenView {
            enrollment_token: Some(secret),
            ..TokenView::new(token, now)
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TokenListView<'a> {
    pub(crate) enrollment_tokens: Vec<TokenView<'a>>,
}

/// `DELETE …/enrollment-tokens/{id}`'s answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RevokedTokenView<'a> {
    pub(crate) id: &'a str,
    pub(crate) revoked_at: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    fn token(uses: i64, expires_at: i64, revoked_at: Option<i64>) -> TokenRow {
        TokenRow {
            id: "ent_0123456789abcdef01234567".to_owned(),
            name: "rack 7".to_owned(),
            token_prefix: "ere_01234567".to_owned(),
            max_uses: 2,
            uses,
            created_at: NOW - 1_000,
            created_by: "admin:key_1".to_owned(),
            expires_at,
            revoked_at,
            last_used_at: None,
        }
    }

    #[test]
    fn a_token_reads_as_it_always_has_and_offers_revoke_until_revoked() {
        let live = token(0, NOW + 60_000, None);
        assert_eq!(
            to_value(&TokenView::new(&live, NOW)).unwrap(),
            json!({
                "id": "ent_0123456789abcdef01234567", "name": "rack 7", "prefix": "ere_01234567",
                "state": "live", "uses": 0, "maxUses": 2,
                "createdAt": "2025-12-31T23:59:59.000Z", "createdBy": "admin:key_1",
                "expiresAt": "2026-01-01T00:01:00.000Z", "revokedAt": null, "lastUsedAt": null,
                "actions": ["revoke"],
            })
        );
        for (row, state, actions) in [
            (token(2, NOW + 60_000, None), "used_up", json!(["revoke"])),
            (token(0, NOW, None), "expired", json!(["revoke"])),
            (token(0, NOW + 60_000, Some(NOW)), "revoked", json!([])),
        ] {
            let view = to_value(&TokenView::new(&row, NOW)).unwrap();
            assert_eq!(
                (&view["state"], &view["actions"]),
                (&json!(state), &actions)
            );
        }
        let made = to_value(&TokenView::made(&live, NOW, "ere_secret".to_owned())).unwrap();
        assert_eq!(made["enrollmentToken"], "ere_secret");
    }
}
