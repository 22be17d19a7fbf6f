//! The edgerunner edge Worker: the only crate that imports `worker`.
//!
//! # Layout
//! - `lib.rs`: the fetch and scheduled entry points and the route table.
//! - [`job_do`]: `JobObject`, one Durable Object per job, the single writer of that job's rows.
//! - [`runner_do`]: `RunnerObject`, one Durable Object per runner, which serializes its claims.
//!
//! Protocol rules (hashing, envelopes, chains, matching, state machines) live in the
//! `edgerunner-protocol` crate; this crate only moves bytes between HTTP, Durable Objects and D1.

use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

// The constructors serve the API routes that land next; the lint comes off with them.
#[allow(dead_code)]
mod error;

use error::{json_response, ApiError};
mod job_do;
mod runner_do;

pub use job_do::JobObject;
pub use runner_do::RunnerObject;

#[event(fetch)]
async fn fetch(req: Request, _env: Env, _ctx: Context) -> Result<Response> {
    match req.path().as_str() {
        "/healthz" => json_response(200, &serde_json::json!({ "status": "ok" })),
        _ => ApiError::not_found("no such route").into_response(),
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, _env: Env, _ctx: ScheduleContext) {
    // The reaper pass (lease recovery) hooks in here; see ARCHITECTURE.md "Recovery".
}
