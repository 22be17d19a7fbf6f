//! `edgerunner`: see [`edgerunner::cli`] for the subcommands.

use std::io::{self, Write};
use std::process::ExitCode;

use edgerunner::cli::{self, Command};

fn main() -> ExitCode {
    let command = match Command::from_args(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(error) => {
            eprintln!("edgerunner: {error}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    let stdin = io::stdin().lock();
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    let outcome = cli::run(&command, stdin, &mut stdout).and_then(|()| {
        stdout
            .flush()
            .map_err(|error| cli::CliError::Output(error.to_string()))
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("edgerunner {}: {error}", command.name());
            ExitCode::from(error.exit_code())
        }
    }
}
