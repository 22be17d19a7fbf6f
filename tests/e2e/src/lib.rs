//! Shared helpers for the end-to-end suites. They talk HTTP to a real local workerd
//! (`wrangler dev` with embedded D1 and Durable Objects), exactly as a runner or admin would.
//! `scripts/test` starts the server on fresh state and sets `BASE_URL`.

use std::time::Duration;

/// The server under test. Panics (failing the test, never skipping it) when unset, because a
/// suite that silently passes without a server proves nothing.
pub fn base_url() -> String {
    match std::env::var("BASE_URL") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_owned(),
        _ => panic!("BASE_URL is not set: run the end-to-end suites through scripts/test"),
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client with only a timeout set always builds")
}

pub fn url(path: &str) -> String {
    format!("{}{}", base_url(), path)
}
