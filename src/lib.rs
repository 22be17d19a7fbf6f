//! The edgerunner edge Worker: the only crate that imports `worker`.
//!
//! # Layout
//! - `lib.rs`: the fetch and scheduled entry points and the route table.
//! - [`auth`]: API keys and runner credentials, as proof types handlers require.
//! - [`routes`]: one module per HTTP surface: API keys, enrollment policy and tokens, evidence,
//!   runner identity (enroll, challenge, session, self), a runner's files, runner
//!   administration, the release registry, jobs as admins see them (enqueue, list, inspect,
//!   cancel, reap), jobs as runners work them (`runner_jobs`: claim, held-job reads, heartbeat,
//!   stream, complete, hand-back), and the custody reads (`custody`: stream pages, bundle); the
//!   JSON every surface answers with are serde views in `routes::views`.
//! - [`objects`]: the Durable Objects, one folder per object holding what it is asked and
//!   answers (its operations, its typed reply and refusal with the refusal's one HTTP mapping,
//!   and the typed stub the edge calls it through) and the object itself (`object.rs`):
//!   `job` (`JobObject`, one per job, the single writer of that job's rows after its grant),
//!   `runner` (`RunnerObject`, one per runner: its claims, its lease book, and the grant it
//!   prepares and commits), `dispatch` (`Dispatcher`, one per organization: the queue stamp and
//!   the long poll), `gate` (`AddressGate`, one per client network: rate limits for callers
//!   without a credential); and the wire they share.
//! - [`store`]: every statement a named `.sql` file behind one typed function, one module per
//!   table group (and `lifecycle`: a job's writes from its grant on); rows decoded once, into
//!   the protocol's types; guarded writes with checked row counts.
//! - [`reaper`]: the bounded recovery sweep behind the cron trigger and the reap endpoint.
//! - [`request_log`]: one JSON line per request (route, status, organization, duration,
//!   request id), and nothing the caller sent.
//! - [`archive`]: a finished job's bundle and record to R2, checked, then its rows pruned from
//!   D1 (its job object's alarm, the cron pass, an operator's `POST …/jobs/{id}/archive`);
//!   every read of the job from D1 or from R2 (`archive::reads`).
//! - [`panel`]: the admin panel's static files (`panel/`), with their security headers.
//! - [`openapi`]: the API document (`docs/openapi.json`), served, and the methods it lists per
//!   path, which the router enforces (`405`) before the route table.
//! - [`ctx`]: what every handler is given (the environment, the database, the clock's one
//!   reading), apart from the route table so that no route depends on this file.
//! - Leaves: [`error`] (the one error type and its one mapping to
//!   `{"error": {"code", "message"}}`), [`secrets`] (the signing root and `CRON_SECRET`, checked
//!   at use), [`http`] (request parsing), [`platform`] (the clock and randomness), [`memo`]
//!   (small bounded per-isolate memories that skip safe work, never authorities).
//!
//! Protocol rules (hashing, envelopes, chains, matching, state machines) live in the
//! `edgerunner-protocol` crate; this crate only moves bytes between HTTP, Durable Objects, D1
//! and R2.

use edgerunner_protocol::error_code::ErrorCode;
use worker::{
    event, Context, Env, Method, Request, Response, Result, ScheduleContext, ScheduledEvent,
};

mod answers;
mod archive;
mod auth;
mod ctx;
mod error;
mod http;
mod memo;
mod objects;
mod openapi;
mod panel;
mod platform;
mod reaper;
mod request_log;
mod retention;
mod routes;
mod secrets;
mod store;

pub use objects::dispatch::object::Dispatcher;
pub use objects::gate::object::AddressGate;
pub use objects::job::object::JobObject;
pub use objects::runner::object::RunnerObject;

use ctx::Ctx;
use error::{ApiError, ApiResult};
use routes::{api_keys, identity, runner_files, runners};

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let started = platform::now_ms();
    let method = req.inner().method();
    let path = req.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let route_name = request_log::route_of(&segments);
    let request_id = request_log::request_id(&req);
    let seen = request_log::Seen::default();
    let trips = store::RoundTrips::default();
    let res = match route(req, env, &trips, &seen).await {
        Ok(res) => res,
        Err(err) => err.into_response()?,
    };
    let mut res = count_round_trips(res, &trips)?;
    // A response whose headers are immutable (none is, today) keeps its own.
    let _ = res.headers_mut().set("x-request-id", &request_id);
    worker::console_log!(
        "{}",
        request_log::line(
            &method,
            route_name,
            res.status_code(),
            &seen,
            platform::now_ms() - started,
            &request_id,
        )
    );
    Ok(res)
}

/// The bench build answers every request with the D1 round trips made for it (its own and its
/// objects'; a streamed body's later pages are not in it), and adds them to a running total
/// (`GET /__bench/round-trips`), so that a harness driving the unmodified SDK one request at a
/// time reads each request's count as the total's difference. The production build says
/// nothing.
#[cfg(feature = "bench-floor")]
fn count_round_trips(mut res: Response, trips: &store::RoundTrips) -> Result<Response> {
    bench_totals::add(trips.count());
    res.headers_mut()
        .set(objects::ROUND_TRIPS_HEADER, &trips.count().to_string())?;
    Ok(res)
}

/// The bench build's running total of D1 round trips made for requests this isolate served.
#[cfg(feature = "bench-floor")]
mod bench_totals {
    use std::cell::Cell;

    thread_local! {
        static TOTAL: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn add(n: u32) {
        TOTAL.with(|t| t.set(t.get().saturating_add(u64::from(n))));
    }

    pub(crate) fn total() -> u64 {
        TOTAL.with(Cell::get)
    }
}

#[cfg(not(feature = "bench-floor"))]
fn count_round_trips(res: Response, _trips: &store::RoundTrips) -> Result<Response> {
    Ok(res)
}

/// Every method some route answers. `worker::Method` reads any other method (`PROPFIND`,
/// `TRACE`, …) as `GET`, so the request's own method text is checked against this first.
const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

async fn route(
    req: Request,
    env: Env,
    trips: &store::RoundTrips,
    seen: &request_log::Seen,
) -> ApiResult<Response> {
    let raw_method = req.inner().method();
    let path = req.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // HEAD is answered wherever GET is, as GET without the body (the runtime drops it).
    let routed_as = if raw_method == "HEAD" {
        "GET"
    } else {
        raw_method.as_str()
    };
    // A path the API document has: only the methods it lists there (405 and `Allow` else).
    if let Some(refusal) = openapi::refuse_undocumented_method(routed_as, &segments) {
        return refusal;
    }
    if !METHODS.contains(&raw_method.as_str()) {
        let mut res = ApiError::new(
            405,
            ErrorCode::MethodNotAllowed,
            format!("{raw_method} is not a method this service answers"),
        )
        .into_response()?;
        res.headers_mut().set("allow", &METHODS.join(", "))?;
        return Ok(res);
    }
    let method = match req.method() {
        Method::Head => Method::Get,
        other => other,
    };
    if let (Method::Get, ["healthz"]) = (&method, segments.as_slice()) {
        return routes::views::respond(200, &routes::views::service::HealthView { status: "ok" });
    }
    if let (Method::Get, ["openapi.json"]) = (&method, segments.as_slice()) {
        return openapi::serve();
    }
    if let Some((&panel::PREFIX, rest)) = segments.split_first() {
        return panel::serve(&req, &env, rest).await;
    }
    if let (Method::Get, [""]) = (&method, segments.as_slice()) {
        let mut res = Response::empty()?.with_status(302);
        res.headers_mut().set("location", "/remote-runners")?;
        return Ok(res);
    }
    let ctx = Ctx {
        db: store::Db::of(&env, trips.clone())?,
        env,
        now: platform::now_ms(),
        seen: seen.clone(),
    };
    use Method::{Delete, Get, Patch, Post, Put};
    match (method, segments.as_slice()) {
        (Post, ["api", "developer", "api-keys"]) => api_keys::create(req, &ctx).await,
        (Get, ["api", "developer", "api-keys"]) => api_keys::list(req, &ctx).await,
        (Get, ["api", "developer", "api-keys", "self"]) => api_keys::get_self(req, &ctx).await,
        (Delete, ["api", "developer", "api-keys", id]) => api_keys::revoke(req, &ctx, id).await,
        (Get, ["api", "developer", "enrollment-policy"]) => {
            routes::enrollment::get_policy(req, &ctx).await
        }
        (Put, ["api", "developer", "enrollment-policy"]) => {
            routes::enrollment::put_policy(req, &ctx).await
        }
        (Get, ["api", "developer", "retention"]) => routes::retention::get_setting(req, &ctx).await,
        (Put, ["api", "developer", "retention"]) => routes::retention::put_setting(req, &ctx).await,
        (Post, ["api", "developer", "retention", "run"]) => routes::retention::run(req, &ctx).await,
        (Get, ["api", "developer", "usage"]) => routes::retention::usage(req, &ctx).await,
        (Post, ["api", "developer", "enrollment-tokens"]) => {
            routes::enrollment::create_token(req, &ctx).await
        }
        (Get, ["api", "developer", "enrollment-tokens"]) => {
            routes::enrollment::list_tokens(req, &ctx).await
        }
        (Delete, ["api", "developer", "enrollment-tokens", id]) => {
            routes::enrollment::revoke_token(req, &ctx, id).await
        }

        (Post, ["api", "remote-runners", "session"]) => identity::session(req, &ctx).await,
        (Post, ["api", "remote-runners", "enroll"]) => identity::enroll(req, &ctx).await,
        (Post, ["api", "remote-runners", "challenge"]) => identity::challenge(req, &ctx).await,
        (Get, ["api", "remote-runners", "self"]) => identity::get_self(req, &ctx).await,
        (Get, ["api", "remote-runners", "self", "claims"]) => {
            identity::get_self_claims(req, &ctx).await
        }
        (Get, ["api", "remote-runners", "self", "files"]) => {
            runner_files::list_self_files(req, &ctx).await
        }
        (Put, ["api", "remote-runners", "self", "files", name]) => {
            runner_files::put_self_file(req, &ctx, name).await
        }

        (Post, ["api", "remote-runners", "claim"]) => routes::runner_jobs::claim(req, &ctx).await,
        (Post, ["api", "remote-runners", "heartbeat"]) => {
            routes::runner_jobs::heartbeat(req, &ctx).await
        }
        (Post, ["api", "remote-runners", "stream"]) => routes::runner_jobs::stream(req, &ctx).await,
        (Post, ["api", "remote-runners", "complete"]) => {
            routes::runner_jobs::complete(req, &ctx).await
        }
        (Post, ["api", "remote-runners", "release"]) => {
            routes::runner_jobs::hand_back(req, &ctx).await
        }
        (Post, ["api", "remote-runners", "jobs"]) => routes::jobs::enqueue(req, &ctx).await,
        (Post, ["api", "remote-runners", "jobs", "reap"]) => routes::jobs::reap(req, &ctx).await,
        (Get, ["api", "remote-runners", "jobs"]) => routes::jobs::list(req, &ctx).await,
        (Get, ["api", "remote-runners", "queues"]) => routes::queues::list(req, &ctx).await,
        (Get, ["api", "remote-runners", "registration"]) => runners::registration(req, &ctx).await,
        (Get, ["api", "remote-runners", "queues", "history"]) => {
            routes::queues::history(req, &ctx).await
        }
        (Get, ["metrics"]) => routes::queues::metrics(req, &ctx).await,
        (Get, ["api", "remote-runners", "jobs", id]) => routes::jobs::get(req, &ctx, id).await,
        (Post, ["api", "remote-runners", "jobs", id, "cancel"]) => {
            routes::jobs::cancel(req, &ctx, id).await
        }
        (Post, ["api", "remote-runners", "jobs", id, "archive"]) => {
            routes::jobs::archive(req, &ctx, id).await
        }
        (Post, ["api", "remote-runners", "jobs", id, "hold"]) => {
            routes::retention::hold(req, &ctx, id).await
        }
        (Delete, ["api", "remote-runners", "jobs", id, "hold"]) => {
            routes::retention::release(req, &ctx, id).await
        }
        (Get, ["api", "remote-runners", "jobs", id, "stream"]) => {
            routes::custody::stream_read(req, &ctx, id).await
        }
        (Get, ["api", "remote-runners", "jobs", id, "bundle"]) => {
            routes::custody::bundle(req, &ctx, id).await
        }
        (Post, ["api", "remote-runners", "jobs", id, "evidence", "runs"]) => {
            routes::evidence::create_job_run(req, &ctx, id).await
        }
        (Post, ["api", "remote-runners", "jobs", id, "evidence", "runs", run, "test-results"]) => {
            routes::evidence::create_job_test_result(req, &ctx, id, run).await
        }
        (Get, ["api", "remote-runners", "jobs", id, "input"]) => {
            routes::runner_jobs::input(req, &ctx, id).await
        }
        (Get, ["api", "remote-runners", "jobs", id, "artifact"]) => {
            routes::runner_jobs::artifact(req, &ctx, id).await
        }

        (Post, ["api", "remote-runners"]) => runners::register(req, &ctx).await,
        (Get, ["api", "remote-runners"]) => runners::list(req, &ctx).await,
        // Literal segments before the generic `{id}` arms, which would otherwise take them.
        (Post, ["api", "remote-runners", "targets"]) => {
            routes::releases::create_target(req, &ctx).await
        }
        (Get, ["api", "remote-runners", "targets"]) => {
            routes::releases::list_targets(req, &ctx).await
        }
        (Get, ["api", "remote-runners", id]) => runners::get(req, &ctx, id).await,
        (Patch, ["api", "remote-runners", id]) => runners::patch(req, &ctx, id).await,
        (Post, ["api", "remote-runners", id, "rotate"]) => runners::rotate(req, &ctx, id).await,
        (Get, ["api", "remote-runners", id, "events"]) => runners::events(req, &ctx, id).await,
        (Get, ["api", "remote-runners", id, "claims"]) => runners::claims(req, &ctx, id).await,
        (Get, ["api", "remote-runners", id, "files"]) => runners::files(req, &ctx, id).await,
        (Get, ["api", "remote-runners", id, "files", name]) => {
            runners::file(req, &ctx, id, name).await
        }

        (Post, ["api", "releases", "artifacts"]) => {
            routes::releases::create_artifact(req, &ctx).await
        }
        (Get, ["api", "releases", "artifacts"]) => {
            routes::releases::list_artifacts(req, &ctx).await
        }
        (Get, ["api", "releases", "artifacts", id]) => {
            routes::releases::get_artifact(req, &ctx, id).await
        }
        (Post, ["api", "releases", "artifacts", id, "versions"]) => {
            routes::releases::create_version(req, &ctx, id).await
        }
        (Get, ["api", "releases", "versions", id]) => {
            routes::releases::get_version(req, &ctx, id).await
        }
        (Post, ["api", "releases", "versions", id, "promote"]) => {
            routes::releases::promote(req, &ctx, id).await
        }

        (Post, ["api", "evidence", "runs"]) => routes::evidence::create_run(req, &ctx).await,
        (Get, ["api", "evidence", "runs", id]) => routes::evidence::get_run(req, &ctx, id).await,
        (Post, ["api", "evidence", "runs", id, "test-results"]) => {
            routes::evidence::create_test_result(req, &ctx, id).await
        }
        (Post, ["api", "evidence", "runs", id, "cost-records"]) => {
            routes::evidence::create_cost_record(req, &ctx, id).await
        }
        (Post, ["api", "evidence", "runs", id, "model-calls"]) => {
            routes::evidence::create_model_call(req, &ctx, id).await
        }
        (Post, ["api", "evidence", "runs", id, "traces"]) => {
            routes::evidence::create_trace(req, &ctx, id).await
        }

        #[cfg(feature = "bench-floor")]
        (Post, ["__bench", "floor"]) => objects::runner::call(
            &ctx.env,
            ctx.db.trips(),
            "bench-floor",
            &objects::runner::RunnerOp::Floor,
        )
        .await?
        .0
        .into_response(),
        #[cfg(feature = "bench-floor")]
        (Get, ["__bench", "round-trips"]) => routes::views::respond(
            200,
            &routes::views::service::RoundTripsView {
                d1_round_trips: bench_totals::total(),
            },
        ),
        #[cfg(feature = "bench-floor")]
        (Get, ["__bench", "memory"]) => routes::views::respond(
            200,
            &routes::views::service::MemoryView {
                wasm_memory_bytes: platform::wasm_memory_bytes(),
            },
        ),

        (_, ["api", ..]) => Err(ApiError::not_found("no such route")),
        _ => Err(ApiError::not_found("no such route")),
    }
}

/// The cron trigger: one bounded recovery pass across every organization, one bounded purge of
/// expired enrollments and spent challenges and one of spent ephemeral runners, one sample of
/// every organization's queues into its history (see [`reaper`]), one bounded archive pass over
/// finished jobs (see [`archive`]), then one bounded retention pass over archived jobs past
/// their organization's cut (see [`retention`]).
#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    let limit = reaper::DEFAULT_PASS_LIMIT;
    match reaper::pass(&env, None, platform::now_ms(), limit, "system:cron").await {
        Ok(report) => worker::console_log!("recovery pass: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("recovery pass failed: {err:?}"),
    }
    match reaper::purge(&env, platform::now_ms()).await {
        Ok(report) => worker::console_log!("purge pass: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("purge pass failed: {err:?}"),
    }
    match reaper::retire_ephemeral(&env, platform::now_ms()).await {
        Ok(report) => worker::console_log!("ephemeral runners: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("retiring ephemeral runners failed: {err:?}"),
    }
    match reaper::sample_history(&env, platform::now_ms()).await {
        Ok(report) => worker::console_log!("queue history: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("queue history sample failed: {err:?}"),
    }
    let limit = edgerunner_protocol::archive::JOBS_PER_PASS;
    match reaper::archive(&env, platform::now_ms(), limit).await {
        Ok(report) => worker::console_log!("archive pass: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("archive pass failed: {err:?}"),
    }
    let limit = retention::JOBS_PER_PASS;
    match retention::pass(&env, None, platform::now_ms(), limit, "system:cron").await {
        Ok(report) => worker::console_log!("retention pass: {}", routes::views::shown(&report)),
        Err(err) => worker::console_error!("retention pass failed: {err:?}"),
    }
}
