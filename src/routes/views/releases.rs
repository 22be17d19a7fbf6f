//! The release registry's views: artifacts, their versions with where each is promoted, and
//! executable targets.

use serde::Serialize;
use serde_json::Value;

use super::stored_json;
use crate::platform::rfc3339;
use crate::store::releases::{ArtifactListRow, ArtifactRow, PromotionRow, TargetRow, VersionRow};

/// `ReleaseArtifact`: an artifact as its creation answers it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactView<'a> {
    id: &'a str,
    kind: &'a str,
    name: &'a str,
    created_at: Option<String>,
}

impl<'a> From<&'a ArtifactRow> for ArtifactView<'a> {
    fn from(artifact: &'a ArtifactRow) -> Self {
        ArtifactView {
            id: &artifact.id,
            kind: &artifact.kind,
            name: &artifact.name,
            created_at: rfc3339(artifact.created_at),
        }
    }
}

/// `ReleaseArtifactDetail`: the artifact with its versions, newest first.
#[derive(Serialize)]
pub(crate) struct ArtifactDetailView<'a> {
    #[serde(flatten)]
    pub(crate) artifact: ArtifactView<'a>,
    pub(crate) versions: Vec<VersionView<'a>>,
}

/// `ReleaseArtifactListItem`: an artifact in a list, with its newest version's id.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactListItemView<'a> {
    id: &'a str,
    kind: &'a str,
    name: &'a str,
    created_at: Option<String>,
    latest_version_id: Option<i64>,
}

impl<'a> From<&'a ArtifactListRow> for ArtifactListItemView<'a> {
    fn from(artifact: &'a ArtifactListRow) -> Self {
        ArtifactListItemView {
            id: &artifact.id,
            kind: &artifact.kind,
            name: &artifact.name,
            created_at: rfc3339(artifact.created_at),
            latest_version_id: artifact.latest_version_id,
        }
    }
}

/// `ReleaseArtifactPage`: a page of the organization's artifacts, newest first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ArtifactPageView<'a> {
    pub(crate) artifacts: Vec<ArtifactListItemView<'a>>,
    pub(crate) next_cursor: Option<String>,
}

/// `ReleaseVersion` (and `ReleaseVersionWithContent` when the row was read with its content).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VersionView<'a> {
    id: i64,
    artifact_id: &'a str,
    kind: &'a str,
    content_hash: &'a str,
    promotions: Vec<&'a str>,
    created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Value>,
}

impl<'a> VersionView<'a> {
    /// `promotions` are this version's environments, in dev, staging, prod order.
    pub(crate) fn new(version: &'a VersionRow, promotions: &[&'a PromotionRow]) -> Self {
        VersionView {
            id: version.id,
            artifact_id: &version.artifact_id,
            kind: &version.kind,
            content_hash: &version.content_hash,
            promotions: promotions.iter().map(|p| p.environment.as_str()).collect(),
            created_at: rfc3339(version.created_at),
            content: version.content.as_deref().map(stored_json),
        }
    }
}

/// `ReleaseVersionCreated`: a new version, without its content (the request's).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NewVersionView<'a> {
    pub(crate) id: i64,
    pub(crate) artifact_id: &'a str,
    pub(crate) content_hash: &'a str,
    pub(crate) created_at: Option<String>,
}

/// `ReleasePromotion`: a version's promotion to an environment, when it was first made.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromotionView<'a> {
    version_id: i64,
    environment: &'a str,
    promoted_at: Option<String>,
}

impl<'a> From<&'a PromotionRow> for PromotionView<'a> {
    fn from(promotion: &'a PromotionRow) -> Self {
        PromotionView {
            version_id: promotion.version_id,
            environment: &promotion.environment,
            promoted_at: rfc3339(promotion.promoted_at),
        }
    }
}

/// `ExecutableTarget`: what runners can execute. `versionId` and `contentHash` are both null
/// or both set.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TargetView<'a> {
    id: &'a str,
    key: &'a str,
    repository: &'a str,
    entrypoint: &'a str,
    requirements: Value,
    evaluation_id: Option<&'a str>,
    version_id: Option<i64>,
    content_hash: Option<&'a str>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

impl<'a> From<&'a TargetRow> for TargetView<'a> {
    fn from(target: &'a TargetRow) -> Self {
        TargetView {
            id: &target.id,
            key: &target.target_key,
            repository: &target.repository,
            entrypoint: &target.entrypoint,
            requirements: stored_json(&target.requirements),
            evaluation_id: target.evaluation_id.as_deref(),
            version_id: target.version_id,
            content_hash: target.content_hash.as_deref(),
            created_at: rfc3339(target.created_at),
            updated_at: rfc3339(target.updated_at),
        }
    }
}

/// `GET /api/releases/targets`'s answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TargetListView<'a> {
    pub(crate) targets: Vec<TargetView<'a>>,
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;
    use crate::routes::views::to_value;

    /// 2026-01-01T00:00:00Z.
    const NOW: i64 = 1_767_225_600_000;

    /// A row as D1 answers it: its columns by name.
    fn row<T: DeserializeOwned>(columns: Value) -> T {
        serde_json::from_value(columns).unwrap()
    }

    #[test]
    fn an_artifact_reads_with_its_versions_and_their_promotions() {
        let artifact: ArtifactRow = row(json!({
            "id": "art_1", "kind": "prompt", "name": "capitals", "created_at": NOW,
        }));
        let version: VersionRow = row(json!({
            "id": 3, "artifact_id": "art_1", "kind": "prompt", "content_hash": "ab".repeat(32),
            "created_at": NOW,
        }));
        let promotions: Vec<PromotionRow> = ["staging", "prod"]
            .into_iter()
            .map(|env| row(json!({"version_id": 3, "environment": env, "promoted_at": NOW})))
            .collect();
        let promoted: Vec<&PromotionRow> = promotions.iter().collect();
        let detail = ArtifactDetailView {
            artifact: ArtifactView::from(&artifact),
            versions: vec![VersionView::new(&version, &promoted)],
        };
        assert_eq!(
            to_value(&detail).unwrap(),
            json!({
                "id": "art_1", "kind": "prompt", "name": "capitals",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "versions": [{
                    "id": 3, "artifactId": "art_1", "kind": "prompt",
                    "contentHash": "ab".repeat(32), "promotions": ["staging", "prod"],
                    "createdAt": "2026-01-01T00:00:00.000Z",
                }],
            })
        );
        let listed: ArtifactListRow = row(json!({
            "id": "art_1", "kind": "prompt", "name": "capitals", "created_at": NOW,
            "latest_version_id": null,
        }));
        assert_eq!(
            to_value(&ArtifactListItemView::from(&listed)).unwrap(),
            json!({
                "id": "art_1", "kind": "prompt", "name": "capitals",
                "createdAt": "2026-01-01T00:00:00.000Z", "latestVersionId": null,
            })
        );
    }

    #[test]
    fn a_version_read_with_its_content_shows_it_as_stored() {
        let version: VersionRow = row(json!({
            "id": 3, "artifact_id": "art_1", "kind": "prompt", "content_hash": "ab".repeat(32),
            "created_at": NOW, "content": r#"{"temperature":0.10}"#,
        }));
        let view = to_value(&VersionView::new(&version, &[])).unwrap();
        assert_eq!(view["promotions"], json!([]));
        assert_eq!(view["content"].to_string(), r#"{"temperature":0.10}"#);
    }

    #[test]
    fn a_target_reads_with_its_key_and_binding() {
        let target: TargetRow = row(json!({
            "id": "tgt_1", "target_key": "capitals-eval", "repository": "acme/evals",
            "entrypoint": "run.py", "requirements": r#"{"runtime":"python3.12"}"#,
            "evaluation_id": null, "version_id": null, "content_hash": null,
            "created_at": NOW, "updated_at": NOW,
        }));
        let expected = json!({
            "id": "tgt_1", "key": "capitals-eval", "repository": "acme/evals",
            "entrypoint": "run.py", "requirements": {"runtime": "python3.12"},
            "evaluationId": null, "versionId": null, "contentHash": null,
            "createdAt": "2026-01-01T00:00:00.000Z", "updatedAt": "2026-01-01T00:00:00.000Z",
        });
        assert_eq!(to_value(&TargetView::from(&target)).unwrap(), expected);
        assert_eq!(
            to_value(&TargetListView {
                targets: vec![TargetView::from(&target)],
            })
            .unwrap(),
            json!({"targets": [expected]})
        );
    }

    #[test]
    fn a_page_of_artifacts_reads_with_its_cursor() {
        let listed: ArtifactListRow = row(json!({
            "id": "art_1", "kind": "prompt", "name": "capitals", "created_at": NOW,
            "latest_version_id": 3,
        }));
        assert_eq!(
            to_value(&ArtifactPageView {
                artifacts: vec![ArtifactListItemView::from(&listed)],
                next_cursor: None,
            })
            .unwrap(),
            json!({
                "artifacts": [{
                    "id": "art_1", "kind": "prompt", "name": "capitals",
                    "createdAt": "2026-01-01T00:00:00.000Z", "latestVersionId": 3,
                }],
                "nextCursor": null,
            })
        );
    }

    #[test]
    fn a_new_version_and_a_promotion_read_as_they_always_have() {
        assert_eq!(
            to_value(&NewVersionView {
                id: 3,
                artifact_id: "art_1",
                content_hash: &"ab".repeat(32),
                created_at: rfc3339(NOW),
            })
            .unwrap(),
            json!({
                "id": 3, "artifactId": "art_1", "contentHash": "ab".repeat(32),
                "createdAt": "2026-01-01T00:00:00.000Z",
            })
        );
        let promotion: PromotionRow =
            row(json!({"version_id": 3, "environment": "prod", "promoted_at": NOW}));
        assert_eq!(
            to_value(&PromotionView::from(&promotion)).unwrap(),
            json!({"versionId": 3, "environment": "prod", "promotedAt": "2026-01-01T00:00:00.000Z"})
        );
    }
}
