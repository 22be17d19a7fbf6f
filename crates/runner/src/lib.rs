//! The edgerunner runner: the SDK a Rust runner links, and the `edgerunner` command line.
//!
//! # Layout
//! - [`http`]: JSON over HTTP and [`http::ClientError`], the SDK layer's one error type.
//! - [`session`]: the two identity models (bootstrap token, key pair) and the session rule
//!   (exchange again 30 s before expiry).
//! - [`client`]: [`client::RunnerClient`], the runner endpoints with local verification of
//!   every claim, `401` re-exchange, and retries only where a retry is safe.
//! - [`heartbeat`]: a claim's heartbeats on their own task; cancellation and lease loss
//!   surface through a watch channel.
//! - [`stream`]: the claim's chunk chain kept for the caller, and log lines batched by bytes
//!   into chunks while the next lines are read, within the attempt's stream limits.
//! - [`log_payload`]: a log chunk's lines read back, from the segments the runner writes or
//!   the one-object-per-line shape of earlier runners.
//! - [`exec`]: running one job's command (in a given directory) through the job launcher, with
//!   wall-time limit, cancellation (terminate, grace, kill) and output capture.
//! - [`isolation`]: the job launcher (`edgerunner __job-launcher`): a session of its own,
//!   a subreaper that kills every process the job leaves, rlimits from the job's limits, a
//!   network namespace for `deny_all`; and the start-up probe of what this host enforces.
//! - [`cgroup`]: a cgroup per job where the runner may create one (v2, and v1 `memory` on
//!   hybrid hosts): found, entered by the launcher, ended by the runner.
//! - [`job_env`]: what a job's process gets of the runner's environment (an allowlist, its own
//!   `TMPDIR`, the variables the operator names; never a credential), decided at start.
//! - [`evidence`]: where a completion's evaluation run comes from.
//! - [`worker`]: `edgerunner runner start`: claim up to capacity, run, stream, complete, and
//!   drain or give back work on shutdown (`worker/claim_loop.rs` the loop, `worker/job.rs` one
//!   job's task, `worker/command.rs` its command and output).
//! - [`workdir`]: the runner's private work directory and each job's (fresh random names,
//!   `0700`), made and filled through open directory handles, and owner-only job files that
//!   are never written through a planted link.
//! - [`keyfile`], [`config`]: the runner's key (owner-only file) and configuration.
//! - [`admin`]: the REST operations an admin uses daily, with an API key.
//! - [`pool`]: a pool's decisions (how many one-job runner processes a host starts, between a
//!   floor and a ceiling), pure; the `runner pool` command that acts on them is not built yet.
//! - [`custody`]: offline verification of a job's custody bundle (`edgerunner verify`).
//! - [`report`]: the CLI's `tracing` output: human lines and a status line on a terminal, JSON
//!   lines otherwise. The library itself only emits `tracing` events and spans.
//! - [`retry`], [`clock`]: retry policies (on `backon`), and the injectable clock.
//! - [`cli`]: argument parsing and the subcommands; `main.rs` only calls it (`cli/admin_cmd/`:
//!   `edgerunner admin …`, its arguments, request bodies and rendering apart).
//!
//! The protocol itself (hashing, envelopes, chunks, completions) lives in
//! `edgerunner-protocol`; this crate wires it to the outside world.

pub mod admin;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod custody;
pub mod evidence;
pub mod exec;
pub mod heartbeat;
pub mod http;
pub mod isolation;
pub mod job_env;
pub mod keyfile;
pub mod log_payload;
pub mod pool;
pub mod report;
pub mod retry;
pub mod session;
pub mod stream;
pub mod workdir;
pub mod worker;
