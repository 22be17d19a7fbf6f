//! `RunnerObject`: one Durable Object per runner (`id_from_name(runner id)`).
//!
//! It will hold the runner's live state (lifecycle, credential generation, active claims against
//! capacity) and serialize its claims. Until those routes exist it refuses every request.

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

#[durable_object]
pub struct RunnerObject {
    _state: State,
    _env: Env,
}

impl DurableObject for RunnerObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            _state: state,
            _env: env,
        }
    }

    async fn fetch(&self, _req: Request) -> Result<Response> {
        Response::error("runner object has no routes yet", 501)
    }
}
