//! `release_artifacts`, `release_versions`, `release_promotions`, `executable_targets`: the
//! immutable things jobs run, where they are promoted, and what runners are set up to execute.
//!
//! Versions are written once and never updated (a schema trigger refuses any UPDATE), so the
//! content hash a job or a signed envelope names is the hash of what a runner will be served.

use serde::Deserialize;
use worker::D1PreparedStatement;

use super::{all, first, run, states, stmt, Arg, Db};
use crate::error::ApiResult;

// ---------------------------------------------------------------------------------------------
// Artifacts
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct ArtifactRow {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) created_at: i64,
}

pub(crate) struct NewArtifact<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) name: &'a str,
    pub(crate) now: i64,
}

/// Rows inserted (1); a second artifact of the same kind and name in the organization fails
/// `UNIQUE (organization_id, kind, name)`, naming `release_artifacts.name`.
pub(crate) async fn insert_artifact(db: &Db, new: &NewArtifact<'_>) -> ApiResult<usize> {
    run(
        db,
        include_str!("queries/releases/insert_artifact.sql"),
        &[
            new.id.into(),
            new.organization_id.into(),
            new.kind.into(),
            new.name.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn get_artifact(db: &Db, org: &str, id: &str) -> ApiResult<Option<ArtifactRow>> {
    first(
        db,
        include_str!("queries/releases/get_artifact.sql"),
        &[org.into(), id.into()],
    )
    .await
}

/// An artifact in a list, with its newest version's id (`None` before its first version).
#[derive(Deserialize)]
pub(crate) struct ArtifactListRow {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) created_at: i64,
    pub(crate) latest_version_id: Option<i64>,
}

/// A page of the organization's artifacts, newest first (`created_at`, then id, descending),
/// after the keyset cursor `after` when given, only of `kind` when given. The newest version
/// is read from `release_versions_by_artifact`'s end, one index probe per row.
pub(crate) async fn list_artifacts(
    db: &Db,
    org: &str,
    kind: Option<&str>,
    after: Option<(i64, &str)>,
    limit: i64,
) -> ApiResult<Vec<ArtifactListRow>> {
    let (after_at, after_id) = match after {
        Some((at, id)) => (Arg::Int(at), id.into()),
        None => (Arg::Null, Arg::Null),
    };
    all(
        db,
        include_str!("queries/artifacts_page.sql"),
        &[org.into(), kind.into(), after_at, after_id, Arg::Int(limit)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Versions
// ---------------------------------------------------------------------------------------------

/// A version with its artifact's kind; `content` only where a query asks for it.
#[derive(Deserialize)]
pub(crate) struct VersionRow {
    pub(crate) id: i64,
    pub(crate) artifact_id: String,
    pub(crate) kind: String,
    pub(crate) content_hash: String,
    pub(crate) created_at: i64,
    #[serde(default)]
    pub(crate) content: Option<String>,
}

pub(crate) struct NewVersion<'a> {
    pub(crate) organization_id: &'a str,
    pub(crate) artifact_id: &'a str,
    pub(crate) content_json: &'a str,
    pub(crate) content_hash: &'a str,
    pub(crate) now: i64,
}

#[derive(Deserialize)]
struct InsertedId {
    id: i64,
}

/// Inserts a version of an artifact of the caller's organization and returns its new id, or
/// `None` when no such artifact exists there (the guard; the composite foreign key agrees).
/// Its content is charged to the organization's quota in the same batch (`quota`: the
/// deployment's default), which refuses the batch past it.
pub(crate) async fn insert_version(
    db: &Db,
    new: &NewVersion<'_>,
    quota: i64,
) -> ApiResult<Option<i64>> {
    let insert = stmt(
        db,
        include_str!("queries/releases/insert_version.sql"),
        &[
            new.artifact_id.into(),
            new.organization_id.into(),
            new.content_json.into(),
            new.content_hash.into(),
            Arg::Int(new.now),
        ],
    )?;
    let bytes = super::usage::stored_bytes(new.content_json) + super::usage::VERSION_ROW_BYTES;
    let charge = super::usage::charge(db, new.organization_id, bytes, quota)?;
    let results = super::write_batch(db, vec![insert, charge]).await?;
    let rows: Vec<InsertedId> = super::rows_of(&results, 0)?;
    Ok(rows.first().map(|row| row.id))
}

pub(crate) async fn get_version(
    db: &Db,
    org: &str,
    id: i64,
    with_content: bool,
) -> ApiResult<Option<VersionRow>> {
    // Two statements rather than one built at run time: every statement is a named file.
    let sql = match with_content {
        true => include_str!("queries/releases/get_version_with_content.sql"),
        false => include_str!("queries/releases/get_version.sql"),
    };
    first(db, sql, &[org.into(), Arg::Int(id)]).await
}

/// An artifact's versions, newest first, without content.
pub(crate) async fn versions_of(
    db: &Db,
    org: &str,
    artifact_id: &str,
    limit: i64,
) -> ApiResult<Vec<VersionRow>> {
    all(
        db,
        include_str!("queries/releases/versions_of.sql"),
        &[org.into(), artifact_id.into(), Arg::Int(limit)],
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Promotions
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct PromotionRow {
    pub(crate) version_id: i64,
    pub(crate) environment: String,
    pub(crate) promoted_at: i64,
}

pub(crate) async fn promotions_of_version(
    db: &Db,
    org: &str,
    version_id: i64,
) -> ApiResult<Vec<PromotionRow>> {
    all(
        db,
        include_str!("queries/releases/promotions_of_version.sql"),
        &[
            org.into(),
            Arg::Int(version_id),
            states::environment_order().as_str().into(),
        ],
    )
    .await
}

/// The promotions of every version of an artifact.
pub(crate) async fn promotions_of_artifact(
    db: &Db,
    org: &str,
    artifact_id: &str,
) -> ApiResult<Vec<PromotionRow>> {
    all(
        db,
        include_str!("queries/releases/promotions_of_artifact.sql"),
        &[
            org.into(),
            artifact_id.into(),
            states::environment_order().as_str().into(),
        ],
    )
    .await
}

pub(crate) async fn get_promotion(
    db: &Db,
    org: &str,
    version_id: i64,
    environment: &str,
) -> ApiResult<Option<PromotionRow>> {
    first(
        db,
        include_str!("queries/releases/get_promotion.sql"),
        &[org.into(), Arg::Int(version_id), environment.into()],
    )
    .await
}

pub(crate) struct NewPromotion<'a> {
    pub(crate) organization_id: &'a str,
    pub(crate) version_id: i64,
    pub(crate) environment: &'a str,
    pub(crate) promoted_by: &'a str,
    pub(crate) now: i64,
}

/// Promotes a version of the caller's organization. Changes one row for a first promotion and
/// none when the version is already in that environment (`PRIMARY KEY (version_id,
/// environment)`: promoting twice is one promotion, and the first `promoted_at` stands) or
/// when the version is not the organization's. Put an `events::insert_if_changed` right after
/// it in the same batch so that only a real promotion is audited.
pub(crate) fn promote(db: &Db, new: &NewPromotion<'_>) -> ApiResult<D1PreparedStatement> {
    stmt(
        db,
        include_str!("queries/releases/promote.sql"),
        &[
            Arg::Int(new.version_id),
            new.organization_id.into(),
            new.environment.into(),
            Arg::Int(new.now),
            new.promoted_by.into(),
        ],
    )
}

// ---------------------------------------------------------------------------------------------
// Executable targets
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
pub(crate) struct TargetRow {
    pub(crate) id: String,
    pub(crate) target_key: String,
    pub(crate) repository: String,
    pub(crate) entrypoint: String,
    pub(crate) requirements: String,
    pub(crate) evaluation_id: Option<String>,
    pub(crate) version_id: Option<i64>,
    pub(crate) content_hash: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

pub(crate) struct NewTarget<'a> {
    pub(crate) id: &'a str,
    pub(crate) organization_id: &'a str,
    pub(crate) key: &'a str,
    pub(crate) repository: &'a str,
    pub(crate) entrypoint: &'a str,
    pub(crate) requirements_json: &'a str,
    pub(crate) evaluation_id: Option<&'a str>,
    /// The bound version and the content hash it was read with.
    pub(crate) version: Option<(i64, &'a str)>,
    pub(crate) now: i64,
}

/// Inserts a target. The guard re-checks that a bound version is the organization's and has
/// that content hash, so a target never records a hash its version does not have; zero rows
/// changed means it did not hold. A taken key fails `UNIQUE (organization_id, target_key)`,
/// naming `executable_targets.target_key`.
pub(crate) async fn insert_target(db: &Db, new: &NewTarget<'_>) -> ApiResult<usize> {
    let (version_id, content_hash) = match new.version {
        Some((id, hash)) => (Some(id), Some(hash)),
        None => (None, None),
    };
    run(
        db,
        include_str!("queries/releases/insert_target.sql"),
        &[
            new.id.into(),
            new.organization_id.into(),
            new.key.into(),
            new.repository.into(),
            new.entrypoint.into(),
            new.requirements_json.into(),
            new.evaluation_id.into(),
            version_id.into(),
            content_hash.into(),
            Arg::Int(new.now),
        ],
    )
    .await
}

pub(crate) async fn get_target(db: &Db, org: &str, id: &str) -> ApiResult<Option<TargetRow>> {
    first(
        db,
        include_str!("queries/releases/get_target.sql"),
        &[org.into(), id.into()],
    )
    .await
}

/// Newest first; only those of one evaluation when `evaluation_id` is given.
pub(crate) async fn list_targets(
    db: &Db,
    org: &str,
    evaluation_id: Option<&str>,
    limit: i64,
) -> ApiResult<Vec<TargetRow>> {
    match evaluation_id {
        Some(evaluation_id) => {
            all(
                db,
                include_str!("queries/releases/list_targets.sql"),
                &[org.into(), evaluation_id.into(), Arg::Int(limit)],
            )
            .await
        }
        None => {
            all(
                db,
                include_str!("queries/releases/list_targets_2.sql"),
                &[org.into(), Arg::Int(limit)],
            )
            .await
        }
    }
}
