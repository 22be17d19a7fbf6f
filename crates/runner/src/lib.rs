//! The edgerunner runner: the `edgerunner` command line and, later, the runner SDK.
//!
//! # Layout
//! - [`cli`]: argument parsing into a [`cli::Command`] and running it against given input and
//!   output streams, so that every subcommand is testable without a process.
//!
//! The protocol itself (hashing, envelopes, chunks, completions) lives in
//! `edgerunner-protocol`; this crate only wires it to the outside world.

pub mod cli;
