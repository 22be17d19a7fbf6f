//! Queues: which jobs wait for the same kind of runner, named the same way in every release.
//!
//! A job's queue is derived from the parts of its requirements that route it
//! ([`crate::capability::match_job`]): its execution kind, runtime, external flag, problem type
//! and tags (the job's tags as a set, an empty list read as `["default"]`). Its limits, network,
//! streaming and cancellation do not make another queue: a runner that serves the queue may
//! still refuse one job of it for those (the claim says why).
//!
//! - [`QueueKey::canonical`] is the queue's identity: the JSON array
//!   `[kind, runtime, external, problemType or null, [tags, sorted, deduplicated]]`.
//! - [`QueueKey::id`] names it where a short, safe name is needed (a Prometheus label, a URL):
//!   `q_` and the first 16 hex digits of SHA-256 over the canonical array's stable JSON
//!   ([`crate::stable_json`]). Both are pinned by this module's tests: changing either renames
//!   every queue an autoscaler selects by.
//! - [`QueueKey::name`] is for people: `prompt · python3.12 · local · default`.
//!
//! **Cardinality.** An organization has at most [`MAX_QUEUES`] queues. A job whose queue would
//! be one more is counted in the organization's overflow queue ([`OVERFLOW_ID`], named
//! [`OVERFLOW_NAME`]): its routing is unchanged, only its metrics share that label. So a
//! deployment's label values stay within `MAX_QUEUES + 1` per organization.
//!
//! **Suggested runners** ([`suggested_runners`]): enough job slots for every job that waits or
//! runs, in runners of the capacity that serve the queue now, within the operator's floor and
//! ceiling: `clamp(ceil((queued + running) / slots_per_runner), min, max)`.

use serde_json::{json, Value};

use crate::capability::{Requirements, Tag, DEFAULT_TAG};
use crate::stable_json;

/// The most queues an organization has; past it, jobs are counted in the overflow queue.
pub const MAX_QUEUES: usize = 100;
/// The overflow queue's id (not a hash: it never collides with one).
pub const OVERFLOW_ID: &str = "q_overflow";
/// The overflow queue's name.
pub const OVERFLOW_NAME: &str = "other queues (past the organization's 100)";

/// How many hex digits of the hash the id keeps (64 bits: no collision among an
/// organization's 100 queues short of 2^32 tries).
const ID_HEX_DIGITS: usize = 16;

/// A job's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKey {
    canonical: Value,
    id: String,
    name: String,
}

impl QueueKey {
    /// The queue of a job with these requirements.
    pub fn of(requirements: &Requirements) -> QueueKey {
        let mut tags: Vec<&str> = requirements.tags().iter().map(Tag::as_str).collect();
        if tags.is_empty() {
            tags.push(DEFAULT_TAG);
        }
        tags.sort_unstable();
        tags.dedup();
        let kind = requirements.execution_kind().as_str();
        let runtime = requirements.runtime().as_str();
        let external = requirements.external();
        let problem_type = requirements.problem_type().map(|p| p.as_str());
        let canonical = json!([kind, runtime, external, problem_type, tags]);
        let digest = stable_json::hash(&canonical);
        let id = format!("q_{}", &digest.as_str()[..ID_HEX_DIGITS]);
        let mut parts = vec![
            kind.to_owned(),
            runtime.to_owned(),
            if external { "external" } else { "local" }.to_owned(),
        ];
        if let Some(problem_type) = problem_type {
            parts.push(problem_type.to_owned());
        }
        parts.push(tags.join(", "));
        QueueKey {
            canonical,
            id,
            name: parts.join(" · "),
        }
    }

    /// The canonical array (see the module's documentation).
    pub fn canonical(&self) -> &Value {
        &self.canonical
    }

    /// `q_` and 16 hex digits.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// For people.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The queue a job is counted in, given how many queues its organization has and whether its
/// own is one of them: its own, unless that would be one past [`MAX_QUEUES`].
pub fn counted_in(own: &QueueKey, known: bool, queues: usize) -> (&str, &str) {
    if known || queues < MAX_QUEUES {
        (own.id(), own.name())
    } else {
        (OVERFLOW_ID, OVERFLOW_NAME)
    }
}

/// How many runners a queue wants (see the module's documentation): `slots_per_runner` is the
/// jobs one runner that serves the queue takes at once (its `maxConcurrentJobs`; at least 1),
/// `min` and `max` the operator's floor and ceiling (a ceiling below the floor is the floor).
pub fn suggested_runners(
    queued: u64,
    running: u64,
    slots_per_runner: u64,
    min: u64,
    max: u64,
) -> u64 {
    let slots = slots_per_runner.max(1);
    let wanted = queued.saturating_add(running).div_ceil(slots);
    wanted.clamp(min, max.max(min))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirements(extra: Value) -> Requirements {
        let mut value = json!({
            "executionKind": "prompt",
            "runtime": "python3.12",
            "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1_048_576},
        });
        for (k, v) in extra.as_object().expect("object") {
            value[k] = v.clone();
        }
        Requirements::parse(&value).expect("valid requirements")
    }

    #[test]
    fn the_id_and_the_canonical_form_are_pinned() {
        // Renaming a queue breaks every autoscaler that selects it: these may not change.
        let plain = QueueKey::of(&requirements(json!({})));
        assert_eq!(
            plain.canonical(),
            &json!(["prompt", "python3.12", false, null, ["default"]])
        );
        assert_eq!(
            stable_json::stable_json(plain.canonical()),
            r#"["prompt","python3.12",false,null,["default"]]"#
        );
        let expected =
            stable_json::sha256_hex(br#"["prompt","python3.12",false,null,["default"]]"#);
        assert_eq!(plain.id(), format!("q_{}", &expected.as_str()[..16]));
        assert_eq!(plain.name(), "prompt · python3.12 · local · default");

        let full = QueueKey::of(&requirements(json!({
            "external": true, "problemType": "code/python", "tags": ["gpu", "eu"],
        })));
        assert_eq!(
            full.canonical(),
            &json!(["prompt", "python3.12", true, "code/python", ["eu", "gpu"]])
        );
        assert_eq!(
            full.name(),
            "prompt · python3.12 · external · code/python · eu, gpu"
        );
        assert!(
            full.id().starts_with("q_") && full.id().len() == 18,
            "{}",
            full.id()
        );
    }

    #[test]
    fn what_does_not_route_a_job_does_not_make_another_queue() {
        let base = QueueKey::of(&requirements(json!({"tags": ["gpu", "eu"]})));
        let same = [
            json!({"tags": ["eu", "gpu"]}),
            json!({"tags": ["gpu", "eu"], "streaming": true, "cancellation": true}),
            json!({"tags": ["gpu", "eu"], "limits": {"cpuSeconds": 1, "memoryMb": 1, "wallSeconds": 1, "outputBytes": 1}}),
            json!({"tags": ["gpu", "eu"], "network": {"mode": "allowlist", "origins": ["https://api.example.com"]}}),
        ];
        for extra in same {
            assert_eq!(QueueKey::of(&requirements(extra.clone())), base, "{extra}");
        }
        // No tags reads as the default tag, as routing reads it.
        assert_eq!(
            QueueKey::of(&requirements(json!({}))),
            QueueKey::of(&requirements(json!({"tags": ["default"]})))
        );
    }

    #[test]
    fn each_routing_part_makes_its_own_queue() {
        let base = QueueKey::of(&requirements(json!({})));
        let others = [
            json!({"executionKind": "scorer"}),
            json!({"runtime": "node22"}),
            json!({"external": true}),
            json!({"problemType": "sql"}),
            json!({"tags": ["gpu"]}),
            json!({"tags": ["default", "gpu"]}),
        ];
        let mut ids = vec![base.id().to_owned()];
        for extra in others {
            let other = QueueKey::of(&requirements(extra.clone()));
            assert!(
                !ids.contains(&other.id().to_owned()),
                "{extra} shares an id"
            );
            ids.push(other.id().to_owned());
        }
    }

    #[test]
    fn the_longest_queue_a_job_can_ask_for_fits_the_schemas_bounds() {
        // 32 tags of 64 characters (4 bytes each), a 128-character problem type, a 100-byte
        // runtime: migration 0016 allows a name of 3,000 characters.
        let tags: Vec<String> = (0..32)
            .map(|n| format!("{n:02}{}", "\u{1F600}".repeat(62)))
            .collect();
        let longest = QueueKey::of(&requirements(json!({
            "runtime": format!("r{}", "9".repeat(99)),
            "problemType": "\u{1F600}".repeat(128),
            "tags": tags,
            "external": true,
        })));
        let chars = longest.name().chars().count();
        assert!(chars <= 3000, "{chars} characters");
        assert!(chars > 2000, "the case is the longest: {chars}");
    }

    #[test]
    fn past_the_bound_a_new_queue_is_counted_in_the_overflow_queue() {
        let own = QueueKey::of(&requirements(json!({"tags": ["gpu"]})));
        assert_eq!(
            counted_in(&own, false, MAX_QUEUES - 1),
            (own.id(), own.name())
        );
        assert_eq!(
            counted_in(&own, false, MAX_QUEUES),
            (OVERFLOW_ID, OVERFLOW_NAME)
        );
        // A queue the organization already has keeps its name past the bound.
        assert_eq!(
            counted_in(&own, true, MAX_QUEUES + 5),
            (own.id(), own.name())
        );
        // Never an id a hash could give: 16 hex digits after `q_`.
        assert!(!OVERFLOW_ID[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn suggested_runners_cover_every_job_slot_within_the_floor_and_ceiling() {
        assert_eq!(suggested_runners(0, 0, 4, 0, 10), 0, "scales to zero");
        assert_eq!(suggested_runners(0, 0, 4, 2, 10), 2, "the floor holds");
        assert_eq!(suggested_runners(5, 0, 4, 0, 10), 2, "ceil(5 / 4)");
        assert_eq!(
            suggested_runners(3, 5, 4, 0, 10),
            2,
            "waiting and running alike"
        );
        assert_eq!(suggested_runners(100, 0, 1, 0, 10), 10, "the ceiling holds");
        assert_eq!(
            suggested_runners(1, 0, 0, 0, 10),
            1,
            "a runner takes one job at least"
        );
        assert_eq!(
            suggested_runners(9, 0, 1, 5, 3),
            5,
            "a ceiling below the floor is the floor"
        );
        assert_eq!(
            suggested_runners(u64::MAX, u64::MAX, 1, 0, u64::MAX),
            u64::MAX
        );
    }
}
