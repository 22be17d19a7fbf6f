//! The SDK and the `edgerunner` binary against a server double on a loopback port.
//!
//! - A claim answer that fails local verification is refused before anything runs: the double
//!   hands out a real session (with a job-signing key derived as the server derives it), then
//!   one claim answer spoiled in one way, then `204`. The binary must report the refusal, never
//!   run the command, and never ask for the input, heartbeat, stream or complete. Each spoiled
//!   answer is one of the checks the SDK makes: payload hash, signature, key id, organization,
//!   claim identity, validity window; a replayed nonce is checked through the library.
//! - Sessions are exchanged again before they expire, and once after a `401`.
//! - Retries happen only where they are safe, and re-send exactly the same bytes: a chunk whose
//!   answer was lost counts as stored when the server says it already has it; a completion
//!   re-sent after a transient failure is the same completion; a claim that may have reached
//!   the server is never repeated. Of the admin's writes, only a reap pass (safe to repeat) is
//!   sent again after a lost answer.
//! - A genuine job runs only with the artifact its envelope signs: one that cannot be read or
//!   does not match completes `failed` and the command never runs; its files are owner-only in
//!   a fresh private directory.
//! - A session bound to another runner or organization than configured is never used.
//! - `runner enroll` proves possession of its key; the double checks the proof as the server
//!   will.
//! - A hostile server's numbers and answer sizes cannot crash the runner or grow its memory.

mod custody;
mod double;
mod hostile;
mod retries;
mod sessions;
