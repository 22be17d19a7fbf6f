//! The `edgerunner` command line.
//!
//! Parsing ([`Command::from_args`]) is separate from running ([`run`]) so that a derive-based
//! parser can replace the hand-written one without touching the subcommands, and so that the
//! subcommands run in tests against in-memory streams.
//!
//! Subcommands:
//! - `edgerunner stable-json`: reads one JSON document on stdin, prints its stable JSON.
//! - `edgerunner hash`: reads one JSON document on stdin, prints `H` of it.
//!
//! Both take a hidden `--lines` flag for bulk checks (the SDK interop corpus): every input line
//! is one document, every output line one answer. Exit status: 0 on success, 1 on invalid
//! input, 2 on a usage error.

use core::fmt;
use std::io::{BufRead, Write};

use edgerunner_protocol::stable_json::{hash, stable_json};
use serde_json::Value;

pub const USAGE: &str = "\
usage: edgerunner <command>

commands:
  stable-json   read one JSON document on stdin, print its stable JSON
  hash          read one JSON document on stdin, print H (SHA-256 of its stable JSON)
  help          print this message";

/// How many documents stdin holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// All of stdin is one document.
    Document,
    /// Each line of stdin is one document (`--lines`).
    Lines,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    StableJson(Input),
    Hash(Input),
    Help,
}

impl Command {
    /// Parses the arguments after the program name.
    pub fn from_args<I, S>(args: I) -> Result<Self, UsageError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut args = args.into_iter().map(Into::into);
        let Some(name) = args.next() else {
            return Err(UsageError("no command given".into()));
        };
        let rest: Vec<String> = args.collect();
        let input = || match rest.as_slice() {
            [] => Ok(Input::Document),
            [flag] if flag == "--lines" => Ok(Input::Lines),
            [other, ..] => Err(UsageError(format!(
                "unexpected argument {other:?} to {name}"
            ))),
        };
        match name.as_str() {
            "stable-json" => Ok(Self::StableJson(input()?)),
            "hash" => Ok(Self::Hash(input()?)),
            "help" | "--help" | "-h" => Ok(Self::Help),
            other => Err(UsageError(format!("unknown command {other:?}"))),
        }
    }

    /// The subcommand's name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::StableJson(_) => "stable-json",
            Self::Hash(_) => "hash",
            Self::Help => "help",
        }
    }
}

/// Runs `command`, reading documents from `input` and writing answers to `output`.
pub fn run(
    command: &Command,
    mut input: impl BufRead,
    output: &mut impl Write,
) -> Result<(), CliError> {
    let render: fn(&Value) -> String = match command {
        Command::Help => {
            return writeln!(output, "{USAGE}")
                .map_err(|error| CliError::Output(error.to_string()));
        }
        Command::StableJson(_) => stable_json,
        Command::Hash(_) => |value| hash(value).to_string(),
    };
    let mut text = String::new();
    input
        .read_to_string(&mut text)
        .map_err(|error| CliError::Input(format!("cannot read stdin as UTF-8: {error}")))?;
    let documents: Vec<(Option<usize>, &str)> = match command {
        Command::StableJson(Input::Lines) | Command::Hash(Input::Lines) => {
            // A final newline ends the last document; it does not start an empty one.
            let body = text.strip_suffix('\n').unwrap_or(&text);
            if body.is_empty() {
                Vec::new()
            } else {
                body.split('\n')
                    .enumerate()
                    .map(|(index, line)| (Some(index + 1), line))
                    .collect()
            }
        }
        _ => vec![(None, text.as_str())],
    };
    for (line, document) in documents {
        let value: Value = serde_json::from_str(document).map_err(|error| match line {
            Some(line) => CliError::InvalidJson(format!("line {line}: {error}")),
            None => CliError::InvalidJson(error.to_string()),
        })?;
        writeln!(output, "{}", render(&value))
            .map_err(|error| CliError::Output(error.to_string()))?;
    }
    Ok(())
}

/// The arguments do not name a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CliError {
    InvalidJson(String),
    Input(String),
    Output(String),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        1
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidJson(detail) => write!(f, "invalid JSON: {detail}"),
            Self::Input(detail) => f.write_str(detail),
            Self::Output(detail) => write!(f, "cannot write output: {detail}"),
        }
    }
}

impl std::error::Error for CliError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(command: Command, input: &str) -> Result<String, CliError> {
        let mut output = Vec::new();
        run(&command, input.as_bytes(), &mut output)?;
        Ok(String::from_utf8(output).expect("UTF-8 output"))
    }

    #[test]
    fn parses_commands_and_the_lines_flag() {
        assert_eq!(
            Command::from_args(["hash"]),
            Ok(Command::Hash(Input::Document))
        );
        assert_eq!(
            Command::from_args(["stable-json", "--lines"]),
            Ok(Command::StableJson(Input::Lines))
        );
        assert_eq!(Command::from_args(["--help"]), Ok(Command::Help));
        assert!(Command::from_args(Vec::<String>::new()).is_err());
        assert!(Command::from_args(["hash", "--bogus"]).is_err());
        assert!(Command::from_args(["hash", "--lines", "x"]).is_err());
        assert!(Command::from_args(["sign"]).is_err());
    }

    #[test]
    fn prints_stable_json_of_one_document() {
        let output = run_on(
            Command::StableJson(Input::Document),
            "{ \"b\": 1e-07, \"a\": [1.0, \"\\u00e9\"] }\n",
        );
        assert_eq!(output, Ok("{\"a\":[1.0,\"é\"],\"b\":1e-07}\n".to_owned()));
    }

    #[test]
    fn prints_the_hash_of_one_document() {
        assert_eq!(
            run_on(Command::Hash(Input::Document), "{}"),
            Ok("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n".to_owned())
        );
    }

    #[test]
    fn refuses_invalid_or_trailing_input() {
        for input in ["", "{", "{} {}", "NaN", "[1,]", "\"\\ud800\""] {
            assert!(
                matches!(
                    run_on(Command::Hash(Input::Document), input),
                    Err(CliError::InvalidJson(_))
                ),
                "{input:?}"
            );
        }
    }

    #[test]
    fn lines_mode_answers_one_line_per_document() {
        let output = run_on(
            Command::StableJson(Input::Lines),
            "{\"b\":1,\"a\":2}\n[]\n\"x\"\n",
        );
        assert_eq!(output, Ok("{\"a\":2,\"b\":1}\n[]\n\"x\"\n".to_owned()));
        assert_eq!(run_on(Command::Hash(Input::Lines), ""), Ok(String::new()));
        assert_eq!(
            run_on(Command::Hash(Input::Lines), "{}\n\n{}\n"),
            Err(CliError::InvalidJson(
                "line 2: EOF while parsing a value at line 1 column 0".into()
            ))
        );
    }
}
