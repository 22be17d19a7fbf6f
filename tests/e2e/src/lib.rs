//! Shared helpers for the end-to-end suites. They talk HTTP to a real local workerd
//! (`wrangler dev` with embedded D1 and Durable Objects), exactly as a runner or admin would.
//! `scripts/test` starts the server on fresh state and sets `BASE_URL`.
//!
//! Besides HTTP, a few helpers reach the server's state the way an operator would:
//! [`bootstrap_org`] runs `scripts/bootstrap-admin`, and [`d1`] runs SQL on the D1 file of the
//! same local state directory (`EDGERUNNER_STATE_DIR`; [`wrangler_d1`] through `wrangler d1
//! execute`, as an operator would), which lets a test move an expiry into the past instead of
//! sleeping. [`signing_secret`] reads the server's `REMOTE_RUNNER_SIGNING_SECRET` from
//! `EDGERUNNER_DEV_VARS`, so a test can mint a credential the server must refuse for one reason
//! only (its expiry).
//!
//! Every helper that needs its environment panics when it is missing: a suite that silently
//! passes without a server proves nothing.

mod admin;
pub mod archive;
pub mod contract;
mod env;
mod http;
pub mod jobs;
mod local_d1;
mod operator;
pub mod recovery;
mod runner;
pub mod terminal;

pub use admin::*;
pub use env::*;
pub use http::*;
pub use operator::*;
pub use runner::*;
