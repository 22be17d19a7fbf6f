//! `RunnerObject`: one Durable Object per runner (`id_from_name(runner id)`).
//!
//! It serializes that runner's claims (under `block_concurrency_while`, since each claim reads
//! D1 and calls job objects): check the runner's live state and capacity, find candidate jobs
//! through the queue index, filter them with the protocol crate's matching rules (never
//! relaxed), and ask each candidate's `JobObject` to grant until one does. Capacity is also a
//! CHECK in the schema, so even a claim racing outside this object cannot exceed it.

use edgerunner_protocol::capability::{
    match_job, parse_served_targets, parse_tags, CapabilityDocument, Requirements, RunnerProfile,
    ServedTarget, SubjectRef,
};
use serde_json::{json, Value};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

use crate::error::{ApiError, ApiResult};
use crate::objects::{self, read_request, respond, Reply};
use crate::store::{jobs, runners, Db, RoundTrips};

/// Candidates read per (kind, runtime) pair: enough to skip a few jobs that fail the rules the
/// index cannot express (limits, network, tags, problem type, served targets), never the queue.
const CANDIDATES_PER_RANGE: i64 = 16;
/// Pages per claim: how far behind incompatible jobs a compatible one is still found.
const MAX_PAGES: usize = 8;

#[durable_object]
pub struct RunnerObject {
    state: State,
    env: Env,
}

impl DurableObject for RunnerObject {
    fn new(state: State, env: Env) -> Self {
        Self { state, env }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let (op, body) = match read_request(req).await {
            Ok(parts) => parts,
            Err(err) => return err.into_response(),
        };
        let env = self.env.clone();
        let trips = RoundTrips::default();
        let counted = trips.clone();
        let outcome = self
            .state
            .block_concurrency_while(async move {
                let db = match Db::of(&env, counted) {
                    Ok(db) => db,
                    Err(err) => return Ok(Err(err)),
                };
                Ok(match op.as_str() {
                    "claim" => claim(&env, &db, body).await,
                    #[cfg(feature = "bench-floor")]
                    "floor" => floor(&db).await,
                    _ => Err(ApiError::internal(format!("unknown runner operation {op}"))),
                })
            })
            .await;
        match outcome {
            Ok(outcome) => respond(outcome, &trips),
            Err(err) => respond(Err(ApiError::internal(err)), &trips),
        }
    }
}

fn refuse(status: u16, code: &str, message: &str) -> ApiResult<Reply> {
    Ok(Reply {
        status,
        body: json!({ "error": { "code": code, "message": message } }),
    })
}

async fn claim(env: &Env, db: &Db, body: Value) -> ApiResult<Reply> {
    let org = body
        .get("organizationId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let runner_id = body
        .get("runnerId")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let generation = body.get("generation").and_then(Value::as_i64).unwrap_or(-1);
    let runner = runners::get(db, org, runner_id)
        .await?
        .ok_or_else(|| ApiError::unauthorized("the credential's runner no longer exists"))?;
    if runner.credential_generation != generation || runner.state == "revoked" {
        return Err(ApiError::unauthorized(
            "credential was revoked; exchange a new one",
        ));
    }
    if runner.state != "active" {
        return refuse(
            503,
            "RUNNER_NOT_ACTIVE",
            &format!("the runner is {}", runner.state),
        );
    }
    if runner.active_claims >= runner.max_concurrent_jobs {
        return refuse(
            503,
            "RUNNER_AT_CAPACITY",
            "the runner holds as many claims as it may",
        );
    }
    let served: Option<Vec<ServedTarget>> = match body.get("servedTargets") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_served_targets(v)?),
    };
    let capabilities: Value =
        serde_json::from_str(&runner.capabilities).map_err(ApiError::internal)?;
    let tags: Value = serde_json::from_str(&runner.tags).map_err(ApiError::internal)?;
    let profile = RunnerProfile::new(
        CapabilityDocument::parse(&capabilities).map_err(ApiError::internal)?,
        parse_tags(&tags).map_err(ApiError::internal)?,
    );

    let mut ranges = Ranges::of(&profile);
    for _ in 0..MAX_PAGES {
        let page = ranges.next_page(db, org).await?;
        if page.is_empty() {
            break;
        }
        for candidate in page {
            let requirements: Value =
                serde_json::from_str(&candidate.requirements).map_err(ApiError::internal)?;
            let Ok(requirements) = Requirements::parse(&requirements) else {
                continue;
            };
            let subject = SubjectRef {
                version_id: candidate.subject_version_id,
                content_hash: candidate.subject_content_hash.clone(),
            };
            if match_job(&profile, &requirements, &subject, served.as_deref()).is_err() {
                continue;
            }
            let reply = objects::call(
                env,
                db.trips(),
                objects::JOBS,
                &candidate.id,
                "grant",
                &json!({
                    "jobId": candidate.id,
                    "organizationId": org,
                    "runnerId": runner_id,
                    "generation": runner.credential_generation,
                }),
            )
            .await?;
            match reply.error_code() {
                // Another runner got there first, or it changed: try the next candidate.
                Some("JOB_NOT_QUEUED") => continue,
                _ => return Ok(reply),
            }
        }
    }
    Ok(Reply {
        status: 204,
        body: Value::Null,
    })
}

/// The index ranges a runner's claim reads: one per (execution kind, runtime) it declares,
/// each walked in queue order a page at a time (keyset pagination), all ranges of a page read
/// in one round trip. Paging means jobs this runner cannot take (a limit above its ceiling, a
/// tag it lacks) at the head of a range do not hide compatible jobs behind them, up to
/// `MAX_PAGES × CANDIDATES_PER_RANGE` candidates per range.
struct Ranges {
    ranges: Vec<Range>,
    external: bool,
}

struct Range {
    kind: String,
    runtime: String,
    after: Option<(i64, String)>,
    done: bool,
}

impl Ranges {
    fn of(profile: &RunnerProfile) -> Self {
        let caps = &profile.capabilities;
        let mut ranges = Vec::new();
        for kind in caps.execution_kinds() {
            for runtime in caps.runtimes() {
                ranges.push(Range {
                    kind: kind.as_str().to_owned(),
                    runtime: runtime.as_str().to_owned(),
                    after: None,
                    done: false,
                });
            }
        }
        Self {
            ranges,
            external: caps.external(),
        }
    }

    /// The next page of every unfinished range, merged in queue order.
    async fn next_page(&mut self, db: &Db, org: &str) -> ApiResult<Vec<jobs::Candidate>> {
        let open: Vec<usize> = (0..self.ranges.len())
            .filter(|&i| !self.ranges[i].done)
            .collect();
        if open.is_empty() {
            return Ok(Vec::new());
        }
        let statements = open
            .iter()
            .map(|&i| {
                let range = &self.ranges[i];
                jobs::candidates(
                    db,
                    org,
                    &range.kind,
                    &range.runtime,
                    self.external,
                    range.after.as_ref().map(|(at, id)| (*at, id.as_str())),
                    CANDIDATES_PER_RANGE,
                )
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let mut page = Vec::new();
        for (&i, result) in open
            .iter()
            .zip(crate::store::read_batch(db, statements).await?)
        {
            let rows = result.results::<jobs::Candidate>()?;
            let range = &mut self.ranges[i];
            range.done = i64::try_from(rows.len()).unwrap_or(0) < CANDIDATES_PER_RANGE;
            range.after = rows.last().map(|c| (c.created_at, c.id.clone()));
            page.extend(rows);
        }
        page.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(page)
    }
}

/// The benchmark floor: the claim's shape (an object call under the same lock, then one D1
/// batch write) with no logic. Compiled only with the `bench-floor` feature; scripts/bench
/// creates its table before the run.
#[cfg(feature = "bench-floor")]
async fn floor(db: &Db) -> ApiResult<Reply> {
    let now = crate::platform::now_ms();
    crate::store::batch(
        db,
        vec![
            crate::store::stmt(
                db,
                "INSERT INTO bench_floor (at) VALUES (?1)",
                &[now.into()],
            )?,
            crate::store::stmt(
                db,
                "INSERT INTO bench_floor (at) VALUES (?1)",
                &[now.into()],
            )?,
        ],
    )
    .await?;
    Ok(Reply::ok(json!({ "ok": true })))
}
