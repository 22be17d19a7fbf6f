//! `GET /api/remote-runners/queues`: per queue, the jobs that wait and run, the runners that
//! can serve it by state, and the runners it wants (`routes::views::queues`), for an
//! autoscaler or an operator. One D1 round trip, bounded (`store::queues`).

use worker::{Request, Response};

use super::views::queues::build;
use super::views::respond;
use crate::auth::{self, Scope};
use crate::error::ApiResult;
use crate::store::queues;
use crate::Ctx;

/// A `runs:read` key reads it; so does an admin key with `admin:org`.
pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    if caller.require(Scope::AdminOrg).is_err() {
        caller.require(Scope::RunsRead)?;
    }
    let org = caller.organization_id.as_str();
    let read = queues::read(&ctx.db, org).await?;
    respond(200, &build(org, &read, ctx.now))
}
