//! Reading the documents' JSON field by field, and the one error every parser here refuses
//! with ([`CapabilityError`]), whose message names the field and, where it helps, the shape
//! expected.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use super::REQUIREMENTS_SHAPE;
use crate::error_code::ErrorCode;

/// The four limits a job states, each an integer from 1 to [`MAX_LIMIT`].
const LIMITS_SHAPE: &str =
    "{\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n} \
     (each n an integer from 1 to 9007199254740991)";
const NETWORK_SHAPE: &str = "\"deny_all\", {\"mode\": \"deny_all\"} or \
     {\"mode\": \"allowlist\", \"origins\": [\"https://host[:port]\", …]}";
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
#[derive(Debug, Clone, Copy)]
pub(super) enum Doc {
    Capabilities,
    Requirements,
    Tags,
    ServedTargets,
}

impl Doc {
    pub(super) fn error(self, field: impl Into<String>, problem: Problem) -> CapabilityError {
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

pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

pub(super) fn unknown_kind(s: &str) -> String {
    format!("{s:?} is not an execution kind; expected prompt, scorer, tool, workflow or agent")
}

/// An object whose keys have been checked against the allowed ones.
pub(super) struct Obj<'a> {
    doc: Doc,
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    pub(super) fn open(
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

    pub(super) fn err(&self, key: &str, problem: Problem) -> CapabilityError {
        self.doc.error(join(&self.path, key), problem)
    }

    /// `null` is as good as absent, since JavaScript clients send it for "not set".
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn required(&self, key: &str) -> Result<&'a Value, CapabilityError> {
        self.get(key).ok_or_else(|| self.err(key, Problem::Missing))
    }

    pub(super) fn boolean(&self, key: &str, default: bool) -> Result<bool, CapabilityError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.err(key, Problem::WrongType("a boolean"))),
        }
    }

    /// `as_u64` refuses `1.0`, `1e3` and negatives under `arbitrary_precision`, which is what
    /// a limit wants: an integer as written.
    pub(super) fn integer(
        &self,
        key: &str,
        v: &Value,
        min: u64,
        max: u64,
    ) -> Result<u64, CapabilityError> {
        v.as_u64()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.err(key, Problem::OutOfRange { min, max }))
    }

    pub(super) fn string<T>(
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
    pub(super) fn set<T: Ord + fmt::Display>(
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

    pub(super) fn required_set<T: Ord + fmt::Display>(
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

pub(super) fn parse_set<T: Ord + fmt::Display>(
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
