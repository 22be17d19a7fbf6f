//! The two documents routing compares: what a runner declares ([`CapabilityDocument`], with
//! the tags an operator gives it: [`RunnerProfile`]) and what a job states ([`Requirements`]);
//! and the tag and served-target lists beside them.

use serde_json::{json, Value};

use super::parse::{parse_set, unknown_kind, CapabilityError, Doc, Obj, Problem};
use super::values::{
    ExecutionKind, IndexFilter, IndexKey, Limits, Network, ProblemType, RuntimeId, Tag,
};
use super::{
    MAX_CONCURRENT_JOBS, MAX_PROBLEM_TYPES, MAX_RUNTIMES, MAX_SERVED_TARGETS, MAX_TAGS,
    PROTOCOL_VERSION,
};
use crate::stable_json::{self, Sha256Hex};

const CAPABILITY_FIELDS: &[&str] = &[
    "protocolVersion",
    "executionKinds",
    "runtimes",
    "limits",
    "network",
    "streaming",
    "cancellation",
    "maxConcurrentJobs",
    "problemTypes",
    "external",
];
const REQUIREMENT_FIELDS: &[&str] = &[
    "executionKind",
    "runtime",
    "limits",
    "network",
    "streaming",
    "cancellation",
    "problemType",
    "external",
    "tags",
];
const SERVED_TARGET_FIELDS: &[&str] = &["versionId", "contentHash"];
/// What a runner declares it can do. Built only by [`CapabilityDocument::parse`], so every
/// instance is valid and canonical; [`CapabilityDocument::to_value`] is the document the server
/// stores next to its hash `H(document)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityDocument {
    pub(super) execution_kinds: Vec<ExecutionKind>,
    pub(super) runtimes: Vec<RuntimeId>,
    pub(super) limits: Limits,
    pub(super) network: Network,
    pub(super) streaming: bool,
    pub(super) cancellation: bool,
    pub(super) max_concurrent_jobs: u32,
    pub(super) problem_types: Vec<ProblemType>,
    pub(super) external: bool,
}

impl CapabilityDocument {
    pub fn parse(value: &Value) -> Result<CapabilityDocument, CapabilityError> {
        let doc = Doc::Capabilities;
        if value.get("tags").is_some() {
            return Err(doc.error(
                "tags",
                Problem::Invalid(
                    "tags are set by an operator, never declared by the runner".into(),
                ),
            ));
        }
        let obj = Obj::open(doc, "", value, CAPABILITY_FIELDS)?;

        if let Some(v) = obj.get("protocolVersion") {
            if v.as_str() != Some(PROTOCOL_VERSION) {
                return Err(obj.err(
                    "protocolVersion",
                    Problem::Invalid(format!("must be the string {PROTOCOL_VERSION:?}")),
                ));
            }
        }
        let execution_kinds =
            obj.required_set("executionKinds", ExecutionKind::ALL.len(), |s| {
                ExecutionKind::parse(s).ok_or_else(|| unknown_kind(s))
            })?;
        let runtimes = obj.required_set("runtimes", MAX_RUNTIMES, RuntimeId::parse)?;
        let limits = match obj.get("limits") {
            Some(v) => Limits::parse(doc, "limits", v, Some(Limits::REGISTRATION_DEFAULT))?,
            None => Limits::REGISTRATION_DEFAULT,
        };
        let network = match obj.get("network") {
            Some(v) => Network::parse(doc, "network", v)?,
            None => Network::DenyAll,
        };
        let max_concurrent_jobs = match obj.get("maxConcurrentJobs") {
            Some(v) => obj.integer("maxConcurrentJobs", v, 1, u64::from(MAX_CONCURRENT_JOBS))?,
            None => 1,
        };
        Ok(CapabilityDocument {
            execution_kinds,
            runtimes,
            limits,
            network,
            streaming: obj.boolean("streaming", true)?,
            cancellation: obj.boolean("cancellation", true)?,
            // In range by the check above.
            max_concurrent_jobs: u32::try_from(max_concurrent_jobs).unwrap_or(1),
            problem_types: obj.set("problemTypes", MAX_PROBLEM_TYPES, ProblemType::parse)?,
            external: obj.boolean("external", false)?,
        })
    }

    /// The canonical document: every field present, every default materialized, every list
    /// sorted. See [`CapabilityDocument::hash`].
    pub fn to_value(&self) -> Value {
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "executionKinds": self.execution_kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "runtimes": self.runtimes.iter().map(RuntimeId::as_str).collect::<Vec<_>>(),
            "limits": self.limits.to_value(),
            "network": self.network.to_value(),
            "streaming": self.streaming,
            "cancellation": self.cancellation,
            "maxConcurrentJobs": self.max_concurrent_jobs,
            "problemTypes": self.problem_types.iter().map(ProblemType::as_str).collect::<Vec<_>>(),
            "external": self.external,
        })
    }

    /// `H(document)`, the capability hash the server stores beside the document.
    pub fn hash(&self) -> Sha256Hex {
        stable_json::hash(&self.to_value())
    }

    pub fn execution_kinds(&self) -> &[ExecutionKind] {
        &self.execution_kinds
    }

    pub fn runtimes(&self) -> &[RuntimeId] {
        &self.runtimes
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn network(&self) -> &Network {
        &self.network
    }

    pub fn streaming(&self) -> bool {
        self.streaming
    }

    pub fn cancellation(&self) -> bool {
        self.cancellation
    }

    /// The runner object enforces this; matching does not look at it.
    pub fn max_concurrent_jobs(&self) -> u32 {
        self.max_concurrent_jobs
    }

    pub fn problem_types(&self) -> &[ProblemType] {
        &self.problem_types
    }

    pub fn external(&self) -> bool {
        self.external
    }
}

/// What a job needs from the runner that takes it (`requirements` of an enqueue). Built only by
/// [`Requirements::parse`]; [`Requirements::to_value`] is the canonical form that goes into the
/// signed envelope and the idempotency comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirements {
    pub(super) execution_kind: ExecutionKind,
    pub(super) runtime: RuntimeId,
    pub(super) limits: Limits,
    pub(super) network: Network,
    pub(super) streaming: bool,
    pub(super) cancellation: bool,
    pub(super) problem_type: Option<ProblemType>,
    pub(super) external: bool,
    pub(super) tags: Vec<Tag>,
}

impl Requirements {
    pub fn parse(value: &Value) -> Result<Requirements, CapabilityError> {
        let doc = Doc::Requirements;
        if value.is_null() {
            return Err(doc.error("", Problem::Missing));
        }
        let obj = Obj::open(doc, "", value, REQUIREMENT_FIELDS)?;
        let execution_kind = obj.string("executionKind", |s| {
            ExecutionKind::parse(s).ok_or_else(|| unknown_kind(s))
        })?;
        let runtime = obj.string("runtime", RuntimeId::parse)?;
        let limits = Limits::parse(doc, "limits", obj.required("limits")?, None)?;
        let network = match obj.get("network") {
            Some(v) => Network::parse(doc, "network", v)?,
            None => Network::DenyAll,
        };
        let problem_type = match obj.get("problemType") {
            Some(_) => Some(obj.string("problemType", ProblemType::parse)?),
            None => None,
        };
        Ok(Requirements {
            execution_kind,
            runtime,
            limits,
            network,
            streaming: obj.boolean("streaming", false)?,
            cancellation: obj.boolean("cancellation", false)?,
            problem_type,
            external: obj.boolean("external", false)?,
            tags: obj.set("tags", MAX_TAGS, Tag::parse)?,
        })
    }

    /// Every field present (`problemType` as `null` when none), lists sorted.
    pub fn to_value(&self) -> Value {
        json!({
            "executionKind": self.execution_kind.as_str(),
            "runtime": self.runtime.as_str(),
            "limits": self.limits.to_value(),
            "network": self.network.to_value(),
            "streaming": self.streaming,
            "cancellation": self.cancellation,
            "problemType": self.problem_type.as_ref().map(ProblemType::as_str),
            "external": self.external,
            "tags": self.tags.iter().map(Tag::as_str).collect::<Vec<_>>(),
        })
    }

    /// The columns a queue index can hold; see [`IndexFilter`].
    pub fn index_key(&self) -> IndexKey {
        IndexKey {
            execution_kind: self.execution_kind,
            runtime: self.runtime.clone(),
            external: self.external,
            problem_type: self.problem_type.clone(),
        }
    }

    pub fn execution_kind(&self) -> ExecutionKind {
        self.execution_kind
    }

    pub fn runtime(&self) -> &RuntimeId {
        &self.runtime
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn network(&self) -> &Network {
        &self.network
    }

    pub fn streaming(&self) -> bool {
        self.streaming
    }

    pub fn cancellation(&self) -> bool {
        self.cancellation
    }

    pub fn problem_type(&self) -> Option<&ProblemType> {
        self.problem_type.as_ref()
    }

    pub fn external(&self) -> bool {
        self.external
    }

    /// As stated; routing reads an empty list as `["default"]`.
    pub fn tags(&self) -> &[Tag] {
        &self.tags
    }
}

/// Everything routing knows about a runner: what it declared, and the tags an operator gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerProfile {
    pub capabilities: CapabilityDocument,
    /// Operator-set; an empty list reads as `["default"]`.
    pub tags: Vec<Tag>,
}

impl RunnerProfile {
    pub fn new(capabilities: CapabilityDocument, tags: Vec<Tag>) -> RunnerProfile {
        RunnerProfile { capabilities, tags }
    }

    /// The index filter for this runner's candidate query.
    pub fn index_filter(&self) -> IndexFilter {
        let caps = &self.capabilities;
        IndexFilter {
            execution_kinds: caps.execution_kinds.clone(),
            runtimes: caps.runtimes.clone(),
            external: caps.external,
            problem_types: caps.problem_types.clone(),
        }
    }
}

/// An operator's tag list (`PATCH`/registration of a runner): a set of at most 32 tags.
pub fn parse_tags(value: &Value) -> Result<Vec<Tag>, CapabilityError> {
    let doc = Doc::Tags;
    let items = value
        .as_array()
        .ok_or_else(|| doc.error("", Problem::WrongType("an array of strings")))?;
    parse_set(doc, "", items, MAX_TAGS, Tag::parse)
}

/// The job subject's exact identity, as the server bound it at enqueue.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubjectRef {
    pub version_id: i64,
    pub content_hash: String,
}

/// A release version a runner says it serves (`servedTargets` of a claim).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServedTarget {
    pub version_id: i64,
    pub content_hash: String,
}

/// The claim body's `servedTargets` array. Each entry is `{versionId, contentHash}` with a
/// positive integer id and a lowercase hex SHA-256; duplicates are harmless and kept.
pub fn parse_served_targets(value: &Value) -> Result<Vec<ServedTarget>, CapabilityError> {
    let doc = Doc::ServedTargets;
    let items = value.as_array().ok_or_else(|| {
        doc.error(
            "",
            Problem::WrongType("an array of {versionId, contentHash}"),
        )
    })?;
    if items.len() > MAX_SERVED_TARGETS {
        return Err(doc.error("", Problem::TooMany(MAX_SERVED_TARGETS)));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj = Obj::open(doc, &format!("[{i}]"), item, SERVED_TARGET_FIELDS)?;
            let id = obj.required("versionId")?;
            let version_id = id
                .as_i64()
                .filter(|id| *id > 0)
                .ok_or_else(|| obj.err("versionId", Problem::WrongType("a positive integer")))?;
            let content_hash = obj.string("contentHash", |s| {
                Sha256Hex::parse(s)
                    .map(|hash| hash.as_str().to_owned())
                    .map_err(|_| "must be a lowercase hex SHA-256 (64 characters)".to_owned())
            })?;
            Ok(ServedTarget {
                version_id,
                content_hash,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::capability::fixtures::*;
    use crate::capability::values::{LimitKind, LIMIT_FIELDS};
    use crate::capability::MAX_LIMIT;
    use crate::testkit::{assert_refusal, check, Rng};

    #[test]
    fn omitted_capability_fields_take_the_registration_defaults() {
        let doc = caps(json!({"executionKinds": ["prompt"], "runtimes": ["python3.12"]}));
        assert_eq!(
            doc.to_value(),
            json!({
                "protocolVersion": "1",
                "executionKinds": ["prompt"],
                "runtimes": ["python3.12"],
                "limits": {
                    "cpuSeconds": 3600,
                    "memoryMb": 65536,
                    "wallSeconds": 86400,
                    "outputBytes": 104857600
                },
                "network": {"mode": "deny_all"},
                "streaming": true,
                "cancellation": true,
                "maxConcurrentJobs": 1,
                "problemTypes": [],
                "external": false
            })
        );
    }

    #[test]
    fn null_fields_count_as_omitted() {
        let doc = caps(json!({
            "executionKinds": ["prompt"], "runtimes": ["nodejs20"],
            "network": null, "streaming": null, "limits": {"cpuSeconds": null},
        }));
        assert_eq!(doc.network(), &Network::DenyAll);
        assert!(doc.streaming());
        assert_eq!(doc.limits(), &Limits::REGISTRATION_DEFAULT);
    }

    #[test]
    fn narrower_limits_are_kept_and_others_defaulted() {
        let doc = caps(raw(
            r#"{"executionKinds":["tool"],"runtimes":["nodejs20"],"limits":{"memoryMb":2048}}"#,
        ));
        assert_eq!(doc.limits().memory_mb(), 2048);
        assert_eq!(doc.limits().cpu_seconds(), 3600);
    }

    #[test]
    fn execution_kinds_and_runtimes_are_required_and_non_empty() {
        assert_eq!(
            caps_err(json!({"runtimes": ["python3.12"]})),
            "capabilities.executionKinds is required"
        );
        assert_eq!(
            caps_err(json!({"executionKinds": [], "runtimes": ["python3.12"]})),
            "capabilities.executionKinds must not be empty"
        );
        assert_eq!(
            caps_err(json!({"executionKinds": ["agent"], "runtimes": []})),
            "capabilities.runtimes must not be empty"
        );
        assert!(
            caps_err(json!({"executionKinds": ["judge"], "runtimes": ["x"]}))
                .contains("capabilities.executionKinds[0]: \"judge\" is not an execution kind")
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let base = json!({"executionKinds": ["agent"], "runtimes": ["python3.12"]});
        let mut top = base.clone();
        top["gpu"] = json!(true);
        let message = caps_err(top);
        assert!(
            message.starts_with(
                "capabilities.gpu is not a known field; expected one of protocolVersion"
            ),
            "{message}"
        );

        let mut nested = base.clone();
        nested["limits"] = json!({"cpuSeconds": 10, "gpuHours": 1});
        assert!(caps_err(nested).starts_with("capabilities.limits.gpuHours is not a known field"));

        let mut network = base.clone();
        network["network"] = json!({"mode": "deny_all", "proxy": "x"});
        assert!(caps_err(network).starts_with("capabilities.network.proxy is not a known field"));

        let mut req = minimal_requirements();
        req["priority"] = json!(1);
        assert!(req_err(req).starts_with("requirements.priority is not a known field"));
    }

    #[test]
    fn runners_cannot_declare_their_own_tags() {
        let message =
            caps_err(json!({"executionKinds": ["agent"], "runtimes": ["x"], "tags": ["gpu"]}));
        assert_eq!(
            message,
            "capabilities.tags: tags are set by an operator, never declared by the runner"
        );
    }

    #[test]
    fn protocol_version_must_be_the_string_one() {
        let base = json!({"executionKinds": ["agent"], "runtimes": ["x"]});
        for bad in [json!("2"), json!(1), json!("1.0")] {
            let mut doc = base.clone();
            doc["protocolVersion"] = bad;
            assert_eq!(
                caps_err(doc),
                "capabilities.protocolVersion: must be the string \"1\""
            );
        }
        let mut doc = base;
        doc["protocolVersion"] = json!("1");
        caps(doc);
    }

    #[test]
    fn limits_must_be_integers_as_written_within_range() {
        for bad in [
            "1.0",
            "1e3",
            "-1",
            "0",
            "9007199254740992",
            "18446744073709551616",
            "\"60\"",
            "true",
        ] {
            let text = format!(
                r#"{{"executionKinds":["agent"],"runtimes":["x"],"limits":{{"cpuSeconds":{bad}}}}}"#
            );
            assert_eq!(
                caps_err(raw(&text)),
                "capabilities.limits.cpuSeconds must be an integer from 1 to 9007199254740991",
                "{bad}"
            );
        }
        let doc = caps(raw(
            r#"{"executionKinds":["agent"],"runtimes":["x"],"limits":{"outputBytes":9007199254740991}}"#,
        ));
        assert_eq!(doc.limits().output_bytes(), MAX_LIMIT);
    }

    #[test]
    fn max_concurrent_jobs_is_bounded() {
        for bad in [json!(0), json!(1001), json!(2.5), json!("3")] {
            assert_eq!(
                caps_err(
                    json!({"executionKinds": ["agent"], "runtimes": ["x"], "maxConcurrentJobs": bad})
                ),
                "capabilities.maxConcurrentJobs must be an integer from 1 to 1000"
            );
        }
        let doc = caps(
            json!({"executionKinds": ["agent"], "runtimes": ["x"], "maxConcurrentJobs": 1000}),
        );
        assert_eq!(doc.max_concurrent_jobs(), 1000);
    }

    #[test]
    fn lists_are_sets_sorted_canonically() {
        let doc = caps(json!({
            "executionKinds": ["agent", "prompt", "tool"],
            "runtimes": ["python3.12", "nodejs20"],
            "problemTypes": ["sql", "code/python"],
        }));
        let v = doc.to_value();
        assert_eq!(v["executionKinds"], json!(["prompt", "tool", "agent"]));
        assert_eq!(v["runtimes"], json!(["nodejs20", "python3.12"]));
        assert_eq!(v["problemTypes"], json!(["code/python", "sql"]));

        assert_eq!(
            caps_err(json!({"executionKinds": ["agent", "agent"], "runtimes": ["x"]})),
            "capabilities.executionKinds lists \"agent\" more than once"
        );
        assert!(
            caps_err(json!({"executionKinds": ["agent"], "runtimes": ["x", "x"]}))
                .contains("more than once")
        );
    }

    #[test]
    fn wrong_types_are_named() {
        assert_eq!(caps_err(json!([])), "capabilities must be an object");
        assert_eq!(
            caps_err(json!({"executionKinds": "agent", "runtimes": ["x"]})),
            "capabilities.executionKinds must be an array of strings"
        );
        assert_eq!(
            caps_err(json!({"executionKinds": ["agent"], "runtimes": [3]})),
            "capabilities.runtimes[0] must be a string"
        );
        assert_eq!(
            caps_err(json!({"executionKinds": ["agent"], "runtimes": ["x"], "streaming": "yes"})),
            "capabilities.streaming must be a boolean"
        );
    }

    #[test]
    fn omitted_requirement_fields_require_nothing_extra() {
        let req = Requirements::parse(&minimal_requirements()).unwrap();
        assert_eq!(
            req.to_value(),
            json!({
                "executionKind": "scorer",
                "runtime": "python3.12",
                "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1024},
                "network": {"mode": "deny_all"},
                "streaming": false,
                "cancellation": false,
                "problemType": null,
                "external": false,
                "tags": []
            })
        );
        assert_eq!(Requirements::parse(&req.to_value()), Ok(req));
    }

    #[test]
    fn a_job_states_all_four_limits() {
        for missing in LIMIT_FIELDS {
            let mut req = minimal_requirements();
            req["limits"].as_object_mut().unwrap().remove(*missing);
            assert_eq!(
                req_err(req),
                format!(
                    "requirements.limits.{missing} is required: an integer from 1 to \
                     9007199254740991; limits is {{\"cpuSeconds\": n, \"memoryMb\": n, \
                     \"wallSeconds\": n, \"outputBytes\": n}}"
                )
            );
        }
        let mut req = minimal_requirements();
        req.as_object_mut().unwrap().remove("limits");
        assert_eq!(
            req_err(req),
            "requirements.limits is required: {\"cpuSeconds\": n, \"memoryMb\": n, \
             \"wallSeconds\": n, \"outputBytes\": n} (each n an integer from 1 to 9007199254740991)"
        );
        let mut req = minimal_requirements();
        req["limits"] = json!(60);
        assert!(req_err(req).starts_with(
            "requirements.limits must be an object: {\"cpuSeconds\": n, \"memoryMb\": n,"
        ));
    }

    #[test]
    fn missing_requirements_name_the_whole_shape_with_the_parsers_field_names() {
        let message = req_err(Value::Null);
        assert!(
            message.starts_with("requirements is required: {\"executionKind\": "),
            "{message}"
        );
        for field in REQUIREMENT_FIELDS.iter().chain(LIMIT_FIELDS) {
            assert!(
                message.contains(&format!("\"{field}\"")),
                "{field} is not in {message}"
            );
        }
        assert!(req_err(json!([])).starts_with("requirements must be an object: {"));
        // The shape shown parses once its placeholders are filled in.
        let filled = json!({
            "executionKind": "prompt",
            "runtime": "python3.12",
            "limits": {"cpuSeconds": 1, "memoryMb": 1, "wallSeconds": 1, "outputBytes": 1},
        });
        assert!(Requirements::parse(&filled).is_ok());
        let mut req = minimal_requirements();
        req["network"] = json!({"mode": 1});
        assert!(req_err(req)
            .ends_with("{\"mode\": \"allowlist\", \"origins\": [\"https://host[:port]\", …]}"));
    }

    #[test]
    fn requirement_fields_parse_with_clear_errors() {
        let mut req = minimal_requirements();
        req.as_object_mut().unwrap().remove("runtime");
        assert_eq!(
            req_err(req),
            "requirements.runtime is required: a runtime id such as \"python3.12\" \
             (lowercase letters, digits and . _ + - : @ /)"
        );

        let mut req = minimal_requirements();
        req["executionKind"] = json!(["scorer"]);
        assert_eq!(
            req_err(req),
            "requirements.executionKind must be a string: one of \"prompt\", \"scorer\", \
             \"tool\", \"workflow\", \"agent\""
        );

        let mut req = minimal_requirements();
        req["problemType"] = json!("");
        assert_eq!(
            req_err(req),
            "requirements.problemType: a problem type must not be empty"
        );

        let mut req = minimal_requirements();
        req["tags"] = json!(["gpu", " gpu"]);
        assert!(req_err(req).starts_with("requirements.tags[1]: tag \" gpu\" has leading"));

        let mut req = minimal_requirements();
        req["external"] = json!(1);
        assert_eq!(req_err(req), "requirements.external must be a boolean");

        let full = json!({
            "executionKind": "agent",
            "runtime": "nodejs20",
            "limits": {"cpuSeconds": 1, "memoryMb": 1, "wallSeconds": 1, "outputBytes": 1},
            "network": {"mode": "allowlist", "origins": ["https://api.openai.com"]},
            "streaming": true,
            "cancellation": true,
            "problemType": "code/python",
            "external": true,
            "tags": ["gpu"],
        });
        let req = Requirements::parse(&full).unwrap();
        assert_eq!(req.to_value(), full);
        assert_eq!(
            req.problem_type().map(ProblemType::as_str),
            Some("code/python")
        );
    }

    #[test]
    fn tags_and_served_targets_parse() {
        assert_eq!(
            parse_tags(&json!(["slow", "gpu"])).unwrap(),
            [Tag::parse("gpu").unwrap(), Tag::parse("slow").unwrap()]
        );
        let err = parse_tags(&json!(["gpu", "gpu"])).unwrap_err();
        assert_eq!(err.code(), "INVALID_TAGS");
        assert_eq!(err.to_string(), "tags lists \"gpu\" more than once");

        let hash = "ab".repeat(32);
        let targets =
            parse_served_targets(&json!([{"versionId": 7, "contentHash": hash}])).unwrap();
        assert_eq!(
            targets,
            [ServedTarget {
                version_id: 7,
                content_hash: hash.clone()
            }]
        );
        for (bad, message) in [
            (
                json!({}),
                "servedTargets must be an array of {versionId, contentHash}",
            ),
            (
                json!([{"versionId": 0, "contentHash": hash}]),
                "servedTargets[0].versionId must be a positive integer",
            ),
            (
                json!([{"versionId": "7", "contentHash": hash}]),
                "servedTargets[0].versionId must be a positive integer",
            ),
            (
                json!([{"versionId": 7, "contentHash": "AB".repeat(32)}]),
                "servedTargets[0].contentHash: must be a lowercase hex SHA-256 (64 characters)",
            ),
            (
                json!([{"versionId": 7}]),
                "servedTargets[0].contentHash is required",
            ),
            (
                json!([{"versionId": 7, "contentHash": hash, "env": "prod"}]),
                "servedTargets[0].env is not a known field; expected one of versionId, contentHash",
            ),
        ] {
            let err = parse_served_targets(&bad).unwrap_err();
            assert_eq!(err.code(), "INVALID_SERVED_TARGETS");
            assert_eq!(err.to_string(), message);
        }
    }

    #[test]
    fn canonical_documents_round_trip() {
        check(300, |rng| {
            let doc = random_document(rng);
            let value = doc.to_value();
            let again = CapabilityDocument::parse(&value).unwrap();
            assert_eq!(again, doc);
            assert_eq!(again.to_value(), value);

            let req = random_requirements(rng);
            assert_eq!(Requirements::parse(&req.to_value()), Ok(req));
        });
    }

    #[test]
    fn canonical_forms_hold_only_numbers_every_sdk_reprints_alike() {
        // Both documents travel in signed envelopes that Python and JavaScript re-hash.
        check(200, |rng| {
            let mut doc = random_document(rng);
            let mut req = random_requirements(rng);
            if rng.chance(1, 2) {
                *doc.limits.slot(*rng.pick(&LimitKind::ALL)) = MAX_LIMIT;
                *req.limits.slot(*rng.pick(&LimitKind::ALL)) = MAX_LIMIT;
            }
            assert_eq!(
                stable_json::first_non_portable_number(&doc.to_value()),
                None
            );
            assert_eq!(
                stable_json::first_non_portable_number(&req.to_value()),
                None
            );
        });
    }

    #[test]
    fn capability_hash_is_h_of_the_canonical_document() {
        let doc = caps(json!({"executionKinds": ["prompt"], "runtimes": ["python3.12"]}));
        assert_eq!(doc.hash(), stable_json::hash(&doc.to_value()));
        let explicit = caps(doc.to_value());
        assert_eq!(explicit.hash(), doc.hash());
        let narrower = caps(
            json!({"executionKinds": ["prompt"], "runtimes": ["python3.12"],
            "limits": {"cpuSeconds": 60}}),
        );
        assert_ne!(narrower.hash(), doc.hash());
    }

    #[test]
    fn canonical_form_ignores_list_order() {
        check(200, |rng| {
            let doc = random_document(rng);
            let mut value = doc.to_value();
            for key in ["executionKinds", "runtimes", "problemTypes"] {
                if let Some(items) = value[key].as_array_mut() {
                    items.reverse();
                    let half = items.len() / 2;
                    if rng.chance(1, 2) {
                        items.rotate_left(half);
                    }
                }
            }
            let reordered = CapabilityDocument::parse(&value).unwrap();
            assert_eq!(reordered.to_value(), doc.to_value());
            assert_eq!(reordered.hash(), doc.hash());
        });
    }

    /// One of the four parsers, what it read printed back as JSON, and its error.
    type Parser = fn(&Value) -> Result<Value, CapabilityError>;

    const PARSERS: [(&str, Parser); 4] = [
        ("capabilities", |v| {
            CapabilityDocument::parse(v).map(|d| d.to_value())
        }),
        ("requirements", |v| {
            Requirements::parse(v).map(|r| r.to_value())
        }),
        ("tags", |v| {
            parse_tags(v).map(|tags| tags.iter().map(Tag::as_str).collect::<Vec<_>>().into())
        }),
        ("servedTargets", |v| {
            parse_served_targets(v).map(|targets| {
                targets
                    .iter()
                    .map(|t| json!({"versionId": t.version_id, "contentHash": t.content_hash}))
                    .collect::<Vec<_>>()
                    .into()
            })
        }),
    ];

    /// A valid input of each parser, in canonical form or as a client might write it.
    fn valid_input(rng: &mut Rng, parser: &str) -> Value {
        match parser {
            "capabilities" if rng.chance(1, 2) => random_document(rng).to_value(),
            "capabilities" => json!({"executionKinds": ["tool", "prompt"],
                "runtimes": ["python3.12"], "network": "deny_all", "limits": {"cpuSeconds": 60},
                "maxConcurrentJobs": 4, "problemTypes": null}),
            "requirements" if rng.chance(1, 2) => random_requirements(rng).to_value(),
            "requirements" => json!({"executionKind": "agent", "runtime": "node22",
                "limits": {"cpuSeconds": 1, "memoryMb": 2, "wallSeconds": 3, "outputBytes": 4},
                "network": {"mode": "allowlist", "origins": ["HTTPS://Example.com:443"]},
                "tags": ["gpu", "eu"], "problemType": null}),
            "tags" => json!(["gpu", "default", "eu-west"]),
            _ => json!([{"versionId": 7, "contentHash": "a".repeat(64)},
                {"versionId": 9007199254740993u64, "contentHash": "b".repeat(64)}]),
        }
    }

    #[test]
    fn arbitrary_documents_read_to_fixed_points_or_are_typed_refusals() {
        let mut accepted = [0; PARSERS.len()];
        check(300, |rng| {
            let index = rng.below(PARSERS.len() as u64) as usize;
            let (name, parse) = PARSERS[index];
            let value = if rng.chance(1, 4) {
                rng.json(3)
            } else {
                let valid = valid_input(rng, name);
                rng.mutate(&valid)
            };
            match parse(&value) {
                Ok(printed) => {
                    accepted[index] += 1;
                    // What was read prints to a form that reads back to itself.
                    assert_eq!(parse(&printed).as_ref(), Ok(&printed), "{name}: {value}");
                    // Both travel in signed envelopes that every SDK re-hashes.
                    if matches!(name, "capabilities" | "requirements") {
                        assert_eq!(
                            stable_json::first_non_portable_number(&printed),
                            None,
                            "{name}: {printed}"
                        );
                    }
                }
                Err(error) => {
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert_eq!(error.http_status(), 422);
                    let expected = match name {
                        "capabilities" => "INVALID_CAPABILITIES",
                        "requirements" => "INVALID_REQUIREMENTS",
                        "tags" => "INVALID_TAGS",
                        _ => "INVALID_SERVED_TARGETS",
                    };
                    assert_eq!(error.code(), expected, "{error}");
                }
            }
        });
        assert!(
            accepted.iter().all(|n| *n > 0),
            "accepted per parser: {accepted:?}"
        );
    }

    #[test]
    fn parsed_documents_hash_as_their_canonical_form() {
        check(200, |rng| {
            let valid = valid_input(rng, "capabilities");
            let value = rng.mutate(&valid);
            if let Ok(doc) = CapabilityDocument::parse(&value) {
                let canonical = doc.to_value();
                assert_eq!(doc.hash(), stable_json::hash(&canonical));
                assert_eq!(CapabilityDocument::parse(&canonical).as_ref(), Ok(&doc));
            }
        });
    }
}
