//! `Queues`: per queue, the jobs that wait and run, the runners that can serve it by state, and
//! how many runners it wants (see `edgerunner_protocol::queue`), from one bounded read.

use edgerunner_protocol::capability::{
    match_job, parse_tags, CapabilityDocument, Requirements, RunnerProfile, SubjectRef,
};
use edgerunner_protocol::queue::{suggested_runners, OVERFLOW_ID, OVERFLOW_NAME};
use edgerunner_protocol::state::{JobState, RunnerState};
use serde::Serialize;
use serde_json::{json, Value};

use crate::platform::rfc3339;
use crate::store::queues::{QueuesRead, RoutedRunner};

/// A runner not seen for this long is offline: an idle runner is seen at least each time it
/// renews its credential (at most 10 minutes), a busy one at every heartbeat.
pub(crate) const OFFLINE_AFTER_MILLIS: i64 = 15 * 60 * 1000;

/// The id the view gives live jobs enqueued before queues existed (migration 0016).
pub(crate) const UNASSIGNED_ID: &str = "q_unassigned";
const UNASSIGNED_NAME: &str = "jobs enqueued before queues existed";

#[derive(Serialize, Default, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueJobs {
    pub(crate) queued: i64,
    pub(crate) claimed: i64,
    pub(crate) running: i64,
    pub(crate) cancel_requested: i64,
}

#[derive(Serialize, Default, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueRunners {
    pub(crate) idle: i64,
    pub(crate) busy: i64,
    pub(crate) draining: i64,
    pub(crate) offline: i64,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueView {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The routing parts (`[kind, runtime, external, problemType, tags]`); `null` for the
    /// overflow and unassigned queues, which no one routing describes.
    pub(crate) routing: Value,
    pub(crate) jobs: QueueJobs,
    pub(crate) oldest_queued_at: Option<String>,
    pub(crate) oldest_queued_age_seconds: Option<i64>,
    /// Runners that can serve it, by state; `null` where no one routing describes the queue.
    pub(crate) runners: Option<QueueRunners>,
    /// Jobs one runner of it takes at once: the mean `maxConcurrentJobs` of its runners that
    /// are not offline (1 when there is none).
    pub(crate) slots_per_runner: i64,
    /// `ceil((queued + claimed + running + cancelRequested) / slotsPerRunner)`.
    pub(crate) suggested_runners: i64,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueuesView<'a> {
    pub(crate) organization_id: &'a str,
    pub(crate) queues: Vec<QueueView>,
    /// A bound of the read was reached: counts are at least these.
    pub(crate) capped: bool,
    pub(crate) generated_at: Option<String>,
}

/// How a runner that takes (or took) work counts for a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunnerLoad {
    Idle,
    Busy,
    Draining,
    Offline,
}

impl RunnerLoad {
    pub(crate) const ALL: [RunnerLoad; 4] = [Self::Idle, Self::Busy, Self::Draining, Self::Offline];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Draining => "draining",
            Self::Offline => "offline",
        }
    }

    /// How `runner` counts at `now` (`None`: pending approval or revoked, it takes no work).
    pub(crate) fn of(runner: &RoutedRunner, now: i64) -> Option<Self> {
        let seen_lately = runner
            .last_seen_at
            .is_some_and(|at| now.saturating_sub(at) <= OFFLINE_AFTER_MILLIS);
        match runner.state {
            RunnerState::Draining => Some(Self::Draining),
            RunnerState::Lost => Some(Self::Offline),
            RunnerState::Active if !seen_lately => Some(Self::Offline),
            RunnerState::Active if runner.active_claims > 0 => Some(Self::Busy),
            RunnerState::Active => Some(Self::Idle),
            RunnerState::PendingApproval | RunnerState::Revoked => None,
        }
    }
}

impl QueueRunners {
    fn add(&mut self, load: RunnerLoad) {
        match load {
            RunnerLoad::Idle => self.idle += 1,
            RunnerLoad::Busy => self.busy += 1,
            RunnerLoad::Draining => self.draining += 1,
            RunnerLoad::Offline => self.offline += 1,
        }
    }

    /// How many runners count as `load`.
    pub(crate) fn of(&self, load: RunnerLoad) -> i64 {
        match load {
            RunnerLoad::Idle => self.idle,
            RunnerLoad::Busy => self.busy,
            RunnerLoad::Draining => self.draining,
            RunnerLoad::Offline => self.offline,
        }
    }
}

/// The requirements a queue stands for (its routing parts, the smallest limits): a runner that
/// matches them can serve the queue, though it may still refuse one job of it for its limits.
fn representative(canonical: &Value) -> Option<Requirements> {
    let [kind, runtime, external, problem_type, tags] = canonical.as_array()?.as_slice() else {
        return None;
    };
    let mut value = json!({
        "executionKind": kind, "runtime": runtime, "external": external, "tags": tags,
        "limits": {"cpuSeconds": 1, "memoryMb": 1, "wallSeconds": 1, "outputBytes": 1},
    });
    if !problem_type.is_null() {
        value["problemType"] = problem_type.clone();
    }
    Requirements::parse(&value).ok()
}

/// A runner's routing profile, as its record holds it (`None`: unreadable, so it serves none).
fn profile(runner: &RoutedRunner) -> Option<RunnerProfile> {
    let capabilities: Value = serde_json::from_str(&runner.capabilities).ok()?;
    let tags: Value = serde_json::from_str(&runner.tags).ok()?;
    Some(RunnerProfile::new(
        CapabilityDocument::parse(&capabilities).ok()?,
        parse_tags(&tags).ok()?,
    ))
}

/// The view of what [`crate::store::queues::read`] read, at `now`.
pub(crate) fn build<'a>(organization_id: &'a str, read: &QueuesRead, now: i64) -> QueuesView<'a> {
    let profiles: Vec<(&RoutedRunner, Option<RunnerProfile>)> =
        read.runners.iter().map(|r| (r, profile(r))).collect();
    let any_subject = SubjectRef {
        version_id: 0,
        content_hash: String::new(),
    };
    let mut named: Vec<(String, String, Value)> = read
        .queues
        .iter()
        .map(|q| {
            let routing = serde_json::from_str(&q.canonical).unwrap_or(Value::Null);
            (q.id.clone(), q.name.clone(), routing)
        })
        .collect();
    for (id, name) in [
        (OVERFLOW_ID, OVERFLOW_NAME),
        (UNASSIGNED_ID, UNASSIGNED_NAME),
    ] {
        let stored = if id == UNASSIGNED_ID { None } else { Some(id) };
        if read.live.iter().any(|c| c.queue_id.as_deref() == stored) {
            named.push((id.to_owned(), name.to_owned(), Value::Null));
        }
    }
    let queues = named
        .into_iter()
        .map(|(id, name, routing)| {
            let stored = if id == UNASSIGNED_ID {
                None
            } else {
                Some(id.as_str())
            };
            let mut jobs = QueueJobs::default();
            let mut oldest_queued = None;
            for count in read.live.iter().filter(|c| c.queue_id.as_deref() == stored) {
                match count.state {
                    JobState::Queued => {
                        jobs.queued += count.jobs;
                        oldest_queued = Some(count.oldest_at);
                    }
                    JobState::Claimed => jobs.claimed += count.jobs,
                    JobState::Running => jobs.running += count.jobs,
                    JobState::CancelRequested => jobs.cancel_requested += count.jobs,
                    _ => {}
                }
            }
            let (runners, slots) = match representative(&routing) {
                Some(requirements) => {
                    let mut runners = QueueRunners::default();
                    let mut slots = Vec::new();
                    for (runner, profile) in &profiles {
                        let serves = profile.as_ref().is_some_and(|p| {
                            match_job(p, &requirements, &any_subject, None).is_ok()
                        });
                        let Some(load) = RunnerLoad::of(runner, now).filter(|_| serves) else {
                            continue;
                        };
                        runners.add(load);
                        if load != RunnerLoad::Offline {
                            slots.push(runner.max_concurrent_jobs.max(1));
                        }
                    }
                    let mean = match i64::try_from(slots.len()) {
                        Ok(n) if n > 0 => (slots.iter().sum::<i64>() / n).max(1),
                        _ => 1,
                    };
                    (Some(runners), mean)
                }
                None => (None, 1),
            };
            let active = jobs.claimed + jobs.running + jobs.cancel_requested;
            let suggested = suggested_runners(
                u64::try_from(jobs.queued).unwrap_or(0),
                u64::try_from(active).unwrap_or(0),
                u64::try_from(slots).unwrap_or(1),
                0,
                u64::MAX,
            );
            QueueView {
                id,
                name,
                routing,
                oldest_queued_at: oldest_queued.and_then(rfc3339),
                oldest_queued_age_seconds: oldest_queued
                    .map(|at| now.saturating_sub(at).max(0) / 1000),
                jobs,
                runners,
                slots_per_runner: slots,
                suggested_runners: i64::try_from(suggested).unwrap_or(i64::MAX),
            }
        })
        .collect();
    QueuesView {
        organization_id,
        queues,
        capped: read.capped(),
        generated_at: rfc3339(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queues::{LiveCount, QueueRow};

    const NOW: i64 = 1_800_000_000_000;

    fn runner(
        state: RunnerState,
        kinds: &[&str],
        tags: &[&str],
        claims: i64,
        seen: Option<i64>,
    ) -> RoutedRunner {
        let caps = json!({
            "protocolVersion": "1", "executionKinds": kinds, "runtimes": ["python3.12"],
            "maxConcurrentJobs": 4, "limits": {"cpuSeconds": 600, "memoryMb": 4096, "wallSeconds": 3600, "outputBytes": 10_485_760},
            "network": "deny_all", "streaming": true, "cancellation": true, "problemTypes": [], "external": false,
        });
        RoutedRunner {
            state,
            capabilities: caps.to_string(),
            tags: json!(tags).to_string(),
            max_concurrent_jobs: 4,
            active_claims: claims,
            last_seen_at: seen,
        }
    }

    fn queue(id: &str, kind: &str, tags: &[&str]) -> QueueRow {
        QueueRow {
            id: id.to_owned(),
            name: format!("{kind} queue"),
            canonical: json!([kind, "python3.12", false, null, tags]).to_string(),
        }
    }

    fn live(queue: Option<&str>, state: JobState, jobs: i64, oldest_at: i64) -> LiveCount {
        LiveCount {
            queue_id: queue.map(str::to_owned),
            state,
            jobs,
            oldest_at,
        }
    }

    #[test]
    fn runners_count_by_state_where_they_serve_and_the_queue_wants_enough_slots() {
        let read = QueuesRead {
            live: vec![
                live(
                    Some("q_aaaaaaaaaaaaaaaa"),
                    JobState::Queued,
                    9,
                    NOW - 30_000,
                ),
                live(
                    Some("q_aaaaaaaaaaaaaaaa"),
                    JobState::Running,
                    2,
                    NOW - 90_000,
                ),
            ],
            queues: vec![
                queue("q_aaaaaaaaaaaaaaaa", "prompt", &["default"]),
                queue("q_bbbbbbbbbbbbbbbb", "scorer", &["gpu"]),
            ],
            runners: vec![
                runner(RunnerState::Active, &["prompt"], &[], 0, Some(NOW - 1000)),
                runner(RunnerState::Active, &["prompt"], &[], 2, Some(NOW - 1000)),
                runner(RunnerState::Draining, &["prompt"], &[], 1, Some(NOW)),
                runner(
                    RunnerState::Active,
                    &["prompt"],
                    &[],
                    0,
                    Some(NOW - OFFLINE_AFTER_MILLIS - 1),
                ),
                runner(RunnerState::Active, &["prompt"], &[], 0, None),
                runner(RunnerState::Revoked, &["prompt"], &[], 0, Some(NOW)),
                // Serves neither: another kind, or no shared tag.
                runner(RunnerState::Active, &["workflow"], &[], 0, Some(NOW)),
                runner(RunnerState::Active, &["scorer"], &["cpu"], 0, Some(NOW)),
            ],
            counters: vec![],
        };
        let view = build("org_1", &read, NOW);
        assert!(!view.capped);
        let prompt = &view.queues[0];
        assert_eq!(
            prompt.jobs,
            QueueJobs {
                queued: 9,
                claimed: 0,
                running: 2,
                cancel_requested: 0
            }
        );
        assert_eq!(prompt.oldest_queued_age_seconds, Some(30));
        assert_eq!(
            prompt.runners,
            Some(QueueRunners {
                idle: 1,
                busy: 1,
                draining: 1,
                offline: 2
            })
        );
        assert_eq!(prompt.slots_per_runner, 4);
        assert_eq!(prompt.suggested_runners, 3, "ceil(11 / 4)");
        // An empty queue is listed, with zeros: an autoscaler scales it to zero.
        let scorer = &view.queues[1];
        assert_eq!(scorer.jobs, QueueJobs::default());
        assert_eq!(scorer.oldest_queued_at, None);
        assert_eq!(scorer.runners, Some(QueueRunners::default()));
        assert_eq!(scorer.suggested_runners, 0);
        assert_eq!(
            view.queues.len(),
            2,
            "no overflow or unassigned queue without jobs"
        );
    }

    #[test]
    fn overflow_and_unassigned_jobs_are_listed_apart_without_runners() {
        let read = QueuesRead {
            live: vec![
                live(Some(OVERFLOW_ID), JobState::Queued, 3, NOW - 5_000),
                live(None, JobState::Claimed, 1, NOW - 5_000),
            ],
            queues: vec![],
            runners: vec![runner(RunnerState::Active, &["prompt"], &[], 0, Some(NOW))],
            counters: vec![],
        };
        let view = build("org_1", &read, NOW);
        let ids: Vec<&str> = view.queues.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, [OVERFLOW_ID, UNASSIGNED_ID]);
        assert_eq!(view.queues[0].jobs.queued, 3);
        assert_eq!(view.queues[0].runners, None);
        assert_eq!(view.queues[0].suggested_runners, 3);
        assert_eq!(view.queues[1].jobs.claimed, 1);
    }
}
