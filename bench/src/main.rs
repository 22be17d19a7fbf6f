//! `edgerunner-bench`: the load generator behind `scripts/bench`.
//!
//! It drives a local `wrangler dev` (built with the `bench-floor` feature) through the runner
//! SDK on tokio, seeds the queue in bulk through `wrangler d1 execute`, runs the scenarios of
//! BENCHMARKS.md, measures its own CPU use (`/proc/self/stat`), and writes the Markdown table
//! and a JSON file. Every latency is compared with the floor measured in the same run (see
//! `scenarios`).
//!
//! # Layout
//!
//! - `args`: the command line.
//! - `run`: the setup every run shares, then the full run or one `--*-only` part of it, and
//!   the JSON document written from the scenarios' figures.
//! - `scenarios`: one file per scenario group (claim, lifecycle, stream, recovery, memory,
//!   chatty, round trips, pickup, the claim query's plan) and what they share.
//! - `server`: every HTTP request the harness makes itself, and the typed answers it reads.
//! - `seed`: the local database through `wrangler d1 execute` (bulk seeding, counts, leases).
//! - `measure`: wall and CPU time, percentiles, the figures' shape.
//! - `report`: BENCHMARKS.md from the JSON document, and `--hot-only`'s summary.
//! - `error`: `BenchError`, why a run stopped.

mod args;
mod error;
mod measure;
mod report;
mod run;
mod scenarios;
mod seed;
mod server;

use clap::Parser;

fn main() {
    let args = args::Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: tokio: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run::run(args)) {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}
