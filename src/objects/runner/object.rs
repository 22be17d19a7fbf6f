//! `RunnerObject`: one Durable Object per runner (`id_from_name(runner id)`).
//!
//! It serializes that runner's claims (under `block_concurrency_while`, since each claim reads
//! and writes D1): check the runner's live state and capacity, find candidate jobs through the
//! queue index, filter them with the protocol crate's matching rules (never relaxed), and grant
//! the candidates in turn until one grant commits ([`super::grant`]). Capacity is also a CHECK
//! in the schema, so even a claim racing outside this object cannot exceed it. It keeps the lease
//! book: an alarm for each lease it granted, until the job's object watches it ([`LeaseBook`]).

use edgerunner_protocol::capability::{
    match_job, parse_served_targets, parse_tags, CapabilityDocument, Requirements, RunnerProfile,
    ServedTarget, SubjectRef,
};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use worker::{
    durable_object, DurableObject, Env, ListOptions, Request, Response, Result, State, Storage,
};

use crate::error::{ApiError, ApiResult};
use crate::objects::dispatch::Stamp;
use crate::objects::job::JobOp;
use crate::objects::runner::grant::{self, GrantRefusal, Prepared};
use crate::objects::runner::{
    ClaimGrant, RunnerOp, RunnerRefusal, RunnerReply, QUIET_STAMP_HEADER,
};
use crate::objects::{self, answer, read_op};
use crate::platform::{alarm_delay, now_ms, random_bytes};
use crate::store::{batched, jobs, runners, Db, RoundTrips};

/// Candidates read per (kind, runtime) pair: enough to skip a few jobs that fail the rules the
/// index cannot express (limits, network, tags, problem type, served targets), never the queue.
const CANDIDATES_PER_RANGE: i64 = 16;
/// Pages per claim: how far behind incompatible jobs a compatible one is still found.
const MAX_PAGES: usize = 8;

/// How long a remembered "nothing" is used without reading D1 again: the bound on what a touch
/// that never arrived (its caller crashed after committing) can delay.
const QUIET_MILLIS: i64 = 30_000;
/// Claims granted with a `requestId` that the object remembers (its runner's latest ones).
const GRANTED_REQUESTS: usize = 64;

#[durable_object]
pub struct RunnerObject {
    state: State,
    env: Env,
    /// The runner's capabilities and tags as its last claim read them (see [`claim`]).
    profile: Rc<RefCell<Option<Profile>>>,
    /// The runner's last claim found nothing: when, and at which queue stamp (see [`Quiet`]).
    quiet: Rc<RefCell<Option<Quiet>>>,
    /// The `requestId`s of this object's latest grants: a repeat of one is never answered from
    /// [`Quiet`] (its claim exists; D1 answers it).
    granted: Rc<RefCell<VecDeque<String>>>,
}

/// "A claim with this credential and these served targets found nothing": a D1 read that
/// began when the organization's dispatcher showed `stamp` found no job for the runner. Until
/// the stamp moves (a job became queued, or the runner's row changed), the same claim finds
/// nothing again, so it is answered without a D1 query.
///
/// When the stamp was learned only *after* the read (the read had no stamp before it), the
/// memory is not `confirmed`: something may have been queued between the read and the look, so
/// the next claim reads D1 once more, with the stamp it looks at first. A confirmed memory older
/// than [`QUIET_MILLIS`] counts as unconfirmed.
#[derive(Clone)]
struct Quiet {
    stamp: Stamp,
    confirmed: bool,
    generation: i64,
    served: Option<String>,
    since: i64,
}

impl DurableObject for RunnerObject {
    fn new(state: State, env: Env) -> Self {
        Self {
            state,
            env,
            profile: Rc::default(),
            quiet: Rc::default(),
            granted: Rc::default(),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let trips = RoundTrips::default();
        let op: RunnerOp = match read_op(req).await {
            Ok(op) => op,
            Err(err) => return answer(&Err::<RunnerReply, RunnerRefusal>(err.into()), &trips),
        };
        let (outcome, request) = match op {
            RunnerOp::Claim {
                organization_id,
                runner_id,
                generation,
                served_targets,
                request_id,
                wait_ms,
                stamp,
            } => {
                let request = ClaimRequest {
                    org: organization_id,
                    runner_id,
                    generation,
                    served_targets,
                    request_id,
                };
                let outcome = self.claim_once(&request, stamp, wait_ms > 0, &trips).await;
                (outcome, Some(request))
            }
            RunnerOp::Floor => (self.floor(&trips).await, None),
        };
        let mut res = answer(&outcome, &trips)?;
        // A long poll waits (at the edge, in the dispatcher) on the stamp of a confirmed "nothing".
        let quiet = request.and_then(|request| {
            self.quiet_for(&request, now_ms())
                .filter(|quiet| quiet.confirmed)
        });
        if let (Ok(RunnerReply::Nothing), Some(quiet)) = (&outcome, quiet) {
            if let Ok(stamp) = serde_json::to_string(&quiet.stamp) {
                res.headers_mut().set(QUIET_STAMP_HEADER, &stamp)?;
            }
        }
        Ok(res)
    }

    /// The lease book's alarm: the first leases now due, asked about at their jobs' objects
    /// (see [`LeaseBook`]).
    async fn alarm(&self) -> Result<Response> {
        // The asking runs beside this runner's claims; the re-arming does not (a claim moves
        // the alarm to its own lease when it finds none set, which it does while this runs).
        let watched = LeaseBook::of(&self.state).watch_due(&self.env).await;
        let failed = watched.as_ref().map_or(true, |w| w.failed);
        let book = LeaseBook::of(&self.state);
        let rearmed = self
            .state
            .block_concurrency_while(async move { book.rearm(failed).await })
            .await;
        match (watched, rearmed) {
            (Ok(watched), Ok(())) => {
                Response::ok(format!("{} leases asked about", watched.answered))
            }
            (Err(err), _) | (_, Err(err)) => {
                worker::console_error!("runner object: lease book alarm failed: {err:?}");
                // Retried by the runtime; the cron pass catches any lease it still misses.
                Err(err)
            }
        }
    }
}

/// A runner's claim as the edge passed it on.
#[derive(Clone)]
struct ClaimRequest {
    org: String,
    runner_id: String,
    generation: i64,
    served_targets: Option<Value>,
    request_id: Option<String>,
}

impl ClaimRequest {
    fn served(&self) -> Option<String> {
        self.served_targets
            .as_ref()
            .filter(|v| !v.is_null())
            .map(Value::to_string)
    }
}

impl RunnerObject {
    /// A claim, from memory when the runner's last claims found nothing and nothing changed
    /// since, else from D1. `given` is a queue stamp the caller looked at just before (a long
    /// poll woken by it): a D1 read that follows it may remember its "nothing" at that stamp.
    /// For a long poll (`long`), a "nothing" that is not confirmed yet is read once more, so
    /// that the caller has a stamp to wait on.
    async fn claim_once(
        &self,
        request: &ClaimRequest,
        mut given: Option<Stamp>,
        long: bool,
        trips: &RoundTrips,
    ) -> RunnerAnswer {
        for _ in 0..2 {
            let before = match (given.take(), self.quiet_for(request, now_ms())) {
                (Some(stamp), _) => Some(stamp),
                (None, None) => None,
                (None, Some(quiet)) => {
                    match objects::dispatch::stamp(&self.env, &request.org, Some(&quiet.stamp))
                        .await
                    {
                        // Nothing was queued (nor the runner changed) since it found nothing.
                        Ok(stamp) if quiet.confirmed && stamp == quiet.stamp => {
                            return Ok(RunnerReply::Nothing);
                        }
                        Ok(stamp) => Some(stamp),
                        Err(err) => {
                            worker::console_error!("runner object: no queue stamp: {err:?}");
                            self.quiet.borrow_mut().take();
                            None
                        }
                    }
                }
            };
            let reply = self.claim_locked(request, before, trips).await?;
            let confirmed = self.quiet.borrow().as_ref().is_some_and(|q| q.confirmed);
            if !matches!(reply, RunnerReply::Nothing) || !long || confirmed {
                return Ok(reply);
            }
        }
        Ok(RunnerReply::Nothing)
    }

    /// The remembered "nothing" that applies to `request`, if any.
    fn quiet_for(&self, request: &ClaimRequest, now: i64) -> Option<Quiet> {
        if let Some(id) = &request.request_id {
            if self.granted.borrow().contains(id) {
                return None;
            }
        }
        let served = request.served();
        let mut quiet = self
            .quiet
            .borrow()
            .clone()
            .filter(|q| q.generation == request.generation && q.served == served)?;
        if now - quiet.since > QUIET_MILLIS {
            quiet.confirmed = false;
        }
        Some(quiet)
    }

    /// One claim from D1, under the object's lock, and what it teaches the object: a grant or
    /// a refusal forgets the remembered "nothing"; finding nothing remembers it, at `before` (the
    /// stamp looked at before the read), or unconfirmed at the stamp looked at after it.
    async fn claim_locked(
        &self,
        request: &ClaimRequest,
        before: Option<Stamp>,
        trips: &RoundTrips,
    ) -> RunnerAnswer {
        let env = self.env.clone();
        let book = LeaseBook::of(&self.state);
        let counted = trips.clone();
        let profile = Rc::clone(&self.profile);
        let quiet = Rc::clone(&self.quiet);
        let granted = Rc::clone(&self.granted);
        let request = request.clone();
        self.state
            .block_concurrency_while(async move {
                let outcome = async {
                    let db = Db::of(&env, counted)?;
                    let claimant = Claimant {
                        org: &request.org,
                        runner_id: &request.runner_id,
                        generation: request.generation,
                        served_targets: request.served_targets.as_ref(),
                        request_id: request.request_id.as_deref(),
                    };
                    claim(&env, &db, &book, &profile, claimant).await
                }
                .await;
                let found_nothing = matches!(&outcome, Ok(RunnerReply::Nothing));
                let remembered = if found_nothing {
                    let (stamp, confirmed) = match before {
                        Some(stamp) => (Some(stamp), true),
                        None => (
                            objects::dispatch::stamp(&env, &request.org, None)
                                .await
                                .ok(),
                            false,
                        ),
                    };
                    stamp.map(|stamp| Quiet {
                        stamp,
                        confirmed,
                        generation: request.generation,
                        served: request.served(),
                        since: now_ms(),
                    })
                } else {
                    None
                };
                *quiet.borrow_mut() = remembered;
                if let (Ok(RunnerReply::Granted(_)), Some(id)) = (&outcome, &request.request_id) {
                    let mut granted = granted.borrow_mut();
                    if !granted.contains(id) {
                        if granted.len() == GRANTED_REQUESTS {
                            granted.pop_front();
                        }
                        granted.push_back(id.clone());
                    }
                }
                Ok(outcome)
            })
            .await
            .unwrap_or_else(|err| Err(RunnerRefusal::internal(err)))
    }

    #[cfg(feature = "bench-floor")]
    async fn floor(&self, trips: &RoundTrips) -> RunnerAnswer {
        let env = self.env.clone();
        let counted = trips.clone();
        self.state
            .block_concurrency_while(async move {
                Ok(match Db::of(&env, counted) {
                    Ok(db) => floor(&db).await,
                    Err(err) => Err(err.into()),
                })
            })
            .await
            .unwrap_or_else(|err| Err(RunnerRefusal::internal(err)))
    }

    #[cfg(not(feature = "bench-floor"))]
    async fn floor(&self, _trips: &RoundTrips) -> RunnerAnswer {
        Err(RunnerRefusal::NoSuchRoute)
    }
}

/// What a claim answers: carried out, or refused (and why).
type RunnerAnswer = std::result::Result<RunnerReply, RunnerRefusal>;

/// The runner's capabilities and tags, as stored: what its claim's index ranges and matching
/// are built from.
#[derive(Clone, PartialEq, Eq)]
struct Profile {
    capabilities: String,
    tags: String,
}

impl Profile {
    fn of(runner: &runners::RunnerRow) -> Self {
        Self {
            capabilities: runner.capabilities.clone(),
            tags: runner.tags.clone(),
        }
    }

    fn parse(&self) -> ApiResult<RunnerProfile> {
        let capabilities: Value =
            serde_json::from_str(&self.capabilities).map_err(ApiError::internal)?;
        let tags: Value = serde_json::from_str(&self.tags).map_err(ApiError::internal)?;
        Ok(RunnerProfile::new(
            CapabilityDocument::parse(&capabilities).map_err(ApiError::internal)?,
            parse_tags(&tags).map_err(ApiError::internal)?,
        ))
    }
}

/// Who claims, as the edge verified the credential.
struct Claimant<'a> {
    org: &'a str,
    runner_id: &'a str,
    generation: i64,
    served_targets: Option<&'a Value>,
    /// The runner's idempotency key for this claim.
    request_id: Option<&'a str>,
}

/// A claim: one D1 read and one D1 write when the object is warm.
///
/// The read is one batch: the runner's row (its credential generation, state and capacity,
/// checked fresh on every claim) and the first page of candidates, whose index ranges come from
/// the capabilities the object remembers from its last claim. When the row shows other
/// capabilities or tags than those, the ranges are built again from the row and read again (a
/// cold object reads the row first). The write is the grant ([`super::grant`]), from the
/// candidate row as read here: no read of its own; its batch asserts the job is still as read
/// and the runner's credential generation as checked.
async fn claim(
    env: &Env,
    db: &Db,
    book: &LeaseBook,
    remembered: &RefCell<Option<Profile>>,
    claimant: Claimant<'_>,
) -> RunnerAnswer {
    let Claimant {
        org,
        runner_id,
        generation,
        served_targets,
        request_id,
    } = claimant;
    let served: Option<Vec<ServedTarget>> = match served_targets {
        None | Some(Value::Null) => None,
        // The edge refused any that do not parse.
        Some(v) => Some(parse_served_targets(v).map_err(RunnerRefusal::internal)?),
    };
    let gone = || RunnerRefusal::RunnerGone;
    let last = remembered.borrow_mut().take();
    let mut profile = match last {
        Some(profile) => profile,
        None => Profile::of(&runners::get(db, org, runner_id).await?.ok_or_else(gone)?),
    };
    // At most two reads: the remembered profile's, then (if the row moved on) the row's own.
    let (runner, mut ranges, runner_profile, first_page, granted) = loop {
        let runner_profile = profile.parse()?;
        let mut ranges = Ranges::of(&runner_profile);
        let claimant = batched::Claimant {
            runner_id,
            request_id,
        };
        let read = ranges.next_page(db, org, Some(&claimant)).await?;
        let runner = read.runner.ok_or_else(gone)?;
        let (granted, page) = (read.granted, read.jobs);
        let read = Profile::of(&runner);
        if read == profile || granted.is_some() {
            break (runner, ranges, runner_profile, page, granted);
        }
        profile = read;
    };
    *remembered.borrow_mut() = Some(profile);
    let state = runner.state;
    if runner.credential_generation != generation || !state.can_authenticate() {
        return Err(RunnerRefusal::CredentialRevoked);
    }
    // The same request again: the claim it was granted, answered as it was (its answer was
    // lost on the way back), never a second grant.
    if let Some(granted) = granted {
        return Ok(RunnerReply::Granted(ClaimGrant::replayed(granted)?));
    }
    if !state.can_claim() {
        return Err(RunnerRefusal::NotActive(runner.state));
    }
    if runner.active_claims >= runner.max_concurrent_jobs {
        return Err(RunnerRefusal::AtCapacity);
    }
    let grantee = grant::Grantee {
        org,
        runner: runner_id,
        generation: u64::try_from(runner.credential_generation).map_err(ApiError::internal)?,
        request_id,
    };

    let mut page = first_page;
    for pages in 1..=MAX_PAGES {
        if page.is_empty() {
            break;
        }
        let mut candidates = VecDeque::from(page);
        let mut scattered = false;
        while let Some(candidate) = candidates.pop_front() {
            let requirements: Value =
                serde_json::from_str(&candidate.requirements).map_err(ApiError::internal)?;
            let Ok(requirements) = Requirements::parse(&requirements) else {
                continue;
            };
            let subject = SubjectRef {
                version_id: candidate.subject_version_id,
                content_hash: candidate.subject_content_hash.clone(),
            };
            if match_job(&runner_profile, &requirements, &subject, served.as_deref()).is_err() {
                continue;
            }
            let refusal = match grant::prepare(env, db, &candidate, &grantee, now_ms()) {
                Ok(prepared) => {
                    // Before the commit: no crash between the two leaves a lease unwatched.
                    let entry = book.arm(&prepared).await?;
                    match grant::commit(db, prepared).await {
                        Ok(granted) => return Ok(RunnerReply::Granted(granted)),
                        Err(refusal) => {
                            book.forget(&entry).await;
                            refusal
                        }
                    }
                }
                Err(refusal) => refusal,
            };
            match refusal {
                // Another runner got there first, or it changed: try the next candidate.
                GrantRefusal::Taken => {
                    if !scattered {
                        // Other runners are claiming from the same head of the queue, and in
                        // order they would all ask for the same next job, of which only one
                        // grant commits. From a random place in the rest of
                        // the page they mostly ask for different ones. A runner alone never
                        // loses a race, so for it the queue order holds exactly; racing
                        // runners may take the jobs of one page in another order.
                        scattered = true;
                        let [a, b, c, d] = random_bytes::<4>()?;
                        let len = candidates.len().max(1);
                        let start = usize::try_from(u32::from_le_bytes([a, b, c, d]))
                            .map_or(0, |n| n % len);
                        candidates.rotate_left(start);
                    }
                    continue;
                }
                GrantRefusal::Refused(refusal) => return Err(refusal),
            }
        }
        if pages == MAX_PAGES {
            break;
        }
        page = ranges.next_page(db, org, None).await?.jobs;
    }
    Ok(RunnerReply::Nothing)
}

/// The first leases of the claims this runner's object granted, one storage entry each
/// (`lease:<lease ms>:<attempt>:<job id>`, so listed in the order they end), and an alarm at or
/// before the first of them: what watches a lease until its job's object does.
///
/// A grant is written here before its batch commits ([`LeaseBook::arm`]), so every lease has an
/// alarm before it exists. The job's object is not called by the grant (see [`super::grant`]);
/// it arms its own alarm with its first write, normally the holder's first heartbeat. At the
/// first lease, this object's alarm asks the job's object whether it watches the lease now
/// (`JobOp::Watch`): it does when it wrote since and its alarm is set, or when the claim is
/// over. If not (no heartbeat came, or the object was evicted since), recovery looks at the
/// lease right then, and either recovers it or arms the job's own alarm where it now ends.
/// The entry is deleted once the job's object answered.
struct LeaseBook(Storage);

const LEASE_PREFIX: &str = "lease:";
/// Entries an alarm asks about per run; it runs again at once for the rest.
const WATCHES_PER_ALARM: usize = 32;
/// When asking about an entry failed in an alarm, the next try.
const WATCH_RETRY_MILLIS: i64 = 30_000;

fn entry_of(grant: &Prepared) -> String {
    format!(
        "{LEASE_PREFIX}{:015}:{}:{}",
        grant.lease(),
        grant.attempt(),
        grant.job_id()
    )
}

/// An entry's lease, attempt and job id.
fn parse_entry(entry: &str) -> Option<(i64, i64, &str)> {
    let mut parts = entry.strip_prefix(LEASE_PREFIX)?.splitn(3, ':');
    let lease = parts.next()?.parse().ok()?;
    let attempt = parts.next()?.parse().ok()?;
    let job_id = parts.next().filter(|id| !id.is_empty())?;
    Some((lease, attempt, job_id))
}

/// What a lease book alarm does with the entries it listed (in key order, so by lease).
#[derive(Debug, PartialEq)]
struct Plan<'a> {
    /// Entries whose lease is due, with their attempt and job id: asked about now.
    due: Vec<(&'a str, i64, &'a str)>,
    /// Entries that are not the book's (deleted).
    malformed: Vec<&'a str>,
}

fn plan(entries: &[String], now: i64) -> Plan<'_> {
    let mut plan = Plan {
        due: Vec::new(),
        malformed: Vec::new(),
    };
    for entry in entries {
        match parse_entry(entry) {
            None => plan.malformed.push(entry),
            Some((lease, _, _)) if lease > now => break,
            Some((_, attempt, job_id)) => plan.due.push((entry, attempt, job_id)),
        }
    }
    plan
}

/// When the lease book's alarm runs next, given the first entry's lease after a run: at it
/// when it is ahead; at once when an entry is due still (listed past the run's limit, or due
/// since), unless asking failed in the run (those entries come first again): then after
/// [`WATCH_RETRY_MILLIS`]. Never, with no entry left.
fn next_alarm(first: Option<i64>, now: i64, failed: bool) -> Option<i64> {
    match first {
        None => None,
        Some(lease) if lease > now => Some(lease),
        Some(_) if failed => Some(now + WATCH_RETRY_MILLIS),
        Some(_) => Some(now),
    }
}

/// What one lease book alarm did.
struct Watched {
    /// Entries the jobs' objects answered (deleted).
    answered: usize,
    /// Whether asking about an entry failed (it stays).
    failed: bool,
}

impl LeaseBook {
    fn of(state: &State) -> Self {
        Self(state.storage())
    }

    /// Writes the grant's entry, with the alarm moved to its lease unless it is set earlier
    /// already; answers the entry's key once both are on disk.
    async fn arm(&self, grant: &Prepared) -> ApiResult<String> {
        let entry = entry_of(grant);
        let lease = grant.lease();
        let alarm = self.0.get_alarm().await.map_err(ApiError::internal)?;
        let put = self.0.put(&entry, grant.job_id());
        if alarm.is_some_and(|at| at <= lease) {
            put.await
        } else {
            // Asked for in the same turn: the runtime writes both at once.
            futures_util::future::try_join(put, self.0.set_alarm(alarm_delay(lease)))
                .await
                .map(|_| ())
        }
        .map_err(ApiError::internal)?;
        Ok(entry)
    }

    /// Deletes the entry of a grant that did not commit. Should that fail, the alarm finds no
    /// lease of its attempt to watch and recovery's look changes nothing.
    async fn forget(&self, entry: &str) {
        if let Err(err) = self.0.delete(entry).await {
            worker::console_error!("runner object: forgetting {entry} failed: {err:?}");
        }
    }

    /// The alarm's asking: each entry whose lease is due is asked about at its job's object
    /// (which recovers the lease unless it watches it), and deleted once answered.
    async fn watch_due(&self, env: &Env) -> Result<Watched> {
        let entries = self.list(WATCHES_PER_ALARM).await?;
        let Plan { due, malformed } = plan(&entries, now_ms());
        for entry in malformed {
            self.forget(entry).await;
        }
        let mut watched = Watched {
            answered: 0,
            failed: false,
        };
        for (entry, attempt, job_id) in due {
            let op = JobOp::Watch {
                job_id: job_id.to_owned(),
                attempt,
            };
            let why = match objects::job::ask(env, &RoundTrips::default(), &op).await {
                Ok(Ok(_)) => {
                    self.forget(entry).await;
                    watched.answered += 1;
                    continue;
                }
                Ok(Err(refusal)) => format!("{refusal:?}"),
                Err(err) => format!("{err:?}"),
            };
            worker::console_error!("runner object: watching {entry}: {why}");
            watched.failed = true;
        }
        Ok(watched)
    }

    /// Moves the alarm to where the entries now need it ([`next_alarm`]). A key that is not
    /// an entry (`watch_due` deletes those) never hides the entries after it.
    async fn rearm(&self, failed: bool) -> Result<()> {
        let listed = self.list(WATCHES_PER_ALARM).await?;
        let now = now_ms();
        // A full listing of such keys alone: run again, which deletes them.
        let first = listed
            .iter()
            .find_map(|entry| parse_entry(entry))
            .map(|(lease, _, _)| lease)
            .or((listed.len() == WATCHES_PER_ALARM).then_some(now));
        match next_alarm(first, now, failed) {
            Some(at) => self.0.set_alarm(alarm_delay(at)).await,
            None => self.0.delete_alarm().await,
        }
    }

    /// The first `limit` entries' keys, in the order their leases end.
    async fn list(&self, limit: usize) -> Result<Vec<String>> {
        let listed = self
            .0
            .list_with_options(ListOptions::new().prefix(LEASE_PREFIX).limit(limit))
            .await?;
        let mut entries = Vec::new();
        listed.for_each(&mut |_, key| entries.extend(key.as_string()));
        Ok(entries)
    }
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

    /// The next page of every unfinished range, merged in queue order, with the `claimant`'s
    /// rows (its runner row, a retried request's claim) read in the same round trip.
    async fn next_page(
        &mut self,
        db: &Db,
        org: &str,
        claimant: Option<&batched::Claimant<'_>>,
    ) -> ApiResult<Page> {
        let open: Vec<usize> = (0..self.ranges.len())
            .filter(|&i| !self.ranges[i].done)
            .collect();
        let pages: Vec<batched::RangePage<'_>> = open
            .iter()
            .map(|&i| {
                let range = &self.ranges[i];
                batched::RangePage {
                    kind: &range.kind,
                    runtime: &range.runtime,
                    after: range.after.as_ref().map(|(at, id)| (*at, id.as_str())),
                }
            })
            .collect();
        let read = batched::candidate_pages(
            db,
            org,
            claimant,
            self.external,
            &pages,
            CANDIDATES_PER_RANGE,
        )
        .await?;
        let mut jobs = Vec::new();
        for (&i, rows) in open.iter().zip(read.pages) {
            let range = &mut self.ranges[i];
            range.done = i64::try_from(rows.len()).unwrap_or(0) < CANDIDATES_PER_RANGE;
            range.after = rows.last().map(|c| (c.created_at, c.id.clone()));
            jobs.extend(rows);
        }
        jobs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(Page {
            runner: read.runner,
            granted: read.granted,
            jobs,
        })
    }
}

/// One page of a claim's read ([`Ranges::next_page`]).
struct Page {
    /// The claimant's row, when it was read beside the page.
    runner: Option<runners::RunnerRow>,
    /// The claim a retried request already got.
    granted: Option<jobs::ClaimAnswer>,
    /// The candidates, in queue order.
    jobs: Vec<jobs::JobRow>,
}

/// The benchmark floor: the claim's shape (an object call under the same lock, then one D1
/// batch write) with no logic. Compiled only with the `bench-floor` feature; scripts/bench
/// creates its table before the run.
#[cfg(feature = "bench-floor")]
async fn floor(db: &Db) -> RunnerAnswer {
    let now = crate::platform::now_ms();
    crate::store::batch(
        db,
        vec![
            crate::store::bench_floor_write(db, now)?,
            crate::store::bench_floor_write(db, now)?,
        ],
    )
    .await?;
    Ok(RunnerReply::Floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(lease: i64, attempt: i64, job_id: &str) -> String {
        format!("{LEASE_PREFIX}{lease:015}:{attempt}:{job_id}")
    }

    #[test]
    fn an_entry_names_its_lease_attempt_and_job_and_sorts_by_lease() {
        let early = entry(999_999_999_999, 3, "job_b");
        let late = entry(1_764_000_000_000, 1, "job_a");
        assert!(early < late, "entries list in the order their leases end");
        assert_eq!(parse_entry(&late), Some((1_764_000_000_000, 1, "job_a")));
        assert_eq!(parse_entry("lease:12:1:"), None);
        assert_eq!(parse_entry("lease:x:1:job_a"), None);
        assert_eq!(parse_entry("other:12:1:job_a"), None);
    }

    #[test]
    fn an_alarm_asks_about_the_due_entries_only() {
        let entries = vec![
            entry(100, 1, "job_a"),
            "lease:garbage".to_owned(),
            entry(200, 2, "job_b"),
            entry(300, 1, "job_c"),
            "lease:after-the-first-ahead".to_owned(),
        ];
        assert_eq!(
            plan(&entries, 200),
            Plan {
                due: vec![
                    (entries[0].as_str(), 1, "job_a"),
                    (entries[2].as_str(), 2, "job_b")
                ],
                malformed: vec!["lease:garbage"],
            }
        );
        assert_eq!(
            plan(&[], 200),
            Plan {
                due: vec![],
                malformed: vec![]
            }
        );
    }

    #[test]
    fn the_alarm_runs_next_at_the_first_lease_ahead_or_at_once_or_later_after_a_failure() {
        assert_eq!(next_alarm(Some(300), 200, false), Some(300));
        assert_eq!(next_alarm(Some(300), 200, true), Some(300));
        assert_eq!(next_alarm(Some(150), 200, false), Some(200));
        assert_eq!(
            next_alarm(Some(150), 200, true),
            Some(200 + WATCH_RETRY_MILLIS)
        );
        assert_eq!(next_alarm(None, 200, true), None);
    }
}
