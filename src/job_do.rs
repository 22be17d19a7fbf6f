//! `JobObject`: one Durable Object per job (`id_from_name(job id)`).
//!
//! It will serialize every change to its job — grant, heartbeat, stream append, completion,
//! cancellation, recovery — and set its alarm at the lease expiry. Until those routes exist it
//! refuses every request, so nothing can mistake it for a working object.

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

#[durable_object]
pub struct JobObject {
    _state: State,
    _env: Env,
}

impl DurableObject for JobObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            _state: state,
            _env: env,
        }
    }

    async fn fetch(&self, _req: Request) -> Result<Response> {
        Response::error("job object has no routes yet", 501)
    }
}
