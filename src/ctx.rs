//! What every handler needs, in a module of its own: routes depend on it, and on nothing of the
//! entry point that calls them (`lib.rs`).

use worker::Env;

use crate::{request_log, store};

/// What every handler needs: the environment, the database and one reading of the clock.
pub(crate) struct Ctx {
    pub(crate) env: Env,
    pub(crate) db: store::Db,
    pub(crate) now: i64,
    /// What authentication learns of the caller, for the request's log line.
    pub(crate) seen: request_log::Seen,
}
