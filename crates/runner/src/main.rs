//! `edgerunner`: see [`edgerunner::cli`] for the subcommands.

use std::process::ExitCode;

fn main() -> ExitCode {
    edgerunner::cli::main()
}
