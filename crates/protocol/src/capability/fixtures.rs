//! Fixtures and generators the capability tests share: documents from JSON, and random
//! requirements with a runner profile made to satisfy them.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::routing::effective_tags;
use super::*;
use crate::testkit::Rng;

pub(super) fn caps(value: Value) -> CapabilityDocument {
    CapabilityDocument::parse(&value).unwrap()
}

pub(super) fn caps_err(value: Value) -> String {
    let err = CapabilityDocument::parse(&value).unwrap_err();
    assert_eq!(err.code(), "INVALID_CAPABILITIES");
    assert_eq!(err.http_status(), 422);
    err.to_string()
}

pub(super) fn req_err(value: Value) -> String {
    let err = Requirements::parse(&value).unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUIREMENTS");
    err.to_string()
}

/// Parses JSON text, so that number lexemes arrive exactly as a client wrote them.
pub(super) fn raw(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

pub(super) fn minimal_requirements() -> Value {
    json!({
        "executionKind": "scorer",
        "runtime": "python3.12",
        "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1024},
    })
}

pub(super) fn subject() -> SubjectRef {
    SubjectRef {
        version_id: 7,
        content_hash: "ab".repeat(32),
    }
}

pub(super) fn profile(value: Value, tags: &[&str]) -> RunnerProfile {
    RunnerProfile::new(
        caps(value),
        tags.iter().map(|t| Tag::parse(t).unwrap()).collect(),
    )
}

pub(super) const RUNTIMES: [&str; 4] = [
    "python3.12",
    "nodejs20",
    "deno2",
    "ghcr.io/acme/py@sha256:00",
];

pub(super) const ORIGINS: [&str; 4] = [
    "https://api.openai.com",
    "https://example.com:8443",
    "https://a.b.c",
    "https://localhost",
];

pub(super) const PROBLEM_TYPES: [&str; 3] = ["code/python", "sql", "Math Proof"];

pub(super) const TAGS: [&str; 4] = ["default", "gpu", "slow", "eu"];

pub(super) fn subset<T: Clone>(rng: &mut Rng, items: &[T]) -> Vec<T> {
    items.iter().filter(|_| rng.chance(1, 2)).cloned().collect()
}

pub(super) fn sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    items
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

pub(super) fn rt(s: &str) -> RuntimeId {
    RuntimeId::parse(s).unwrap()
}

pub(super) fn origin(s: &str) -> Origin {
    Origin::parse(s).unwrap()
}

pub(super) fn tag(s: &str) -> Tag {
    Tag::parse(s).unwrap()
}

pub(super) fn random_requirements(rng: &mut Rng) -> Requirements {
    // Requests start at 2 so that a ceiling one below them is still a valid ceiling.
    let limit = |rng: &mut Rng| 2 + rng.below(100_000);
    let network = if rng.chance(1, 2) {
        Network::DenyAll
    } else {
        let mut origins = subset(rng, &ORIGINS);
        if origins.is_empty() {
            origins.push(*rng.pick(&ORIGINS));
        }
        Network::Allowlist(sorted(origins.iter().map(|o| origin(o))))
    };
    Requirements {
        execution_kind: *rng.pick(&ExecutionKind::ALL),
        runtime: rt(rng.pick::<&str>(&RUNTIMES)),
        limits: Limits {
            cpu_seconds: limit(rng),
            memory_mb: limit(rng),
            wall_seconds: limit(rng),
            output_bytes: limit(rng),
        },
        network,
        streaming: rng.chance(1, 2),
        cancellation: rng.chance(1, 2),
        problem_type: rng
            .chance(1, 2)
            .then(|| ProblemType::parse(rng.pick::<&str>(&PROBLEM_TYPES)).unwrap()),
        external: rng.chance(1, 3),
        tags: sorted(subset(rng, &TAGS).iter().map(|t| tag(t))),
    }
}

pub(super) fn random_subject(rng: &mut Rng) -> SubjectRef {
    SubjectRef {
        version_id: 1 + rng.below(1_000) as i64,
        content_hash: format!("{:016x}", rng.next_u64()).repeat(4),
    }
}

/// A runner whose every declaration meets or exceeds `req`, plus served targets that
/// include the subject (or none).
pub(super) fn satisfying(
    rng: &mut Rng,
    req: &Requirements,
    subject: &SubjectRef,
) -> (RunnerProfile, Option<Vec<ServedTarget>>) {
    let mut kinds = subset(rng, &ExecutionKind::ALL);
    kinds.push(req.execution_kind);
    let mut runtimes: Vec<RuntimeId> = subset(rng, &RUNTIMES).iter().map(|r| rt(r)).collect();
    runtimes.push(req.runtime.clone());
    let mut limits = req.limits;
    for kind in LimitKind::ALL {
        *limits.slot(kind) += rng.below(3) * rng.below(10_000);
    }
    let network = match &req.network {
        Network::Allowlist(needed) => {
            let extra = subset(rng, &ORIGINS).into_iter().map(origin);
            Network::Allowlist(sorted(needed.iter().cloned().chain(extra)))
        }
        Network::DenyAll if rng.chance(1, 2) => Network::DenyAll,
        Network::DenyAll => Network::Allowlist(vec![origin(rng.pick::<&str>(&ORIGINS))]),
    };
    let mut problem_types: Vec<ProblemType> = subset(rng, &PROBLEM_TYPES)
        .iter()
        .map(|p| ProblemType::parse(p).unwrap())
        .collect();
    problem_types.extend(req.problem_type.clone());
    let job_tags = effective_tags(&req.tags);
    let shared = rng.pick(&job_tags).clone();
    let tags = if shared.as_str() == DEFAULT_TAG && rng.chance(1, 2) {
        Vec::new()
    } else {
        sorted(subset(rng, &TAGS).into_iter().map(tag).chain([shared]))
    };
    let capabilities = CapabilityDocument {
        execution_kinds: sorted(kinds),
        runtimes: sorted(runtimes),
        limits,
        network,
        streaming: req.streaming || rng.chance(1, 2),
        cancellation: req.cancellation || rng.chance(1, 2),
        max_concurrent_jobs: 1 + rng.below(1000) as u32,
        problem_types: sorted(problem_types),
        external: req.external,
    };
    let served = match rng.below(3) {
        0 => None,
        1 => Some(Vec::new()),
        _ => Some(vec![
            ServedTarget {
                version_id: subject.version_id + 1,
                content_hash: subject.content_hash.clone(),
            },
            ServedTarget {
                version_id: subject.version_id,
                content_hash: subject.content_hash.clone(),
            },
        ]),
    };
    (RunnerProfile::new(capabilities, tags), served)
}

pub(super) fn random_document(rng: &mut Rng) -> CapabilityDocument {
    let req = random_requirements(rng);
    let subject = random_subject(rng);
    satisfying(rng, &req, &subject).0.capabilities
}
