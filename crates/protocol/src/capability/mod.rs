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
//! The parts: `values` (kinds, runtime ids, tags, origins, limits, network policies, the index a
//! candidate query filters on), `document` (the capability document, the requirements, tag and
//! served-target lists), `routing` (the match and its reasons), `parse` (the field reader
//! and [`CapabilityError`]). Everything public is re-exported here.
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

mod document;
#[cfg(test)]
mod fixtures;
mod parse;
mod routing;
mod values;

pub use document::{
    parse_served_targets, parse_tags, CapabilityDocument, Requirements, RunnerProfile,
    ServedTarget, SubjectRef,
};
pub use parse::{CapabilityError, FieldError, Problem};
pub use routing::{match_job, tags_share, Mismatch};
pub use values::{
    ExecutionKind, IndexFilter, IndexKey, LimitKind, Limits, Network, Origin, ProblemType,
    RuntimeId, Tag,
};

use crate::stable_json;

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

/// What job requirements look like, for the refusals that say what was expected (a test keeps
/// the names here the parser's own).
pub const REQUIREMENTS_SHAPE: &str = "{\"executionKind\": \"prompt\"|\"scorer\"|\"tool\"|\"workflow\"|\"agent\", \
     \"runtime\": \"python3.12\", \
     \"limits\": {\"cpuSeconds\": n, \"memoryMb\": n, \"wallSeconds\": n, \"outputBytes\": n}}, \
     optionally with \"network\", \"streaming\", \"cancellation\", \"problemType\", \"external\", \"tags\"";
