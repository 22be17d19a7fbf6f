//! `ApiKey`: an organization's API keys as listed, as made (the one answer with the secret),
//! as the calling key sees itself, and as revoked. One shape of a key for all of them.

use edgerunner_protocol::kind::Role;
use serde::Serialize;
use serde_json::Value;

use super::stored_json;
use crate::platform::rfc3339;
use crate::store::api_keys::ApiKeyRow;

/// `ApiKey`: a key as listed, never its secret nor the secret's hash.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiKeyView<'a> {
    id: &'a str,
    name: &'a str,
    prefix: &'a str,
    role: Role,
    /// As stored: sorted, without duplicates.
    scopes: Value,
    created_at: Option<String>,
    last_used_at: Option<String>,
    /// `null` while the key is live.
    revoked_at: Option<String>,
    /// `null` for a key made before keys expired (migration 0013) or by
    /// `scripts/bootstrap-admin`.
    expires_at: Option<String>,
}

impl<'a> From<&'a ApiKeyRow> for ApiKeyView<'a> {
    fn from(key: &'a ApiKeyRow) -> Self {
        ApiKeyView {
            id: &key.id,
            name: &key.name,
            prefix: &key.key_prefix,
            role: key.role,
            scopes: stored_json(&key.scopes),
            created_at: rfc3339(key.created_at),
            last_used_at: key.last_used_at.and_then(rfc3339),
            revoked_at: key.revoked_at.and_then(rfc3339),
            expires_at: key.expires_at.and_then(rfc3339),
        }
    }
}

/// `ApiKeyCreated`: the key just made, as it will be listed, with its secret: `apiKey`
/// appears in this answer only (only its SHA-256 is stored).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MadeApiKeyView<'a> {
    #[serde(flatten)]
    pub(crate) key: ApiKeyView<'a>,
    pub(crate) api_key: &'a str,
}

/// `GET /api/developer/api-keys`'s answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiKeyListView<'a> {
    pub(crate) api_keys: Vec<ApiKeyView<'a>>,
}

/// `GET /api/developer/api-keys/self`'s answer: the calling key and its organization.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OwnApiKeyView<'a> {
    pub(crate) organization: OrganizationView<'a>,
    pub(crate) api_key: ApiKeyView<'a>,
}

/// An organization by id and name.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OrganizationView<'a> {
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
}

/// `DELETE /api/developer/api-keys/{id}`'s answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RevokedApiKeyView<'a> {
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

    fn key(revoked_at: Option<i64>, expires_at: Option<i64>) -> ApiKeyRow {
        ApiKeyRow {
            id: "key_0a1b2c3d4e5f60718293a4b5".to_owned(),
            organization_id: "org_1".to_owned(),
            name: "ci".to_owned(),
            key_prefix: "erk_01234567".to_owned(),
            role: Role::Member,
            scopes: r#"["runs:read","runs:write"]"#.to_owned(),
            created_at: NOW,
            last_used_at: None,
            revoked_at,
            expires_at,
        }
    }

    #[test]
    fn a_key_reads_as_it_always_has_live_revoked_or_without_an_end() {
        let live = key(None, Some(NOW + 86_400_000));
        assert_eq!(
            to_value(&ApiKeyView::from(&live)).unwrap(),
            json!({
                "id": "key_0a1b2c3d4e5f60718293a4b5", "name": "ci", "prefix": "erk_01234567",
                "role": "member", "scopes": ["runs:read", "runs:write"],
                "createdAt": "2026-01-01T00:00:00.000Z", "lastUsedAt": null, "revokedAt": null,
                "expiresAt": "2026-01-02T00:00:00.000Z",
            })
        );
        // The first key (scripts/bootstrap-admin) has no end; a revoked one says when.
        let first = key(Some(NOW), None);
        let view = to_value(&ApiKeyView::from(&first)).unwrap();
        assert_eq!(
            (&view["revokedAt"], &view["expiresAt"]),
            (&json!("2026-01-01T00:00:00.000Z"), &Value::Null)
        );
        assert_eq!(
            to_value(&ApiKeyListView {
                api_keys: vec![ApiKeyView::from(&live)]
            })
            .unwrap()["apiKeys"][0]["id"],
            "key_0a1b2c3d4e5f60718293a4b5"
        );
    }

    #[test]
    fn a_made_key_is_the_listed_shape_with_its_secret() {
        let made = key(None, Some(NOW + 86_400_000));
        let secret = format!("erk_{}", "ab".repeat(32));
        assert_eq!(
            to_value(&MadeApiKeyView {
                key: ApiKeyView::from(&made),
                api_key: &secret,
            })
            .unwrap(),
            json!({
                "id": "key_0a1b2c3d4e5f60718293a4b5", "name": "ci", "prefix": "erk_01234567",
                "role": "member", "scopes": ["runs:read", "runs:write"],
                "createdAt": "2026-01-01T00:00:00.000Z", "lastUsedAt": null, "revokedAt": null,
                "expiresAt": "2026-01-02T00:00:00.000Z", "apiKey": secret,
            })
        );
    }

    #[test]
    fn the_own_key_reads_with_its_organization_and_a_revoked_one_with_its_time() {
        let own = key(None, None);
        let view = to_value(&OwnApiKeyView {
            organization: OrganizationView {
                id: "org_1",
                name: "Acme",
            },
            api_key: ApiKeyView::from(&own),
        })
        .unwrap();
        assert_eq!(
            view,
            json!({
                "organization": {"id": "org_1", "name": "Acme"},
                "apiKey": {
                    "id": "key_0a1b2c3d4e5f60718293a4b5", "name": "ci", "prefix": "erk_01234567",
                    "role": "member", "scopes": ["runs:read", "runs:write"],
                    "createdAt": "2026-01-01T00:00:00.000Z", "lastUsedAt": null,
                    "revokedAt": null, "expiresAt": null,
                },
            })
        );
        assert_eq!(
            to_value(&RevokedApiKeyView {
                id: "key_1",
                revoked_at: rfc3339(NOW),
            })
            .unwrap(),
            json!({"id": "key_1", "revokedAt": "2026-01-01T00:00:00.000Z"})
        );
    }
}
