//! The load generator's command line: the run's inputs (servers, state, report paths, build
//! sizes) and the flags that run one scenario alone.

use std::path::PathBuf;

use clap::Parser;
use edgerunner::stream::BatchLimits;

#[derive(Parser, Debug)]
#[command(about = "edgerunner benchmark harness (run it through scripts/bench)")]
pub(crate) struct Args {
    /// The local server, e.g. http://127.0.0.1:8787 (built with the bench-floor feature).
    #[arg(long)]
    pub(crate) server: String,
    /// An admin API key (scripts/bootstrap-admin --state DIR).
    #[arg(long, env = "EDGERUNNER_BENCH_API_KEY")]
    pub(crate) api_key: String,
    /// The `--persist-to` directory of the running server (for `wrangler d1 execute`).
    #[arg(long)]
    pub(crate) state: PathBuf,
    /// Workerd's own socket, as the end-to-end suites use [default: --server], for what
    /// wrangler's dev proxy (a local tool with no part in production) would distort: the chatty
    /// jobs' runner (the proxy copies every body), the reap passes (see `reap_pass`), and the
    /// setup and admin requests (evaluation runs, runners, releases, enqueues).
    #[arg(long)]
    pub(crate) direct_server: Option<String>,
    /// Tiny sizes: every scenario in a few seconds.
    #[arg(long)]
    pub(crate) smoke: bool,
    /// Where to write the Markdown report.
    #[arg(long)]
    pub(crate) markdown: PathBuf,
    /// Where to write the JSON results.
    #[arg(long)]
    pub(crate) json: PathBuf,
    /// The command line to print in the report.
    #[arg(long, default_value = "scripts/bench")]
    pub(crate) command: String,
    /// Size of the production build's wasm module from `wrangler deploy --dry-run`.
    #[arg(long)]
    pub(crate) wasm_bytes: u64,
    /// The same module, gzip -9.
    #[arg(long)]
    pub(crate) wasm_gzip_bytes: u64,
    /// The claim's matching query (src/store/queries/claim_candidates.sql).
    #[arg(long)]
    pub(crate) claim_query: PathBuf,
    /// A shell command printing one memory reading as a JSON line,
    /// `{"wasmMemoryBytes", "workerdRssBytes"}` (scripts/bench `--memory-reading`).
    #[arg(long)]
    pub(crate) memory_probe: Option<String>,
    /// Chunks of 256 KiB for the big job (default: 256 in a full run, 4 with --smoke).
    #[arg(long, env = "EDGERUNNER_BENCH_BUNDLE_CHUNKS")]
    pub(crate) bundle_chunks: Option<usize>,
    /// Run only scenario 7 (chatty jobs) at the run's sizes: print its Markdown section on
    /// stdout and write its figures to --json. Needs no floor route: any local server does.
    #[arg(long)]
    pub(crate) chatty_only: bool,
    /// Run only scenario 4 (recovery) with this many leases: print its figures as JSON on
    /// stdout and write them to --json. Needs no floor route: any local server does.
    #[arg(long)]
    pub(crate) recovery_only: Option<usize>,
    /// Run only the hot path's scenarios (8, 9, 1 at 100 queued three times, 2): print their
    /// figures as JSON on stdout and write them to --json. Needs the floor route.
    #[arg(long)]
    pub(crate) hot_only: bool,
    /// Run only scenario 2 (lifecycle throughput) at one size, `RUNNERSxPER_RUNNERxROUNDS`
    /// (e.g. `32x2x3`; runners 1–256, lifecycles per runner 1–1000, rounds 1–50): print its
    /// figures as JSON on stdout. Needs the floor route. For comparing two changes, or for
    /// holding a load while a profiler watches the server.
    #[arg(long, value_parser = parse_lifecycle_plan)]
    pub(crate) lifecycle_only: Option<(usize, usize, usize)>,
    /// With --lifecycle-only: jobs queued beyond the lifecycles' own (0–1,000,000), so that
    /// they run on a queue this deep (the full run's lifecycles follow the claim at 100,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_LIFECYCLE_DEPTH))]
    pub(crate) lifecycle_depth: u64,
    /// Payload bytes per log chunk for the chatty jobs (the runner's --batch-bytes).
    #[arg(long, env = "EDGERUNNER_BENCH_BATCH_BYTES", default_value_t = BatchLimits::DEFAULT.max_bytes)]
    pub(crate) batch_bytes: usize,
}

/// The bounds of `--lifecycle-only`: each runner is registered for the run, and the queue is
/// seeded with a job per lifecycle (one SQL statement).
const MAX_LIFECYCLE_RUNNERS: usize = 256;
const MAX_LIFECYCLES_PER_RUNNER: usize = 1000;
const MAX_LIFECYCLE_ROUNDS: usize = 50;
/// Jobs `--lifecycle-depth` may queue beyond the lifecycles' own (the full run's deepest is
/// 100,000, seeded in about 2 s).
const MAX_LIFECYCLE_DEPTH: u64 = 1_000_000;

/// A `--lifecycle-only` value that is not three counts within their bounds.
#[derive(Debug, PartialEq)]
enum LifecyclePlanError {
    /// One of its parts is not a count.
    NotACount { part: String, detail: String },
    /// Three counts, or some other number of them, not within the bounds.
    OutOfBounds { text: String },
}

impl std::fmt::Display for LifecyclePlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotACount { part, detail } => write!(f, "{part:?}: {detail}"),
            Self::OutOfBounds { text } => write!(
                f,
                "{text:?} is not RUNNERSxPER_RUNNERxROUNDS with runners 1–{MAX_LIFECYCLE_RUNNERS}, \
                 lifecycles per runner 1–{MAX_LIFECYCLES_PER_RUNNER}, rounds 1–{MAX_LIFECYCLE_ROUNDS}"
            ),
        }
    }
}

impl std::error::Error for LifecyclePlanError {}

/// `RUNNERSxPER_RUNNERxROUNDS`, each at least 1 and within its bound.
fn parse_lifecycle_plan(text: &str) -> Result<(usize, usize, usize), LifecyclePlanError> {
    let parts: Vec<usize> = text
        .splitn(4, 'x')
        .map(|part| {
            part.parse::<usize>()
                .map_err(|e| LifecyclePlanError::NotACount {
                    part: part.to_owned(),
                    detail: e.to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    match parts[..] {
        [runners, per_runner, rounds]
            if (1..=MAX_LIFECYCLE_RUNNERS).contains(&runners)
                && (1..=MAX_LIFECYCLES_PER_RUNNER).contains(&per_runner)
                && (1..=MAX_LIFECYCLE_ROUNDS).contains(&rounds) =>
        {
            Ok((runners, per_runner, rounds))
        }
        _ => Err(LifecyclePlanError::OutOfBounds {
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifecycle_plan_is_three_bounded_counts() {
        assert_eq!(parse_lifecycle_plan("32x2x3"), Ok((32, 2, 3)));
        assert_eq!(parse_lifecycle_plan("256x1000x50"), Ok((256, 1000, 50)));
        for refused in [
            "0x2x3",
            "32x0x3",
            "32x2x0",
            "257x1x1",
            "1x1001x1",
            "1x1x51",
            "32x2",
            "32x2x3x4",
            "32x2x",
            "x2x3",
            "32,2,3",
            "-1x2x3",
            "99999999999999999999999x1x1",
        ] {
            assert!(
                parse_lifecycle_plan(refused).is_err(),
                "{refused} was taken"
            );
        }
    }

    #[test]
    fn the_queue_depth_is_bounded() {
        use clap::Parser;
        let args = |depth: &str| {
            Args::try_parse_from([
                "edgerunner-bench",
                "--server",
                "http://127.0.0.1:1",
                "--api-key",
                "k",
                "--state",
                "s",
                "--markdown",
                "m",
                "--json",
                "j",
                "--wasm-bytes",
                "0",
                "--wasm-gzip-bytes",
                "0",
                "--claim-query",
                "q",
                "--lifecycle-only",
                "1x1x1",
                "--lifecycle-depth",
                depth,
            ])
        };
        assert_eq!(
            args("1000000").map(|a| a.lifecycle_depth).ok(),
            Some(1_000_000)
        );
        assert!(args("1000001").is_err());
        assert!(args("-1").is_err());
    }
}
