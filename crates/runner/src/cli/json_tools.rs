//! `edgerunner stable-json` and `edgerunner hash`: stable JSON and `H` of documents on stdin.
//!
//! Both take a hidden `--lines` flag for bulk checks (the SDK interop corpus): every input line
//! is one document, every output line one answer. Invalid input exits 1.

use std::io::{BufRead, Write};

use edgerunner_protocol::stable_json::{hash, stable_json};
use serde_json::Value;

use super::CliError;

/// What to print for each document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    StableJson,
    Hash,
}

/// How many documents stdin holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// All of stdin is one document.
    Document,
    /// Each line of stdin is one document (`--lines`).
    Lines,
}

/// Reads documents from `input` and writes one answer per document to `output`.
pub fn run(
    render: Render,
    input_kind: Input,
    mut input: impl BufRead,
    output: &mut impl Write,
) -> Result<(), CliError> {
    let render: fn(&Value) -> String = match render {
        Render::StableJson => stable_json,
        Render::Hash => |value| hash(value).to_string(),
    };
    let mut text = String::new();
    input
        .read_to_string(&mut text)
        .map_err(|error| CliError::Input(format!("cannot read stdin as UTF-8: {error}")))?;
    let documents: Vec<(Option<usize>, &str)> = match input_kind {
        Input::Lines => {
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
        Input::Document => vec![(None, text.as_str())],
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(render: Render, input_kind: Input, input: &str) -> Result<String, CliError> {
        let mut output = Vec::new();
        run(render, input_kind, input.as_bytes(), &mut output)?;
        Ok(String::from_utf8(output).expect("UTF-8 output"))
    }

    #[test]
    fn prints_stable_json_of_one_document() {
        let output = run_on(
            Render::StableJson,
            Input::Document,
            "{ \"b\": 1e-07, \"a\": [1.0, \"\\u00e9\"] }\n",
        );
        assert_eq!(
            output.ok(),
            Some("{\"a\":[1.0,\"é\"],\"b\":1e-07}\n".to_owned())
        );
    }

    #[test]
    fn prints_the_hash_of_one_document() {
        assert_eq!(
            run_on(Render::Hash, Input::Document, "{}").ok(),
            Some("44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n".to_owned())
        );
    }

    #[test]
    fn refuses_invalid_or_trailing_input() {
        for input in ["", "{", "{} {}", "NaN", "[1,]", "\"\\ud800\""] {
            assert!(
                matches!(
                    run_on(Render::Hash, Input::Document, input),
                    Err(CliError::InvalidJson(_))
                ),
                "{input:?}"
            );
        }
    }

    #[test]
    fn lines_mode_answers_one_line_per_document() {
        let output = run_on(
            Render::StableJson,
            Input::Lines,
            "{\"b\":1,\"a\":2}\n[]\n\"x\"\n",
        );
        assert_eq!(
            output.ok(),
            Some("{\"a\":2,\"b\":1}\n[]\n\"x\"\n".to_owned())
        );
        assert_eq!(
            run_on(Render::Hash, Input::Lines, "").ok(),
            Some(String::new())
        );
        match run_on(Render::Hash, Input::Lines, "{}\n\n{}\n") {
            Err(CliError::InvalidJson(message)) => assert_eq!(
                message,
                "line 2: EOF while parsing a value at line 1 column 0"
            ),
            other => panic!("expected invalid JSON, got {other:?}"),
        }
    }
}
