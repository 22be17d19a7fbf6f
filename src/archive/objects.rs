//! The archive's objects in R2 (binding `ARCHIVE`): written under their content-addressed key
//! with their SHA-256 (which R2 checks on receipt), read back and hashed again, and read, whole
//! or by range, for an archived job's reads.

use edgerunner_protocol::archive::{ObjectDigest, ObjectHasher};
use edgerunner_protocol::error_code::ErrorCode;
use futures_util::StreamExt as _;
use worker::{Bucket, Env, MultipartUpload, Object, ObjectBody, Range, ResponseBody, UploadedPart};

use crate::error::{ApiError, ApiResult};

/// The binding's name in `wrangler.toml`.
const BINDING: &str = "ARCHIVE";

/// A bundle up to this size is written in one `put` from memory; a larger one in parts.
pub(crate) const SINGLE_PUT_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// The size of every part of a multipart upload but the last (R2: 5 MiB to 5 GiB, all equal
/// but the last).
pub(crate) const PART_BYTES: usize = 8 * 1024 * 1024;

/// The archive bucket, or `503 ARCHIVE_UNAVAILABLE` when the Worker has none bound.
pub(crate) fn bucket(env: &Env) -> ApiResult<Bucket> {
    env.bucket(BINDING).map_err(|err| {
        worker::console_error!("the {BINDING} R2 binding: {err:?}");
        unavailable()
    })
}

/// The answer when the archive cannot be reached.
pub(crate) fn unavailable() -> ApiError {
    ApiError::unavailable(
        ErrorCode::ArchiveUnavailable,
        "the job archive (R2) cannot be reached; try again",
    )
}

fn r2_failed(what: &str, key: &str, err: impl std::fmt::Debug) -> ApiError {
    worker::console_error!("R2 {what} {key}: {err:?}");
    unavailable()
}

/// Deletes the objects under `keys` (one R2 call); a key with no object is no error.
pub(crate) async fn delete_all(bucket: &Bucket, keys: &[String]) -> ApiResult<()> {
    bucket
        .delete_multiple(keys.iter().map(String::as_str).collect())
        .await
        .map_err(|err| r2_failed("delete", &keys.join(" "), err))
}

/// Writes `bytes` under `key`; R2 refuses them unless they hash to `digest`.
pub(crate) async fn put(
    bucket: &Bucket,
    key: &str,
    bytes: Vec<u8>,
    digest: &ObjectDigest,
) -> ApiResult<()> {
    bucket
        .put(key, bytes)
        .sha256(digest.sha256.to_bytes().to_vec())
        .execute()
        .await
        .map_err(|err| r2_failed("put", key, err))?;
    Ok(())
}

/// A multipart upload under `key`, fed in pieces of any size: it cuts them into parts of
/// exactly [`PART_BYTES`] (the last one shorter) and hashes what it sends.
pub(crate) struct PartsWriter {
    key: String,
    upload: MultipartUpload,
    parts: Vec<UploadedPart>,
    pending: Vec<u8>,
    hasher: ObjectHasher,
}

impl PartsWriter {
    pub(crate) async fn start(bucket: &Bucket, key: &str) -> ApiResult<PartsWriter> {
        let upload = bucket
            .create_multipart_upload(key)
            .execute()
            .await
            .map_err(|err| r2_failed("create multipart upload", key, err))?;
        Ok(PartsWriter {
            key: key.to_owned(),
            upload,
            parts: Vec::new(),
            pending: Vec::with_capacity(PART_BYTES),
            hasher: ObjectHasher::new(),
        })
    }

    pub(crate) async fn write(&mut self, mut bytes: &[u8]) -> ApiResult<()> {
        self.hasher.update(bytes);
        while !bytes.is_empty() {
            let room = PART_BYTES - self.pending.len();
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            bytes = later;
            if self.pending.len() == PART_BYTES {
                self.send_part().await?;
            }
        }
        Ok(())
    }

    async fn send_part(&mut self) -> ApiResult<()> {
        let number = u16::try_from(self.parts.len() + 1)
            .map_err(|_| ApiError::internal("a bundle of more than 65,535 parts"))?;
        let part = std::mem::replace(&mut self.pending, Vec::with_capacity(PART_BYTES));
        let uploaded = self
            .upload
            .upload_part(number, part)
            .await
            .map_err(|err| r2_failed("upload part", &self.key, err))?;
        self.parts.push(uploaded);
        Ok(())
    }

    /// Sends the last part and completes the upload, if what was sent hashes to `expected`;
    /// otherwise aborts it.
    pub(crate) async fn finish(mut self, expected: &ObjectDigest) -> ApiResult<()> {
        let sent = self.hasher.clone().finish();
        if &sent != expected {
            let _ = self.upload.abort().await;
            return Err(ApiError::internal(format!(
                "{} changed between its two passes: {} bytes {}, then {} bytes {}",
                self.key, expected.bytes, expected.sha256, sent.bytes, sent.sha256
            )));
        }
        if !self.pending.is_empty() || self.parts.is_empty() {
            self.send_part().await?;
        }
        self.upload
            .complete(self.parts)
            .await
            .map_err(|err| r2_failed("complete multipart upload", &self.key, err))?;
        Ok(())
    }
}

/// Reads `key` back whole, hashing it as it streams: `None` if there is no such object.
pub(crate) async fn read_back(bucket: &Bucket, key: &str) -> ApiResult<Option<ObjectDigest>> {
    let Some(object) = bucket
        .get(key)
        .execute()
        .await
        .map_err(|err| r2_failed("get", key, err))?
    else {
        return Ok(None);
    };
    // The body borrows the object: it stays alive until the stream is read.
    let mut stream = body_of(&object, key)?
        .stream()
        .map_err(|err| r2_failed("read", key, err))?;
    let mut hasher = ObjectHasher::new();
    while let Some(piece) = stream.next().await {
        hasher.update(&piece.map_err(|err| r2_failed("read", key, err))?);
    }
    Ok(Some(hasher.finish()))
}

/// `key`'s bytes, whole (`range` `None`) or `length` of them from `offset`.
pub(crate) async fn read(
    bucket: &Bucket,
    key: &str,
    range: Option<(u64, u64)>,
) -> ApiResult<Vec<u8>> {
    let object = get(bucket, key, range).await?;
    body_of(&object, key)?
        .bytes()
        .await
        .map_err(|err| r2_failed("read", key, err))
}

/// `key`'s body as a response body the runtime streams to the client.
pub(crate) async fn body(bucket: &Bucket, key: &str) -> ApiResult<ResponseBody> {
    let object = get(bucket, key, None).await?;
    body_of(&object, key)?
        .response_body()
        .map_err(|err| r2_failed("read", key, err))
}

/// The archived object `key` (or `length` bytes of it from `offset`); one that is not there is
/// an error.
async fn get(bucket: &Bucket, key: &str, range: Option<(u64, u64)>) -> ApiResult<Object> {
    let mut get = bucket.get(key);
    if let Some((offset, length)) = range {
        get = get.range(Range::OffsetWithLength { offset, length });
    }
    get.execute()
        .await
        .map_err(|err| r2_failed("get", key, err))?
        .ok_or_else(|| missing(key))
}

/// The body of `object` (it borrows the object, which must outlive it).
fn body_of<'a>(object: &'a Object, key: &str) -> ApiResult<ObjectBody<'a>> {
    object
        .body()
        .ok_or_else(|| ApiError::internal(format!("R2 object {key} has no body")))
}

/// An archived job's object is gone: a fault of ours (or of the bucket's), never the client's.
fn missing(key: &str) -> ApiError {
    ApiError::internal(format!("the archived object {key} is not in R2"))
}
