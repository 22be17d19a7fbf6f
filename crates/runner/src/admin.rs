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

impl AdminClient {
    pub fn new(http: Http, api_key: &str) -> Result<Self, ClientError> {
        let api_key = api_key.trim();
        if api_key.is_empty() {
            return Err(ClientError::Config(
                "no API key: pass --api-key or set EDGERUNNER_API_KEY".into(),
            ));
        }
        Ok(Self {
            http,
            api_key: api_key.to_owned(),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let safe: fn(&ClientError) -> bool = if method == Method::GET {
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

    pub async fn enqueue(&self, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, "/api/remote-runners/jobs", Some(body))
            .await
    }

    pub async fn list_jobs(&self, limit: Option<u32>) -> Result<Value, ClientError> {
        let path = match limit {
            Some(limit) => format!("/api/remote-runners/jobs?limit={limit}"),
            None => "/api/remote-runners/jobs".to_owned(),
        };
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
        self.call(Method::POST, "/api/remote-runners/jobs/reap", Some(&body))
            .await
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
}
