//! The routing rule: [`match_job`] and every reason a job does not fit a runner.

use std::fmt;

use super::document::{Requirements, RunnerProfile, ServedTarget, SubjectRef};
use super::values::{ExecutionKind, LimitKind, Network, Origin, ProblemType, RuntimeId, Tag};

/// One reason a runner cannot take a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    ExecutionKindUnsupported {
        kind: ExecutionKind,
    },
    RuntimeMissing {
        runtime: RuntimeId,
    },
    LimitExceeded {
        limit: LimitKind,
        requested: u64,
        ceiling: u64,
    },
    /// The job needs outbound origins; the runner denies all network.
    NetworkAllowlistRequired,
    /// The runner's allowlist lacks an origin the job needs (one per origin).
    NetworkOriginNotAllowed {
        origin: Origin,
    },
    StreamingUnsupported,
    CancellationUnsupported,
    ProblemTypeUnsupported {
        problem_type: ProblemType,
    },
    ExternalMismatch {
        job: bool,
        runner: bool,
    },
    /// The effective tag lists (empty read as `["default"]`) share nothing.
    NoSharedTag {
        job: Vec<Tag>,
        runner: Vec<Tag>,
    },
    /// The runner named the targets it serves, and the job's subject is not one of them.
    TargetNotServed {
        version_id: i64,
        content_hash: String,
    },
}

impl Mismatch {
    /// A stable machine name, e.g. for a "why is this job waiting" view.
    pub fn code(&self) -> &'static str {
        match self {
            Mismatch::ExecutionKindUnsupported { .. } => "EXECUTION_KIND_UNSUPPORTED",
            Mismatch::RuntimeMissing { .. } => "RUNTIME_MISSING",
            Mismatch::LimitExceeded { .. } => "LIMIT_EXCEEDED",
            Mismatch::NetworkAllowlistRequired => "NETWORK_ALLOWLIST_REQUIRED",
            Mismatch::NetworkOriginNotAllowed { .. } => "NETWORK_ORIGIN_NOT_ALLOWED",
            Mismatch::StreamingUnsupported => "STREAMING_UNSUPPORTED",
            Mismatch::CancellationUnsupported => "CANCELLATION_UNSUPPORTED",
            Mismatch::ProblemTypeUnsupported { .. } => "PROBLEM_TYPE_UNSUPPORTED",
            Mismatch::ExternalMismatch { .. } => "EXTERNAL_MISMATCH",
            Mismatch::NoSharedTag { .. } => "NO_SHARED_TAG",
            Mismatch::TargetNotServed { .. } => "TARGET_NOT_SERVED",
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn side(external: bool) -> &'static str {
            if external {
                "external"
            } else {
                "local"
            }
        }
        fn list(tags: &[Tag]) -> String {
            let names: Vec<&str> = tags.iter().map(Tag::as_str).collect();
            format!("[{}]", names.join(", "))
        }
        match self {
            Mismatch::ExecutionKindUnsupported { kind } => {
                write!(f, "runner does not support execution kind {kind}")
            }
            Mismatch::RuntimeMissing { runtime } => {
                write!(f, "runner does not declare runtime {runtime}")
            }
            Mismatch::LimitExceeded {
                limit,
                requested,
                ceiling,
            } => write!(
                f,
                "job requests {limit} {requested}, above the runner's ceiling of {ceiling}"
            ),
            Mismatch::NetworkAllowlistRequired => {
                write!(
                    f,
                    "job needs network origins but the runner denies all network"
                )
            }
            Mismatch::NetworkOriginNotAllowed { origin } => {
                write!(f, "runner's network allowlist does not include {origin}")
            }
            Mismatch::StreamingUnsupported => {
                write!(
                    f,
                    "job requires streaming, which the runner does not declare"
                )
            }
            Mismatch::CancellationUnsupported => {
                write!(
                    f,
                    "job requires cancellation, which the runner does not declare"
                )
            }
            Mismatch::ProblemTypeUnsupported { problem_type } => {
                write!(
                    f,
                    "runner does not evaluate problem type {:?}",
                    problem_type.as_str()
                )
            }
            Mismatch::ExternalMismatch { job, runner } => write!(
                f,
                "job is {} but the runner is {}",
                side(*job),
                side(*runner)
            ),
            Mismatch::NoSharedTag { job, runner } => write!(
                f,
                "job tags {} share none with runner tags {}",
                list(job),
                list(runner)
            ),
            Mismatch::TargetNotServed {
                version_id,
                content_hash,
            } => write!(
                f,
                "runner does not serve target version {version_id} ({content_hash})"
            ),
        }
    }
}

/// Whether `runner` may take a job with `req` about `subject`, given the targets it said it
/// serves on this claim. `Err` lists every reason, in the order of the capability table.
pub fn match_job(
    runner: &RunnerProfile,
    req: &Requirements,
    subject: &SubjectRef,
    served: Option<&[ServedTarget]>,
) -> Result<(), Vec<Mismatch>> {
    let caps = &runner.capabilities;
    let mut reasons = Vec::new();

    if !caps.execution_kinds.contains(&req.execution_kind) {
        reasons.push(Mismatch::ExecutionKindUnsupported {
            kind: req.execution_kind,
        });
    }
    if !caps.runtimes.contains(&req.runtime) {
        reasons.push(Mismatch::RuntimeMissing {
            runtime: req.runtime.clone(),
        });
    }
    for limit in LimitKind::ALL {
        let (requested, ceiling) = (req.limits.get(limit), caps.limits.get(limit));
        if requested > ceiling {
            reasons.push(Mismatch::LimitExceeded {
                limit,
                requested,
                ceiling,
            });
        }
    }
    match (&req.network, &caps.network) {
        (Network::DenyAll, _) => {}
        (Network::Allowlist(_), Network::DenyAll) => {
            reasons.push(Mismatch::NetworkAllowlistRequired)
        }
        (Network::Allowlist(needed), Network::Allowlist(allowed)) => {
            reasons.extend(
                needed
                    .iter()
                    .filter(|origin| !allowed.contains(origin))
                    .map(|origin| Mismatch::NetworkOriginNotAllowed {
                        origin: origin.clone(),
                    }),
            );
        }
    }
    if req.streaming && !caps.streaming {
        reasons.push(Mismatch::StreamingUnsupported);
    }
    if req.cancellation && !caps.cancellation {
        reasons.push(Mismatch::CancellationUnsupported);
    }
    if let Some(problem_type) = &req.problem_type {
        if !caps.problem_types.contains(problem_type) {
            reasons.push(Mismatch::ProblemTypeUnsupported {
                problem_type: problem_type.clone(),
            });
        }
    }
    if req.external != caps.external {
        reasons.push(Mismatch::ExternalMismatch {
            job: req.external,
            runner: caps.external,
        });
    }
    let (job_tags, runner_tags) = (effective_tags(&req.tags), effective_tags(&runner.tags));
    if !job_tags.iter().any(|tag| runner_tags.contains(tag)) {
        reasons.push(Mismatch::NoSharedTag {
            job: job_tags,
            runner: runner_tags,
        });
    }
    if let Some(served) = served.filter(|served| !served.is_empty()) {
        let serves = served.iter().any(|target| {
            target.version_id == subject.version_id && target.content_hash == subject.content_hash
        });
        if !serves {
            reasons.push(Mismatch::TargetNotServed {
                version_id: subject.version_id,
                content_hash: subject.content_hash.clone(),
            });
        }
    }

    if reasons.is_empty() {
        Ok(())
    } else {
        Err(reasons)
    }
}

/// Whether two tag lists route together: they share an entry, an empty list reading as
/// `["default"]`. Symmetric by construction.
pub fn tags_share(a: &[Tag], b: &[Tag]) -> bool {
    let (a, b) = (effective_tags(a), effective_tags(b));
    a.iter().any(|tag| b.contains(tag))
}

pub(super) fn effective_tags(tags: &[Tag]) -> Vec<Tag> {
    if tags.is_empty() {
        vec![Tag::default_tag()]
    } else {
        tags.to_vec()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::capability::fixtures::*;
    use crate::testkit::{check, Rng};

    #[test]
    fn registration_default_runner_takes_a_modest_job() {
        let runner = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"]}),
            &[],
        );
        let req = Requirements::parse(&minimal_requirements()).unwrap();
        assert_eq!(match_job(&runner, &req, &subject(), None), Ok(()));
    }

    #[test]
    fn every_reason_is_reported_with_a_readable_message() {
        let runner = profile(
            json!({
                "executionKinds": ["prompt"], "runtimes": ["nodejs20"],
                "limits": {"cpuSeconds": 10},
                "streaming": false, "cancellation": false, "external": true,
                "network": {"mode": "allowlist", "origins": ["https://a.example"]},
            }),
            &["gpu"],
        );
        let req = Requirements::parse(&json!({
            "executionKind": "agent",
            "runtime": "python3.12",
            "limits": {"cpuSeconds": 60, "memoryMb": 1, "wallSeconds": 1, "outputBytes": 1},
            "network": {"mode": "allowlist", "origins": ["https://a.example", "https://b.example"]},
            "streaming": true,
            "cancellation": true,
            "problemType": "sql",
        }))
        .unwrap();
        let served = [ServedTarget {
            version_id: 8,
            content_hash: "cd".repeat(32),
        }];
        let reasons = match_job(&runner, &req, &subject(), Some(&served)).unwrap_err();
        let messages: Vec<String> = reasons.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "runner does not support execution kind agent",
                "runner does not declare runtime python3.12",
                "job requests cpuSeconds 60, above the runner's ceiling of 10",
                "runner's network allowlist does not include https://b.example",
                "job requires streaming, which the runner does not declare",
                "job requires cancellation, which the runner does not declare",
                "runner does not evaluate problem type \"sql\"",
                "job is local but the runner is external",
                "job tags [default] share none with runner tags [gpu]",
                &format!(
                    "runner does not serve target version 7 ({})",
                    "ab".repeat(32)
                ),
            ]
        );
        let codes: BTreeSet<&str> = reasons.iter().map(Mismatch::code).collect();
        assert_eq!(codes.len(), reasons.len());
    }

    #[test]
    fn deny_all_job_fits_any_network_but_an_allowlist_job_needs_one() {
        let open = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"],
            "network": {"mode": "allowlist", "origins": ["https://a.example"]}}),
            &[],
        );
        let closed = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"]}),
            &[],
        );
        let deny = Requirements::parse(&minimal_requirements()).unwrap();
        assert_eq!(match_job(&open, &deny, &subject(), None), Ok(()));
        assert_eq!(match_job(&closed, &deny, &subject(), None), Ok(()));

        let mut v = minimal_requirements();
        v["network"] = json!({"mode": "allowlist", "origins": ["https://A.example:443"]});
        let needs = Requirements::parse(&v).unwrap();
        assert_eq!(match_job(&open, &needs, &subject(), None), Ok(()));
        assert_eq!(
            match_job(&closed, &needs, &subject(), None),
            Err(vec![Mismatch::NetworkAllowlistRequired])
        );
    }

    #[test]
    fn empty_served_targets_serve_everything_as_the_sdk_reads_them() {
        let runner = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"]}),
            &[],
        );
        let req = Requirements::parse(&minimal_requirements()).unwrap();
        assert_eq!(match_job(&runner, &req, &subject(), Some(&[])), Ok(()));
        let same = [ServedTarget {
            version_id: 7,
            content_hash: "ab".repeat(32),
        }];
        assert_eq!(match_job(&runner, &req, &subject(), Some(&same)), Ok(()));
        // Same version, other content: not the target the runner serves.
        let other = [ServedTarget {
            version_id: 7,
            content_hash: "cd".repeat(32),
        }];
        assert!(match_job(&runner, &req, &subject(), Some(&other)).is_err());
    }

    #[test]
    fn external_routing_is_one_comparison_of_two_booleans() {
        let local = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"]}),
            &[],
        );
        let external = profile(
            json!({"executionKinds": ["scorer"], "runtimes": ["python3.12"], "external": true}),
            &[],
        );
        let mut v = minimal_requirements();
        let local_job = Requirements::parse(&v).unwrap();
        v["external"] = json!(true);
        let external_job = Requirements::parse(&v).unwrap();
        assert_eq!(match_job(&local, &local_job, &subject(), None), Ok(()));
        assert_eq!(
            match_job(&external, &external_job, &subject(), None),
            Ok(())
        );
        assert_eq!(
            match_job(&external, &local_job, &subject(), None),
            Err(vec![Mismatch::ExternalMismatch {
                job: false,
                runner: true
            }])
        );
        assert!(match_job(&local, &external_job, &subject(), None).is_err());
    }

    #[test]
    fn empty_tag_lists_read_as_default() {
        let t = |names: &[&str]| {
            names
                .iter()
                .map(|n| Tag::parse(n).unwrap())
                .collect::<Vec<_>>()
        };
        assert!(tags_share(&t(&[]), &t(&[])));
        assert!(tags_share(&t(&[]), &t(&["default", "gpu"])));
        assert!(tags_share(&t(&["default"]), &t(&[])));
        assert!(!tags_share(&t(&[]), &t(&["gpu"])));
        assert!(tags_share(&t(&["gpu", "slow"]), &t(&["slow"])));
        assert!(!tags_share(&t(&["GPU"]), &t(&["gpu"])));
    }

    #[test]
    fn index_filter_matches_the_sql_it_documents() {
        let runner = profile(
            json!({"executionKinds": ["scorer", "tool"], "runtimes": ["python3.12"],
            "problemTypes": ["sql"]}),
            &[],
        );
        let filter = runner.index_filter();
        let mut v = minimal_requirements();
        assert!(filter.admits(&Requirements::parse(&v).unwrap().index_key()));
        v["problemType"] = json!("sql");
        assert!(filter.admits(&Requirements::parse(&v).unwrap().index_key()));
        v["problemType"] = json!("math");
        assert!(!filter.admits(&Requirements::parse(&v).unwrap().index_key()));
        v["problemType"] = json!(null);
        v["runtime"] = json!("nodejs20");
        assert!(!filter.admits(&Requirements::parse(&v).unwrap().index_key()));
    }

    // --- matching: properties -------------------------------------------------------------

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Break {
        Kind,
        Runtime,
        Limit(LimitKind),
        NetworkDenyAll,
        NetworkOrigin,
        Streaming,
        Cancellation,
        ProblemType,
        External,
        Tags,
        Target,
    }

    const BREAKS: [Break; 14] = [
        Break::Kind,
        Break::Runtime,
        Break::Limit(LimitKind::CpuSeconds),
        Break::Limit(LimitKind::MemoryMb),
        Break::Limit(LimitKind::WallSeconds),
        Break::Limit(LimitKind::OutputBytes),
        Break::NetworkDenyAll,
        Break::NetworkOrigin,
        Break::Streaming,
        Break::Cancellation,
        Break::ProblemType,
        Break::External,
        Break::Tags,
        Break::Target,
    ];

    impl Break {
        fn indexed(self) -> bool {
            matches!(
                self,
                Break::Kind | Break::Runtime | Break::ProblemType | Break::External
            )
        }
    }

    /// Spoils one declaration of a satisfying runner; returns the one mismatch that must
    /// result, or `None` when the job does not need what the break would remove.
    fn spoil(
        rng: &mut Rng,
        b: Break,
        req: &Requirements,
        subject: &SubjectRef,
        runner: &mut RunnerProfile,
        served: &mut Option<Vec<ServedTarget>>,
    ) -> Option<Mismatch> {
        let caps = &mut runner.capabilities;
        Some(match b {
            Break::Kind => {
                caps.execution_kinds.retain(|k| *k != req.execution_kind);
                if caps.execution_kinds.is_empty() {
                    let other = ExecutionKind::ALL
                        .into_iter()
                        .find(|k| *k != req.execution_kind);
                    caps.execution_kinds.extend(other);
                }
                Mismatch::ExecutionKindUnsupported {
                    kind: req.execution_kind,
                }
            }
            Break::Runtime => {
                caps.runtimes.retain(|r| *r != req.runtime);
                if caps.runtimes.is_empty() {
                    caps.runtimes.push(rt("other-runtime"));
                }
                Mismatch::RuntimeMissing {
                    runtime: req.runtime.clone(),
                }
            }
            Break::Limit(limit) => {
                let requested = req.limits.get(limit);
                let ceiling = requested - 1 - rng.below(requested - 1);
                *caps.limits.slot(limit) = ceiling;
                Mismatch::LimitExceeded {
                    limit,
                    requested,
                    ceiling,
                }
            }
            Break::NetworkDenyAll => {
                if req.network == Network::DenyAll {
                    return None;
                }
                caps.network = Network::DenyAll;
                Mismatch::NetworkAllowlistRequired
            }
            Break::NetworkOrigin => {
                let Network::Allowlist(needed) = &req.network else {
                    return None;
                };
                let missing = rng.pick(needed).clone();
                let Network::Allowlist(allowed) = &mut caps.network else {
                    unreachable!("a satisfying runner allows what an allowlist job needs")
                };
                allowed.retain(|o| *o != missing);
                if allowed.is_empty() {
                    allowed.push(origin("https://unrelated.example"));
                }
                Mismatch::NetworkOriginNotAllowed { origin: missing }
            }
            Break::Streaming => {
                if !req.streaming {
                    return None;
                }
                caps.streaming = false;
                Mismatch::StreamingUnsupported
            }
            Break::Cancellation => {
                if !req.cancellation {
                    return None;
                }
                caps.cancellation = false;
                Mismatch::CancellationUnsupported
            }
            Break::ProblemType => {
                let problem_type = req.problem_type.clone()?;
                caps.problem_types.retain(|p| *p != problem_type);
                Mismatch::ProblemTypeUnsupported { problem_type }
            }
            Break::External => {
                caps.external = !req.external;
                Mismatch::ExternalMismatch {
                    job: req.external,
                    runner: !req.external,
                }
            }
            Break::Tags => {
                runner.tags = vec![tag("isolated")];
                Mismatch::NoSharedTag {
                    job: effective_tags(&req.tags),
                    runner: runner.tags.clone(),
                }
            }
            Break::Target => {
                *served = Some(vec![ServedTarget {
                    version_id: subject.version_id + 1,
                    content_hash: subject.content_hash.clone(),
                }]);
                Mismatch::TargetNotServed {
                    version_id: subject.version_id,
                    content_hash: subject.content_hash.clone(),
                }
            }
        })
    }

    #[test]
    fn runner_meeting_every_requirement_matches() {
        check(500, |rng| {
            let req = random_requirements(rng);
            let subject = random_subject(rng);
            let (runner, served) = satisfying(rng, &req, &subject);
            assert_eq!(
                match_job(&runner, &req, &subject, served.as_deref()),
                Ok(())
            );
            assert!(runner.index_filter().admits(&req.index_key()));
        });
    }

    #[test]
    fn spoiling_one_declaration_yields_exactly_that_mismatch() {
        check(1_000, |rng| {
            let req = random_requirements(rng);
            let subject = random_subject(rng);
            let (mut runner, mut served) = satisfying(rng, &req, &subject);
            let b = *rng.pick(&BREAKS);
            let Some(expected) = spoil(rng, b, &req, &subject, &mut runner, &mut served) else {
                return;
            };
            assert_eq!(
                match_job(&runner, &req, &subject, served.as_deref()),
                Err(vec![expected]),
                "{b:?}"
            );
            // The index prefilter rejects exactly the indexed spoils, so it never hides a
            // job that the full match would accept.
            assert_eq!(
                runner.index_filter().admits(&req.index_key()),
                !b.indexed(),
                "{b:?}"
            );
        });
    }

    #[test]
    fn every_reason_is_reported_not_just_the_first() {
        check(500, |rng| {
            let req = random_requirements(rng);
            let subject = random_subject(rng);
            let (mut runner, mut served) = satisfying(rng, &req, &subject);
            let mut breaks = subset(rng, &BREAKS);
            // Both network spoils at once would overwrite each other.
            if breaks.contains(&Break::NetworkDenyAll) {
                breaks.retain(|b| *b != Break::NetworkOrigin);
            }
            let mut expected: Vec<Mismatch> = breaks
                .iter()
                .filter_map(|b| spoil(rng, *b, &req, &subject, &mut runner, &mut served))
                .collect();
            let mut got = match match_job(&runner, &req, &subject, served.as_deref()) {
                Ok(()) => Vec::new(),
                Err(reasons) => reasons,
            };
            let key = |m: &Mismatch| m.to_string();
            expected.sort_by_key(key);
            got.sort_by_key(key);
            assert_eq!(got, expected, "{breaks:?}");
        });
    }

    #[test]
    fn raising_any_request_never_turns_a_mismatch_into_a_match() {
        check(500, |rng| {
            let mut req = random_requirements(rng);
            let subject = random_subject(rng);
            let (mut runner, mut served) = satisfying(rng, &req, &subject);
            let b = *rng.pick(&BREAKS);
            if spoil(rng, b, &req, &subject, &mut runner, &mut served).is_none() {
                return;
            }
            let limit = *rng.pick(&LimitKind::ALL);
            *req.limits.slot(limit) += 1 + rng.below(1_000);
            req.streaming |= rng.chance(1, 2);
            req.cancellation |= rng.chance(1, 2);
            assert!(match_job(&runner, &req, &subject, served.as_deref()).is_err());
        });
    }

    #[test]
    fn tag_rule_is_symmetric() {
        check(500, |rng| {
            let a: Vec<Tag> = sorted(subset(rng, &TAGS).into_iter().map(tag));
            let b: Vec<Tag> = sorted(subset(rng, &TAGS).into_iter().map(tag));
            assert_eq!(tags_share(&a, &b), tags_share(&b, &a), "{a:?} {b:?}");
            let direct = effective_tags(&a)
                .iter()
                .any(|t| effective_tags(&b).contains(t));
            assert_eq!(tags_share(&a, &b), direct);
        });
    }
}
