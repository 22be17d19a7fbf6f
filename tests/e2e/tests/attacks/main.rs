//! The attack suite: each test is an exploit against a running server (or a real CLI runner),
//! written as an attacker would try it, and asserts that it is refused. `SECURITY.md` names,
//! for each line of the threat model, the test here (or elsewhere) that proves it.
//!
//! One module per boundary. Like every e2e suite, each test makes its own organization, never
//! sleeps for synchronization, and has a control beside each refusal where a refusal alone
//! could pass for the wrong reason.

mod enrollment;
mod gate;
mod hostile_server;
mod job_env;
mod job_output;
mod keys;
mod redirects;
mod runner_files;
mod runner_host;
