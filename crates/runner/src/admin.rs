//! The REST operations an admin uses daily, with an API key (`Authorization: Bearer erk_…`).
//!
//! Each method returns the server's JSON answer as is; `edgerunner admin` prints it (`--json`)
//! or renders it for a person. Reads are retried on transient failures; writes only when the
//! request certainly never left (a repeated enqueue is harmless thanks to its idempotency
//! key, but a repeated rotation is not).

use reqwest::Method;
use serde_json::{json, Value};

use crate::http::{ClientError, Http};
use crate::retry::{retry, RetryPolicy};

pub struct AdminClient {
    http: Http,
    api_key: String,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminClient")
            .field("server", &self.http.base())
            .field("api_key", &"<redacted>")
            .finish()
    }
}

/// `text` as one URL path segment.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `path?key=value&…` with each present value percent-encoded; absent ones are left out.
pub fn with_query(path: &str, params: &[(&str, Option<String>)]) -> String {
    let mut out = path.to_owned();
    let mut separator = '?';
    for (key, value) in params {
        if let Some(value) = value {
            out.push(separator);
            out.push_str(key);
            out.push('=');
            out.push_str(&segment(value));
            separator = '&';
        }
    }
    out
}

/// The most bytes of one answer an admin command reads: a custody bundle holds up to 64 MiB of
/// stream payload and its JSON around it.
pub const MAX_ADMIN_ANSWER_BYTES: usize = 256 * 1024 * 1024;

const ENROLLMENT_POLICY: &str = "/api/developer/enrollment-policy";
const ENROLLMENT_TOKENS: &str = "/api/developer/enrollment-tokens";
const RETENTION: &str = "/api/developer/retention";

impl AdminClient {
    pub fn new(http: Http, api_key: &str) -> Result<Self, ClientError> {
        let api_key = api_key.trim();
        if api_key.is_empty() {
            return Err(ClientError::Config(
                "no API key: set EDGERUNNER_API_KEY or pass --api-key-file FILE".into(),
            ));
        }
        Ok(Self {
            http: http.with_answer_limit(MAX_ADMIN_ANSWER_BYTES),
            api_key: api_key.to_owned(),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let repeatable = method == Method::GET;
        self.call_as(method, path, body, repeatable).await
    }

    /// `repeatable`: the request may be sent again after an answer that was lost, not only
    /// after one that certainly never left (a read, or a write whose repetition changes
    /// nothing more than the first did).
    async fn call_as(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        repeatable: bool,
    ) -> Result<Value, ClientError> {
        let safe: fn(&ClientError) -> bool = if repeatable {
            ClientError::is_transient
        } else {
            ClientError::never_sent
        };
        let answer = retry(RetryPolicy::DEFAULT, safe, || {
            self.http
                .send(method.clone(), path, Some(&self.api_key), body)
        })
        .await?;
        if answer.text.trim().is_empty() {
            return Ok(Value::Null);
        }
        answer.json(&format!("{method} {path}"))
    }

    /// `GET /api/remote-runners/queues`: each queue's jobs and runners now.
    pub async fn queues(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, "/api/remote-runners/queues", None)
            .await
    }

    pub async fn list_runners(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, "/api/remote-runners", None).await
    }

    pub async fn runner(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::GET,
            &format!("/api/remote-runners/{}", segment(id)),
            None,
        )
        .await
    }

    /// `POST /api/remote-runners` → `{"runner", "bootstrapToken"}`.
    pub async fn register_runner(&self, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/remote-runners", Some(body))
            .await
    }

    /// `PATCH /api/remote-runners/{id}` `{"status", "reason"}`: `active` (approve, reactivate),
    /// `draining`, `revoked`.
    pub async fn set_runner_status(
        &self,
        id: &str,
        status: &str,
        reason: &str,
    ) -> Result<Value, ClientError> {
        self.patch_runner(id, &json!({ "status": status, "reason": reason }))
            .await
    }

    /// Approves a pending key-pair runner: `{"status": "active", "reason", "fingerprint"}`,
    /// the fingerprint being the one the admin compared with the runner's own print-out (the
    /// server refuses an approval without it, or with another key's).
    pub async fn approve_runner(
        &self,
        id: &str,
        fingerprint: &str,
        reason: &str,
    ) -> Result<Value, ClientError> {
        let body = json!({ "status": "active", "reason": reason, "fingerprint": fingerprint });
        self.patch_runner(id, &body).await
    }

    async fn patch_runner(&self, id: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(
            Method::PATCH,
            &format!("/api/remote-runners/{}", segment(id)),
            Some(body),
        )
        .await
    }

    /// `POST /api/remote-runners/{id}/rotate` → `{"runner", "bootstrapToken"}`.
    pub async fn rotate(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::POST,
            &format!("/api/remote-runners/{}/rotate", segment(id)),
            Some(&json!({})),
        )
        .await
    }

    pub async fn runner_events(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::GET,
            &format!("/api/remote-runners/{}/events", segment(id)),
            None,
        )
        .await
    }

    /// `GET /api/developer/enrollment-policy` → `{"organizationId", "policy"}`.
    pub async fn enrollment_policy(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, ENROLLMENT_POLICY, None).await
    }

    /// `PUT /api/developer/enrollment-policy` `{"policy"}`: setting it twice changes nothing
    /// more, so a lost answer may be sent again.
    pub async fn set_enrollment_policy(&self, policy: &str) -> Result<Value, ClientError> {
        self.call_as(
            Method::PUT,
            ENROLLMENT_POLICY,
            Some(&json!({ "policy": policy })),
            true,
        )
        .await
    }

    /// `GET /api/developer/retention`.
    pub async fn retention(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, RETENTION, None).await
    }

    /// `PUT /api/developer/retention` `{"retentionDays"}`: setting it twice changes nothing
    /// more, so a lost answer may be sent again.
    pub async fn set_retention(&self, days: u16) -> Result<Value, ClientError> {
        self.call_as(
            Method::PUT,
            RETENTION,
            Some(&json!({ "retentionDays": days })),
            true,
        )
        .await
    }

    /// `POST /api/developer/enrollment-tokens` → the token, with its secret (`enrollmentToken`)
    /// this once.
    pub async fn create_enrollment_token(&self, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, ENROLLMENT_TOKENS, Some(body)).await
    }

    pub async fn list_enrollment_tokens(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, ENROLLMENT_TOKENS, None).await
    }

    pub async fn revoke_enrollment_token(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::DELETE,
            &format!("{ENROLLMENT_TOKENS}/{}", segment(id)),
            None,
        )
        .await
    }

    pub async fn enqueue(&self, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/remote-runners/jobs", Some(body))
            .await
    }

    /// Newest first; only jobs in `state` when given.
    pub async fn list_jobs(
        &self,
        limit: Option<u32>,
        state: Option<&str>,
    ) -> Result<Value, ClientError> {
        let path = with_query(
            "/api/remote-runners/jobs",
            &[
                ("limit", limit.map(|l| l.to_string())),
                ("state", state.map(str::to_owned)),
            ],
        );
        self.call(Method::GET, &path, None).await
    }

    /// One page of a job's stream after the cursor `after` (`"{attempt}.{sequence}"`), only
    /// attempt `attempt` when given: `{"chunks", "cursor", "more", "state", "dispatchAttempt"}`.
    pub async fn stream_page(
        &self,
        id: &str,
        after: &str,
        attempt: Option<u8>,
        limit: u32,
    ) -> Result<Value, ClientError> {
        let path = with_query(
            &format!("/api/remote-runners/jobs/{}/stream", segment(id)),
            &[
                ("after", Some(after.to_owned())),
                ("attempt", attempt.map(|a| a.to_string())),
                ("limit", Some(limit.to_string())),
            ],
        );
        self.call(Method::GET, &path, None).await
    }

    pub async fn job(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::GET,
            &format!("/api/remote-runners/jobs/{}", segment(id)),
            None,
        )
        .await
    }

    pub async fn cancel_job(&self, id: &str, reason: &str) -> Result<Value, ClientError> {
        self.call(
            Method::POST,
            &format!("/api/remote-runners/jobs/{}/cancel", segment(id)),
            Some(&json!({ "reason": reason })),
        )
        .await
    }

    /// `POST /api/remote-runners/jobs/{id}/hold` `{"reason"}`: holding a held job changes
    /// nothing, so a lost answer may be sent again.
    pub async fn hold_job(&self, id: &str, reason: &str) -> Result<Value, ClientError> {
        self.call_as(
            Method::POST,
            &format!("/api/remote-runners/jobs/{}/hold", segment(id)),
            Some(&json!({ "reason": reason })),
            true,
        )
        .await
    }

    /// `DELETE /api/remote-runners/jobs/{id}/hold`: releasing twice changes nothing more.
    pub async fn release_job_hold(&self, id: &str) -> Result<Value, ClientError> {
        self.call_as(
            Method::DELETE,
            &format!("/api/remote-runners/jobs/{}/hold", segment(id)),
            None,
            true,
        )
        .await
    }

    /// `GET /api/developer/usage`.
    pub async fn usage(&self) -> Result<Value, ClientError> {
        self.call(Method::GET, "/api/developer/usage", None).await
    }

    /// The job's custody bundle, for `edgerunner verify`.
    pub async fn bundle(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::GET,
            &format!("/api/remote-runners/jobs/{}/bundle", segment(id)),
            None,
        )
        .await
    }

    /// One bounded recovery pass over this organization's expired leases.
    pub async fn reap(&self, limit: Option<u32>) -> Result<Value, ClientError> {
        let body = match limit {
            Some(limit) => json!({ "limit": limit }),
            None => json!({}),
        };
        // A pass is safe to repeat: each job's recovery decides from its state and the lease's
        // expiry, so a pass whose answer was lost has nothing left to do twice.
        self.call_as(
            Method::POST,
            "/api/remote-runners/jobs/reap",
            Some(&body),
            true,
        )
        .await
    }

    /// `POST /api/releases/artifacts` `{"kind", "name"}`.
    pub async fn create_artifact(&self, kind: &str, name: &str) -> Result<Value, ClientError> {
        let body = json!({ "kind": kind, "name": name });
        self.call(Method::POST, "/api/releases/artifacts", Some(&body))
            .await
    }

    /// `POST /api/releases/artifacts/{id}/versions` `{"content"}`: a new immutable version.
    pub async fn add_version(&self, artifact: &str, content: &Value) -> Result<Value, ClientError> {
        self.call(
            Method::POST,
            &format!("/api/releases/artifacts/{}/versions", segment(artifact)),
            Some(&json!({ "content": content })),
        )
        .await
    }

    /// `POST /api/releases/versions/{id}/promote` `{"environment"}` (idempotent).
    pub async fn promote(&self, version: u64, environment: &str) -> Result<Value, ClientError> {
        self.call(
            Method::POST,
            &format!("/api/releases/versions/{version}/promote"),
            Some(&json!({ "environment": environment })),
        )
        .await
    }

    /// An artifact with its versions, newest first (no content).
    pub async fn artifact(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            Method::GET,
            &format!("/api/releases/artifacts/{}", segment(id)),
            None,
        )
        .await
    }

    /// A version with its content and promotions.
    pub async fn version(&self, id: u64) -> Result<Value, ClientError> {
        self.call(Method::GET, &format!("/api/releases/versions/{id}"), None)
            .await
    }

    /// The organization's artifacts, newest first; only of `kind` when given.
    pub async fn list_artifacts(
        &self,
        kind: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Value, ClientError> {
        let path = with_query(
            "/api/releases/artifacts",
            &[
                ("kind", kind.map(str::to_owned)),
                ("limit", limit.map(|l| l.to_string())),
            ],
        );
        self.call(Method::GET, &path, None).await
    }

    /// `POST /api/evidence/runs` (for scripts that pre-create a job's evaluation run).
    pub async fn create_evaluation_run(&self, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/evidence/runs", Some(body))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("job_01-abc.x~"), "job_01-abc.x~");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(segment("é"), "%C3%A9");
    }

    #[test]
    fn queries_leave_out_absent_values_and_encode_present_ones() {
        assert_eq!(with_query("/x", &[("a", None)]), "/x");
        assert_eq!(
            with_query(
                "/x",
                &[
                    ("a", None),
                    ("after", Some("1.-1".into())),
                    ("k", Some("a b&c".into()))
                ]
            ),
            "/x?after=1.-1&k=a%20b%26c"
        );
    }
}
