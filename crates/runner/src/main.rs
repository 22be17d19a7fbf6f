//! `edgerunner`: see [`edgerunner::cli`] for the subcommands.

use std::process::ExitCode;

fn main() -> ExitCode {
    // The job launcher the runner starts for each job (see `edgerunner::isolation`): before
    // the command line is parsed, and without an async runtime.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|arg| arg == edgerunner::isolation::LAUNCHER_ARG)
    {
        return edgerunner::isolation::launcher_main(&args[2..]);
    }
    edgerunner::cli::main()
}
