//! Capability documents, job requirements, and the routing rule between them.
//!
//! A runner declares a [`CapabilityDocument`]; an operator gives it tags; together they are its
//! [`RunnerProfile`]. A job states [`Requirements`]. [`match_job`] compares the two and returns
//! *every* reason they do not fit, so that "why is my job still queued?" has an answer.
//!
//! Matching never relaxes a requirement: a job either fits a runner as stated or waits. It also
//! never looks at capacity: how many claims a runner holds against its `maxConcurrentJobs` is
//! live state that the runner object owns and checks before it asks for candidates.
//!
//! # Decisions the wire contract leaves open
//!
//! - **Omitted capability fields take the registration defaults** (network `deny_all`,
//!   streaming and cancellation supported, 3,600 CPU s, 64 GiB, 24 h wall, 100 MiB output,
//!   one concurrent job, no problem types, not external, protocol version `"1"`), except
//!   `executionKinds` and `runtimes`, which are **required and non-empty**. The registration
//!   flow has a person select the kinds, and a runner that claimed all five by default would be
//!   routed agents and workflows it was never built to run.
//! - **A job states all four limits.** They are what the runner enforces on the job, so a
//!   missing one would silently become the runner's ceiling (up to 64 GiB and a day of wall
//!   time) on someone else's infrastructure.
//! - Omitted job fields: `network` is `deny_all`, `streaming` and `cancellation` are not
//!   required, `external` is false, `problemType` is none, `tags` is `[]` (which routing reads
//!   as `["default"]`). `null` counts as omitted everywhere.
//! - Lists are sets: a duplicate entry is refused (it is usually a typo for another entry), and
//!   the canonical document sorts them, so the same declaration always has the same hash.
//! - Limits are integers from 1 to 2^53 − 1: D1 hands numbers to the Worker through JavaScript,
//!   where larger integers lose digits.
//! - Origins are normalized (scheme and host lowercased, `:443` dropped) and must be exactly
//!   `https://host[:port]`; paths (even a bare `/`), queries, user info, wildcards and IPv6
//!   literals are refused rather than guessed at. `network: "deny_all"` is accepted as
//!   shorthand for `{"mode": "deny_all"}`.
//! - Runtime ids are compared exactly and may hold only lowercase ASCII letters, digits and
//!   `. _ + - : @ /` (so `python3.12` and an image digest both fit); refusing upper case means
//!   `Python3.12` cannot sit in a declaration and silently never match. Problem types and tags
//!   are opaque, compared byte for byte, and only checked for length, control characters and
//!   (tags) surrounding whitespace.
//! - Sizes are bounded so that a document stays small: at most 64 runtimes, 256 problem types,
//!   100 origins, 32 tags and 1,000 served targets.
//! - A runner that sends no served targets, or an empty list, serves every target, as the SDK
//!   reads it (it checks the subject only when its list is non-empty).

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{json, Map, Value};

use crate::error_code::ErrorCode;
use crate::stable_json::{self, Sha256Hex};

/// The only capability protocol version there is.
pub const PROTOCOL_VERSION: &str = "1";

/// The largest limit accepted: JavaScript's largest safe integer, the largest a signed envelope
/// may carry.
pub const MAX_LIMIT: u64 = stable_json::MAX_PORTABLE_INTEGER;

/// The largest `maxConcurrentJobs` a runner may declare.
pub const MAX_CONCURRENT_JOBS: u32 = 1000;

/// What an empty tag list means on either side of routing.
pub const DEFAULT_TAG: &str = "default";

const MAX_RUNTIMES: usize = 64;
const MAX_PROBLEM_TYPES: usize = 256;
const MAX_ORIGINS: usize = 100;
const MAX_TAGS: usize = 32;
const MAX_SERVED_TARGETS: usize = 1000;

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
const LIMIT_FIELDS: &[&str] = &["cpuSeconds", "memoryMb", "wallSeconds", "outputBytes"];

/// What job requirements look like, for the refusals that say what was expected (a test keeps
/// the names here the parser's own).
pub const REQUIREMENTS_SHAPE: &str = "{\"executionKind\": \"prompt\"|\"scorer\"|\"tool\"|\"workflow\"|\"agent\", \
     \"runtime\": \"python3.12\", \
     \"limits\": {\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n}}, \
     optionally with \"network\", \"streaming\", \"cancellation\", \"problemType\", \"external\", \"tags\"";
/// The four limits a job states, each an integer from 1 to [`MAX_LIMIT`].
const LIMITS_SHAPE: &str =
    "{\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n} \
     (each n an integer from 1 to 9007199254740991)";
const NETWORK_SHAPE: &str = "\"deny_all\", {\"mode\": \"deny_all\"} or \
     {\"mode\": \"allowlist\", \"origins\": [\"https://host[:port]\", …]}";
const NETWORK_FIELDS: &[&str] = &["mode", "origins"];
const SERVED_TARGET_FIELDS: &[&str] = &["versionId", "contentHash"];

// ---------------------------------------------------------------------------------------------
// Values

/// What a job executes. Declaration order is the canonical order of `executionKinds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExecutionKind {
    Prompt,
    Scorer,
    Tool,
    Workflow,
    Agent,
}

impl ExecutionKind {
    pub const ALL: [ExecutionKind; 5] = [
        ExecutionKind::Prompt,
        ExecutionKind::Scorer,
        ExecutionKind::Tool,
        ExecutionKind::Workflow,
        ExecutionKind::Agent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionKind::Prompt => "prompt",
            ExecutionKind::Scorer => "scorer",
            ExecutionKind::Tool => "tool",
            ExecutionKind::Workflow => "workflow",
            ExecutionKind::Agent => "agent",
        }
    }

    pub fn parse(s: &str) -> Option<ExecutionKind> {
        ExecutionKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ExecutionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An exact, immutable runtime identifier such as `python3.12` or `nodejs20`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuntimeId(String);

impl RuntimeId {
    /// The jobs table holds a runtime in at most 100 characters (`CHECK (length(runtime) …)`).
    pub const MAX_LEN: usize = 100;

    pub fn parse(s: &str) -> Result<RuntimeId, String> {
        let first_ok = s
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = s
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._+-:@/".contains(&b));
        if s.len() > Self::MAX_LEN {
            return Err(format!(
                "a runtime id has at most {} characters",
                Self::MAX_LEN
            ));
        }
        if !(first_ok && rest_ok) {
            return Err(format!(
                "{s:?} is not a runtime id: use lowercase letters, digits and . _ + - : @ /, \
                 starting with a letter or digit"
            ));
        }
        Ok(RuntimeId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A problem-type discriminator. Compared by equality only: the control plane never parses it,
/// so adding a problem type is never a server change.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProblemType(String);

impl ProblemType {
    pub const MAX_CHARS: usize = 128;

    pub fn parse(s: &str) -> Result<ProblemType, String> {
        opaque_label(s, Self::MAX_CHARS, "a problem type").map(ProblemType)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProblemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A free routing label set by an operator (on runners) or named by a job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(String);

impl Tag {
    pub const MAX_CHARS: usize = 64;

    pub fn parse(s: &str) -> Result<Tag, String> {
        let label = opaque_label(s, Self::MAX_CHARS, "a tag")?;
        // "gpu " and "gpu" would look alike in every panel and never match.
        if label.trim() != label {
            return Err(format!("tag {s:?} has leading or trailing whitespace"));
        }
        Ok(Tag(label))
    }

    /// The tag an empty list stands for.
    pub fn default_tag() -> Tag {
        Tag(DEFAULT_TAG.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn opaque_label(s: &str, max_chars: usize, what: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if s.chars().count() > max_chars {
        return Err(format!("{what} has at most {max_chars} characters"));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters"));
    }
    Ok(s.to_owned())
}

/// A normalized HTTPS origin: `https://` + lowercase host + `:port` unless 443.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin(String);

impl Origin {
    const MAX_LEN: usize = 300;

    pub fn parse(raw: &str) -> Result<Origin, String> {
        const SHAPE: &str = "an origin is exactly https://host or https://host:port";
        if raw.len() > Self::MAX_LEN {
            return Err(format!(
                "an origin has at most {} characters",
                Self::MAX_LEN
            ));
        }
        let Some((scheme, rest)) = raw.split_once("://") else {
            return Err(format!("{raw:?} is not an origin; {SHAPE}"));
        };
        if !scheme.eq_ignore_ascii_case("https") {
            return Err(format!("{raw:?} must use https; {SHAPE}"));
        }
        if rest.contains(['/', '?', '#']) {
            return Err(format!("{raw:?} has a path, query or fragment; {SHAPE}"));
        }
        if rest.contains('@') {
            return Err(format!("{raw:?} carries user info; {SHAPE}"));
        }
        if rest.contains('*') {
            return Err(format!(
                "{raw:?} is a wildcard; list every origin the runner may reach"
            ));
        }
        if rest.starts_with('[') {
            return Err(format!(
                "{raw:?} is an IPv6 literal, which allowlists do not support; use a host name"
            ));
        }
        let (host, port) = match rest.split_once(':') {
            None => (rest, None),
            Some((host, port)) => {
                let digits_ok =
                    (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit());
                match port.parse::<u16>() {
                    Ok(n) if digits_ok && n != 0 => (host, (n != 443).then_some(n)),
                    _ => return Err(format!("{raw:?} has an invalid port; {SHAPE}")),
                }
            }
        };
        if !host.is_ascii() {
            return Err(format!(
                "{raw:?} has a non-ASCII host; write its punycode (xn--) form"
            ));
        }
        let host = host.to_ascii_lowercase();
        let labels_ok = host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        });
        if host.len() > 253 || !labels_ok {
            return Err(format!("{raw:?} has an invalid host name; {SHAPE}"));
        }
        Ok(Origin(match port {
            Some(port) => format!("https://{host}:{port}"),
            None => format!("https://{host}"),
        }))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One of the four resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimitKind {
    CpuSeconds,
    MemoryMb,
    WallSeconds,
    OutputBytes,
}

impl LimitKind {
    pub const ALL: [LimitKind; 4] = [
        LimitKind::CpuSeconds,
        LimitKind::MemoryMb,
        LimitKind::WallSeconds,
        LimitKind::OutputBytes,
    ];

    /// The JSON field name inside `limits`.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::CpuSeconds => "cpuSeconds",
            LimitKind::MemoryMb => "memoryMb",
            LimitKind::WallSeconds => "wallSeconds",
            LimitKind::OutputBytes => "outputBytes",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// CPU seconds, memory MiB, wall seconds and output bytes: a runner's ceilings or a job's
/// request. Each is in `1..=MAX_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    cpu_seconds: u64,
    memory_mb: u64,
    wall_seconds: u64,
    output_bytes: u64,
}

impl Limits {
    /// The registration flow's ceilings: one CPU hour, 64 GiB, 24 h wall, 100 MiB output.
    pub const REGISTRATION_DEFAULT: Limits = Limits {
        cpu_seconds: 3_600,
        memory_mb: 65_536,
        wall_seconds: 86_400,
        output_bytes: 104_857_600,
    };

    pub fn get(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::CpuSeconds => self.cpu_seconds,
            LimitKind::MemoryMb => self.memory_mb,
            LimitKind::WallSeconds => self.wall_seconds,
            LimitKind::OutputBytes => self.output_bytes,
        }
    }

    fn slot(&mut self, kind: LimitKind) -> &mut u64 {
        match kind {
            LimitKind::CpuSeconds => &mut self.cpu_seconds,
            LimitKind::MemoryMb => &mut self.memory_mb,
            LimitKind::WallSeconds => &mut self.wall_seconds,
            LimitKind::OutputBytes => &mut self.output_bytes,
        }
    }

    pub fn cpu_seconds(&self) -> u64 {
        self.cpu_seconds
    }

    pub fn memory_mb(&self) -> u64 {
        self.memory_mb
    }

    pub fn wall_seconds(&self) -> u64 {
        self.wall_seconds
    }

    pub fn output_bytes(&self) -> u64 {
        self.output_bytes
    }

    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        for kind in LimitKind::ALL {
            map.insert(kind.as_str().to_owned(), Value::from(self.get(kind)));
        }
        Value::Object(map)
    }

    /// `defaults: None` makes every field required (job requests).
    fn parse(
        doc: Doc,
        path: &str,
        value: &Value,
        defaults: Option<Limits>,
    ) -> Result<Limits, CapabilityError> {
        let obj = Obj::open(doc, path, value, LIMIT_FIELDS)?;
        let mut limits = defaults.unwrap_or(Limits {
            cpu_seconds: 0,
            memory_mb: 0,
            wall_seconds: 0,
            output_bytes: 0,
        });
        for kind in LimitKind::ALL {
            match obj.get(kind.as_str()) {
                Some(v) => *limits.slot(kind) = obj.integer(kind.as_str(), v, 1, MAX_LIMIT)?,
                None if defaults.is_some() => {}
                None => return Err(obj.err(kind.as_str(), Problem::Missing)),
            }
        }
        Ok(limits)
    }
}

/// Outbound network: nothing, or exactly these HTTPS origins.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Network {
    DenyAll,
    /// Non-empty, sorted, without duplicates when parsed.
    Allowlist(Vec<Origin>),
}

impl Network {
    pub fn to_value(&self) -> Value {
        match self {
            Network::DenyAll => json!({ "mode": "deny_all" }),
            Network::Allowlist(origins) => {
                let origins: BTreeSet<&str> = origins.iter().map(Origin::as_str).collect();
                json!({ "mode": "allowlist", "origins": origins.into_iter().collect::<Vec<_>>() })
            }
        }
    }

    /// The origins this policy lets out (none for `deny_all`).
    pub fn origins(&self) -> &[Origin] {
        match self {
            Network::DenyAll => &[],
            Network::Allowlist(origins) => origins,
        }
    }

    fn parse(doc: Doc, path: &str, value: &Value) -> Result<Network, CapabilityError> {
        if value.as_str() == Some("deny_all") {
            return Ok(Network::DenyAll);
        }
        let obj = Obj::open(doc, path, value, NETWORK_FIELDS)?;
        let mode = obj.required("mode")?;
        match mode.as_str() {
            Some("deny_all") => match obj.get("origins") {
                None => Ok(Network::DenyAll),
                Some(_) => Err(obj.err(
                    "origins",
                    Problem::Invalid("deny_all takes no origins; use mode allowlist".into()),
                )),
            },
            Some("allowlist") => {
                let origins = obj.set("origins", MAX_ORIGINS, Origin::parse)?;
                if origins.is_empty() {
                    return Err(obj.err(
                        "origins",
                        Problem::Invalid(
                            "an allowlist needs at least one origin; use mode deny_all to allow none"
                                .into(),
                        ),
                    ));
                }
                Ok(Network::Allowlist(origins))
            }
            _ => Err(obj.err("mode", Problem::WrongType("\"deny_all\" or \"allowlist\""))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Documents

/// What a runner declares it can do. Built only by [`CapabilityDocument::parse`], so every
/// instance is valid and canonical; [`CapabilityDocument::to_value`] is the document the server
/// stores next to its hash `H(document)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityDocument {
    execution_kinds: Vec<ExecutionKind>,
    runtimes: Vec<RuntimeId>,
    limits: Limits,
    network: Network,
    streaming: bool,
    cancellation: bool,
    max_concurrent_jobs: u32,
    problem_types: Vec<ProblemType>,
    external: bool,
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
    execution_kind: ExecutionKind,
    runtime: RuntimeId,
    limits: Limits,
    network: Network,
    streaming: bool,
    cancellation: bool,
    problem_type: Option<ProblemType>,
    external: bool,
    tags: Vec<Tag>,
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

// ---------------------------------------------------------------------------------------------
// Routing

/// The indexed columns of a queued job: execution kind, runtime, external, problem type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexKey {
    pub execution_kind: ExecutionKind,
    pub runtime: RuntimeId,
    pub external: bool,
    pub problem_type: Option<ProblemType>,
}

/// The part of matching an index can answer for one runner. In SQL:
///
/// ```sql
/// execution_kind IN (…kinds) AND runtime IN (…runtimes) AND external = ?
///   AND (problem_type IS NULL OR problem_type IN (…problem types))
/// ```
///
/// It is necessary, not sufficient: query with it, then keep only the candidates for which
/// [`match_job`] returns `Ok` (limits, network, streaming, cancellation, tags and served targets
/// are not indexable). It never excludes a job that `match_job` would accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFilter {
    pub execution_kinds: Vec<ExecutionKind>,
    pub runtimes: Vec<RuntimeId>,
    pub external: bool,
    pub problem_types: Vec<ProblemType>,
}

impl IndexFilter {
    pub fn admits(&self, key: &IndexKey) -> bool {
        self.execution_kinds.contains(&key.execution_kind)
            && self.runtimes.contains(&key.runtime)
            && self.external == key.external
            && key
                .problem_type
                .as_ref()
                .is_none_or(|p| self.problem_types.contains(p))
    }
}

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

fn effective_tags(tags: &[Tag]) -> Vec<Tag> {
    if tags.is_empty() {
        vec![Tag::default_tag()]
    } else {
        tags.to_vec()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A capability document, requirements, tag list or served-target list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CapabilityError {
    InvalidCapabilities(FieldError),
    InvalidRequirements(FieldError),
    InvalidTags(FieldError),
    InvalidServedTargets(FieldError),
}

/// Which field is wrong (a path such as `limits.cpuSeconds` or `runtimes[2]`; empty for the
/// document itself), and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    Missing,
    /// Not a field of this object; these are.
    UnknownField(&'static [&'static str]),
    /// Must be this (a phrase such as "a boolean").
    WrongType(&'static str),
    OutOfRange {
        min: u64,
        max: u64,
    },
    Empty,
    TooMany(usize),
    /// A set lists this (normalized) value twice.
    Duplicate(String),
    Invalid(String),
}

impl CapabilityError {
    /// The machine code of `{"error": {"code", …}}` when the edge answers this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            CapabilityError::InvalidCapabilities(_) => ErrorCode::InvalidCapabilities,
            CapabilityError::InvalidRequirements(_) => ErrorCode::InvalidRequirements,
            CapabilityError::InvalidTags(_) => ErrorCode::InvalidTags,
            CapabilityError::InvalidServedTargets(_) => ErrorCode::InvalidServedTargets,
        }
    }

    /// The wire name of [`Self::error_code`].
    pub fn code(&self) -> &'static str {
        self.error_code().as_str()
    }

    /// The JSON was well formed; its content is not acceptable.
    pub fn http_status(&self) -> u16 {
        422
    }

    pub fn field_error(&self) -> &FieldError {
        match self {
            CapabilityError::InvalidCapabilities(e)
            | CapabilityError::InvalidRequirements(e)
            | CapabilityError::InvalidTags(e)
            | CapabilityError::InvalidServedTargets(e) => e,
        }
    }
}

impl fmt::Display for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            CapabilityError::InvalidCapabilities(_) => "capabilities",
            CapabilityError::InvalidRequirements(_) => "requirements",
            CapabilityError::InvalidTags(_) => "tags",
            CapabilityError::InvalidServedTargets(_) => "servedTargets",
        };
        let FieldError { field, problem } = self.field_error();
        let subject = if field.is_empty() {
            what.to_owned()
        } else if field.starts_with('[') {
            format!("{what}{field}")
        } else {
            format!("{what}.{field}")
        };
        // What was expected, after a field that is missing or of the wrong type.
        let shape = match self {
            CapabilityError::InvalidRequirements(_) => requirement_shape(field),
            _ => None,
        };
        match problem {
            Problem::Missing => write!(f, "{subject} is required")?,
            Problem::UnknownField(allowed) => {
                return write!(
                    f,
                    "{subject} is not a known field; expected one of {}",
                    allowed.join(", ")
                )
            }
            Problem::WrongType(expected) => write!(f, "{subject} must be {expected}")?,
            Problem::OutOfRange { min, max } => {
                return write!(f, "{subject} must be an integer from {min} to {max}")
            }
            Problem::Empty => write!(f, "{subject} must not be empty")?,
            Problem::TooMany(max) => return write!(f, "{subject} has more than {max} entries"),
            Problem::Duplicate(value) => {
                return write!(f, "{subject} lists {value:?} more than once")
            }
            Problem::Invalid(reason) => return write!(f, "{subject}: {reason}"),
        }
        match shape {
            Some(shape) => write!(f, ": {shape}"),
            None => Ok(()),
        }
    }
}

/// The expected shape of a requirements field (a path as [`FieldError::field`] names it), where
/// one helps more than the type alone; `None` for booleans and fields whose refusal says it all.
fn requirement_shape(field: &str) -> Option<&'static str> {
    // `tags[3]` has the shape of an entry of `tags`.
    let field = field.split('[').next().unwrap_or(field);
    match field {
        "" => Some(REQUIREMENTS_SHAPE),
        "executionKind" => Some("one of \"prompt\", \"scorer\", \"tool\", \"workflow\", \"agent\""),
        "runtime" => Some("a runtime id such as \"python3.12\" (lowercase letters, digits and . _ + - : @ /)"),
        "limits" => Some(LIMITS_SHAPE),
        "limits.cpuSeconds" | "limits.memoryMb" | "limits.wallSeconds" | "limits.outputBytes" => {
            Some("an integer from 1 to 9007199254740991; limits is {\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n}")
        }
        "network" | "network.mode" | "network.origins" => Some(NETWORK_SHAPE),
        "problemType" => Some("a string such as \"code/python\""),
        "tags" => Some("[\"gpu\", …] (at most 32 tags)"),
        _ => None,
    }
}

impl std::error::Error for CapabilityError {}

// ---------------------------------------------------------------------------------------------
// Parsing helpers

#[derive(Debug, Clone, Copy)]
enum Doc {
    Capabilities,
    Requirements,
    Tags,
    ServedTargets,
}

impl Doc {
    fn error(self, field: impl Into<String>, problem: Problem) -> CapabilityError {
        let e = FieldError {
            field: field.into(),
            problem,
        };
        match self {
            Doc::Capabilities => CapabilityError::InvalidCapabilities(e),
            Doc::Requirements => CapabilityError::InvalidRequirements(e),
            Doc::Tags => CapabilityError::InvalidTags(e),
            Doc::ServedTargets => CapabilityError::InvalidServedTargets(e),
        }
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

fn unknown_kind(s: &str) -> String {
    format!("{s:?} is not an execution kind; expected prompt, scorer, tool, workflow or agent")
}

/// An object whose keys have been checked against the allowed ones.
struct Obj<'a> {
    doc: Doc,
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn open(
        doc: Doc,
        path: &str,
        value: &'a Value,
        allowed: &'static [&'static str],
    ) -> Result<Obj<'a>, CapabilityError> {
        let map = value
            .as_object()
            .ok_or_else(|| doc.error(path, Problem::WrongType("an object")))?;
        if let Some(unknown) = map.keys().find(|key| !allowed.contains(&key.as_str())) {
            return Err(doc.error(join(path, unknown), Problem::UnknownField(allowed)));
        }
        Ok(Obj {
            doc,
            path: path.to_owned(),
            map,
        })
    }

    fn err(&self, key: &str, problem: Problem) -> CapabilityError {
        self.doc.error(join(&self.path, key), problem)
    }

    /// `null` is as good as absent, since JavaScript clients send it for "not set".
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn required(&self, key: &str) -> Result<&'a Value, CapabilityError> {
        self.get(key).ok_or_else(|| self.err(key, Problem::Missing))
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool, CapabilityError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(key, Problem::WrongType("a boolean"))),
        }
    }

    /// `as_u64` refuses `1.0`, `1e3` and negatives under `arbitrary_precision`, which is what
    /// a limit wants: an integer as written.
    fn integer(&self, key: &str, v: &Value, min: u64, max: u64) -> Result<u64, CapabilityError> {
        v.as_u64()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.err(key, Problem::OutOfRange { min, max }))
    }

    fn string<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, CapabilityError> {
        let s = self
            .required(key)?
            .as_str()
            .ok_or_else(|| self.err(key, Problem::WrongType("a string")))?;
        parse(s).map_err(|reason| self.err(key, Problem::Invalid(reason)))
    }

    /// An optional set of strings; absent is empty.
    fn set<T: Ord + fmt::Display>(
        &self,
        key: &str,
        max: usize,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, CapabilityError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(v) => {
                let items = v
                    .as_array()
                    .ok_or_else(|| self.err(key, Problem::WrongType("an array of strings")))?;
                parse_set(self.doc, &join(&self.path, key), items, max, parse)
            }
        }
    }

    fn required_set<T: Ord + fmt::Display>(
        &self,
        key: &str,
        max: usize,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Vec<T>, CapabilityError> {
        self.required(key)?;
        let set = self.set(key, max, parse)?;
        if set.is_empty() {
            return Err(self.err(key, Problem::Empty));
        }
        Ok(set)
    }
}

fn parse_set<T: Ord + fmt::Display>(
    doc: Doc,
    path: &str,
    items: &[Value],
    max: usize,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, CapabilityError> {
    if items.len() > max {
        return Err(doc.error(path, Problem::TooMany(max)));
    }
    let mut set = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let s = item
            .as_str()
            .ok_or_else(|| doc.error(at.as_str(), Problem::WrongType("a string")))?;
        let value = parse(s).map_err(|reason| doc.error(at.as_str(), Problem::Invalid(reason)))?;
        let shown = value.to_string();
        if !set.insert(value) {
            return Err(doc.error(path, Problem::Duplicate(shown)));
        }
    }
    Ok(set.into_iter().collect())
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::testkit::{assert_refusal, check, Rng};

    fn caps(value: Value) -> CapabilityDocument {
        CapabilityDocument::parse(&value).unwrap()
    }

    fn caps_err(value: Value) -> String {
        let err = CapabilityDocument::parse(&value).unwrap_err();
        assert_eq!(err.code(), "INVALID_CAPABILITIES");
        assert_eq!(err.http_status(), 422);
        err.to_string()
    }

    fn req_err(value: Value) -> String {
        let err = Requirements::parse(&value).unwrap_err();
        assert_eq!(err.code(), "INVALID_REQUIREMENTS");
        err.to_string()
    }

    /// Parses JSON text, so that number lexemes arrive exactly as a client wrote them.
    fn raw(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn minimal_requirements() -> Value {
        json!({
            "executionKind": "scorer",
            "runtime": "python3.12",
            "limits": {"cpuSeconds": 60, "memoryMb": 512, "wallSeconds": 120, "outputBytes": 1024},
        })
    }

    // --- capability documents -------------------------------------------------------------

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
    fn runtime_ids_are_exact_lowercase_identifiers() {
        for good in [
            "python3.12",
            "nodejs20",
            "deno-2.1",
            "ghcr.io/acme/py@sha256:0a1b",
            "r4.4+cran",
        ] {
            assert_eq!(
                RuntimeId::parse(good).map(|r| r.to_string()),
                Ok(good.to_owned())
            );
        }
        for bad in [
            "",
            "Python3.12",
            "python 3.12",
            ".hidden",
            "-x",
            "py\n",
            "ünï",
            &"a".repeat(101),
        ] {
            assert!(RuntimeId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(RuntimeId::parse(&"a".repeat(100)).is_ok());
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

    // --- network --------------------------------------------------------------------------

    #[test]
    fn origins_are_normalized() {
        for (input, canonical) in [
            ("https://api.example.com", "https://api.example.com"),
            ("HTTPS://API.Example.COM", "https://api.example.com"),
            ("https://api.example.com:443", "https://api.example.com"),
            (
                "https://api.example.com:8443",
                "https://api.example.com:8443",
            ),
            ("https://10.0.0.1:9000", "https://10.0.0.1:9000"),
            ("https://localhost", "https://localhost"),
            (
                "https://xn--bcher-kva.example",
                "https://xn--bcher-kva.example",
            ),
        ] {
            assert_eq!(
                Origin::parse(input).map(|o| o.to_string()),
                Ok(canonical.to_owned())
            );
        }
    }

    #[test]
    fn anything_but_a_bare_https_origin_is_refused_with_a_reason() {
        for (input, reason) in [
            ("http://api.example.com", "must use https"),
            ("api.example.com", "is not an origin"),
            ("https://api.example.com/", "path, query or fragment"),
            ("https://api.example.com/v1", "path, query or fragment"),
            ("https://api.example.com?x=1", "path, query or fragment"),
            ("https://api.example.com#x", "path, query or fragment"),
            ("https://user:pw@api.example.com", "user info"),
            ("https://*.example.com", "wildcard"),
            ("https://[::1]", "IPv6"),
            ("https://api.example.com:0", "invalid port"),
            ("https://api.example.com:65536", "invalid port"),
            ("https://api.example.com:", "invalid port"),
            ("https://api.example.com:44x", "invalid port"),
            ("https://bücher.example", "punycode"),
            ("https://", "invalid host"),
            ("https://example.com.", "invalid host"),
            ("https://-bad.example.com", "invalid host"),
            ("https://a b.com", "invalid host"),
            ("https://a_b.com", "invalid host"),
        ] {
            match Origin::parse(input) {
                Ok(origin) => panic!("{input:?} parsed as {origin}"),
                Err(message) => assert!(message.contains(reason), "{input:?}: {message}"),
            }
        }
    }

    #[test]
    fn network_policies_parse_in_both_documents() {
        let base = json!({"executionKinds": ["agent"], "runtimes": ["x"]});
        let with = |network: Value| {
            let mut doc = base.clone();
            doc["network"] = network;
            doc
        };
        assert_eq!(caps(with(json!("deny_all"))).network(), &Network::DenyAll);
        let doc = caps(with(
            json!({"mode": "allowlist", "origins": ["https://B.example", "https://a.example"]}),
        ));
        assert_eq!(
            doc.to_value()["network"],
            json!({"mode": "allowlist", "origins": ["https://a.example", "https://b.example"]})
        );
        assert_eq!(
            caps_err(with(json!({"mode": "allowlist", "origins": []}))),
            "capabilities.network.origins: an allowlist needs at least one origin; use mode deny_all to allow none"
        );
        assert_eq!(
            caps_err(with(json!({"mode": "allowlist"}))),
            "capabilities.network.origins: an allowlist needs at least one origin; use mode deny_all to allow none"
        );
        assert!(caps_err(with(
            json!({"mode": "deny_all", "origins": ["https://a.example"]})
        ))
        .contains("deny_all takes no origins"));
        assert_eq!(
            caps_err(with(json!({"mode": "open"}))),
            "capabilities.network.mode must be \"deny_all\" or \"allowlist\""
        );
        assert!(caps_err(with(json!("allowlist"))).contains("network must be an object"));
        assert!(caps_err(with(
            json!({"mode": "allowlist", "origins": ["https://a.example", "https://A.example:443"]})
        ))
        .contains("lists \"https://a.example\" more than once"));
        assert!(caps_err(with(
            json!({"mode": "allowlist", "origins": ["http://a.example"]})
        ))
        .starts_with("capabilities.network.origins[0]: \"http://a.example\" must use https"));
    }

    // --- requirements ---------------------------------------------------------------------

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

    // --- matching: examples ---------------------------------------------------------------

    fn subject() -> SubjectRef {
        SubjectRef {
            version_id: 7,
            content_hash: "ab".repeat(32),
        }
    }

    fn profile(value: Value, tags: &[&str]) -> RunnerProfile {
        RunnerProfile::new(
            caps(value),
            tags.iter().map(|t| Tag::parse(t).unwrap()).collect(),
        )
    }

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

    const RUNTIMES: [&str; 4] = [
        "python3.12",
        "nodejs20",
        "deno2",
        "ghcr.io/acme/py@sha256:00",
    ];
    const ORIGINS: [&str; 4] = [
        "https://api.openai.com",
        "https://example.com:8443",
        "https://a.b.c",
        "https://localhost",
    ];
    const PROBLEM_TYPES: [&str; 3] = ["code/python", "sql", "Math Proof"];
    const TAGS: [&str; 4] = ["default", "gpu", "slow", "eu"];

    fn subset<T: Clone>(rng: &mut Rng, items: &[T]) -> Vec<T> {
        items.iter().filter(|_| rng.chance(1, 2)).cloned().collect()
    }

    fn sorted<T: Ord>(items: impl IntoIterator<Item = T>) -> Vec<T> {
        items
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    fn rt(s: &str) -> RuntimeId {
        RuntimeId::parse(s).unwrap()
    }

    fn origin(s: &str) -> Origin {
        Origin::parse(s).unwrap()
    }

    fn tag(s: &str) -> Tag {
        Tag::parse(s).unwrap()
    }

    fn random_requirements(rng: &mut Rng) -> Requirements {
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

    fn random_subject(rng: &mut Rng) -> SubjectRef {
        SubjectRef {
            version_id: 1 + rng.below(1_000) as i64,
            content_hash: format!("{:016x}", rng.next_u64()).repeat(4),
        }
    }

    /// A runner whose every declaration meets or exceeds `req`, plus served targets that
    /// include the subject (or none).
    fn satisfying(
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

    fn random_document(rng: &mut Rng) -> CapabilityDocument {
        let req = random_requirements(rng);
        let subject = random_subject(rng);
        satisfying(rng, &req, &subject).0.capabilities
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

    #[test]
    fn parsers_never_panic_and_accepted_values_are_fixed_points() {
        check(2_000, |rng| {
            let s = rng.string(40);
            for candidate in [s.clone(), format!("https://{s}"), s.to_ascii_lowercase()] {
                if let Ok(o) = Origin::parse(&candidate) {
                    assert_eq!(Origin::parse(o.as_str()), Ok(o.clone()));
                    assert!(o.as_str().starts_with("https://"));
                }
                if let Ok(r) = RuntimeId::parse(&candidate) {
                    assert_eq!(r.as_str(), candidate);
                }
                if let Ok(t) = Tag::parse(&candidate) {
                    assert_eq!(t.as_str(), candidate);
                }
                let _ = ProblemType::parse(&candidate);
            }
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
