//! The edgerunner wire protocol, shared by the edge Worker and every runner.
//!
//! # Layout
//! - [`stable_json`]: the canonical JSON rendering and `H`, byte-identical to the EvalGate SDK.
//! - [`envelope`]: the signed job envelope, per-runner signing keys and key ids.
//! - [`error_code`]: the machine codes of the edge's error answers, as a type.
//! - [`chunk`]: stream chunk hashes and hash-chain validation.
//! - [`completion`]: completion checksums and the reconciliation decision.
//! - [`credential`]: short-lived runner credentials (issue and verify).
//! - [`keypair`]: ed25519 fingerprints and challenge signatures (self-registered runners).
//! - [`capability`]: capability documents, job requirements and routing, with reasons.
//! - [`state`]: job and runner state machines as transition functions, and claim states.
//! - [`kind`]: evidence kinds and event kinds, by their stored names.
//! - [`recovery`]: the lease-loss decision the reaper and job alarms apply.
//! - [`queue`]: a job's queue (the routing parts of its requirements, named stably), the bound
//!   on an organization's queues, and the runners a queue wants.
//! - [`archive`]: a finished job's archive to object storage, its stages and their checks.
//! - [`time`]: RFC 3339 timestamps from Unix milliseconds (no clock inside this crate).
//! - `wire_name` (private): the one declaration of a closed set of names (`ErrorCode`,
//!   `ClaimState`, `EvidenceKind`, `EventKind`): its parsing, display and serde.
//!
//! Nothing here reads a clock or a random source: callers pass `now` and random bytes in.

pub mod archive;
pub mod capability;
pub mod chunk;
pub mod completion;
pub mod credential;
pub mod enrollment;
pub mod envelope;
pub mod error_code;
pub mod keypair;
pub mod kind;
pub mod queue;
pub mod recovery;
pub mod retention;
pub mod stable_json;
pub mod state;
pub mod time;
mod wire_name;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod documents;
#[cfg(test)]
mod testkit;
