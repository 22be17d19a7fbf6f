//! `GET /api/remote-runners/queues`: per queue, the jobs that wait and run, the runners that
//! can serve it by state, and the runners it wants (`routes::views::queues`), for an
//! autoscaler or an operator; `GET /metrics`, the same in the Prometheus text format; and
//! `GET /api/remote-runners/queues/history`, the last day as the cron pass sampled it. One D1
//! round trip each, bounded (`store::queues`, `store::history`).

use worker::{Request, Response};

use super::views::history::{self, first_bucket};
use super::views::metrics::{render, CONTENT_TYPE};
use super::views::queues::build;
use super::views::respond;
use crate::auth::{self, Scope};
use crate::ctx::Ctx;
use crate::error::ApiResult;
use crate::store::{self, queues};

/// Who reads the queues and `/metrics`: a `runs:read` or `metrics:read` key, or an admin key
/// with `admin:org`.
const READERS: [Scope; 3] = [Scope::RunsRead, Scope::MetricsRead, Scope::AdminOrg];

pub(crate) async fn list(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_one_of(&READERS)?;
    let org = caller.organization_id.as_str();
    let read = queues::read(&ctx.db, org).await?;
    respond(200, &build(org, &read, ctx.now))
}

/// `GET /metrics`: the same read in the Prometheus text format (`routes::views::metrics`).
pub(crate) async fn metrics(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_one_of(&READERS)?;
    let org = caller.organization_id.as_str();
    let read = queues::read(&ctx.db, org).await?;
    let text = render(&build(org, &read, ctx.now), &read, ctx.now);
    let mut res = Response::ok(text)?;
    res.headers_mut().set("content-type", CONTENT_TYPE)?;
    res.headers_mut().set("cache-control", "no-store")?;
    Ok(res)
}

/// `GET /api/remote-runners/queues/history`: the organization's last day in five-minute
/// buckets (`routes::views::history`), as the cron pass sampled it: one range of
/// `queue_history`, at most 288 rows.
pub(crate) async fn history(req: Request, ctx: &Ctx) -> ApiResult<Response> {
    let caller = auth::admin(&req, ctx).await?;
    caller.require_one_of(&READERS)?;
    let org = caller.organization_id.as_str();
    let rows = store::history::read(&ctx.db, org, first_bucket(ctx.now)).await?;
    respond(200, &history::build(org, &rows, ctx.now))
}
