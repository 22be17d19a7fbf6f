//! The values documents are made of: execution kinds, runtime ids, problem types, tags,
//! origins, limits and network policies, each parsed to its canonical form; and the indexed
//! columns a runner's candidate query filters on first ([`IndexKey`], [`IndexFilter`]).

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{json, Map, Value};

use super::parse::{CapabilityError, Doc, Obj, Problem};
use super::{DEFAULT_TAG, MAX_LIMIT, MAX_ORIGINS};

pub(super) const LIMIT_FIELDS: &[&str] = &["cpuSeconds", "memoryMb", "wallSeconds", "outputBytes"];
const NETWORK_FIELDS: &[&str] = &["mode", "origins"];
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

pub(super) fn opaque_label(s: &str, max_chars: usize, what: &str) -> Result<String, String> {
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
    pub(super) cpu_seconds: u64,
    pub(super) memory_mb: u64,
    pub(super) wall_seconds: u64,
    pub(super) output_bytes: u64,
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

    pub(super) fn slot(&mut self, kind: LimitKind) -> &mut u64 {
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
    pub(super) fn parse(
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

    pub(super) fn parse(doc: Doc, path: &str, value: &Value) -> Result<Network, CapabilityError> {
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
/// [`super::match_job`] returns `Ok` (limits, network, streaming, cancellation, tags and served targets
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

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::json;

    use super::*;
    use crate::capability::fixtures::*;
    use crate::testkit::check;

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
}
