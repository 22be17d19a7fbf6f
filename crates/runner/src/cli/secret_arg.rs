//! Where a command takes a secret from: its environment variable, or a file a flag names (`-`
//! for standard input). Never from a flag's value: every process on the host can read every
//! other's arguments (`/proc/PID/cmdline` is world-readable), a runner's jobs included, under
//! any user. A flag that used to take the value itself is refused with the way to give it
//! instead, rather than silently accepted.

use std::io::Read;
use std::path::Path;

use super::CliError;

/// The most a secret file may hold: far past any token or key this tool knows, and a bound on
/// what a mistaken path (a log, a device) makes it read.
pub const MAX_SECRET_FILE_BYTES: u64 = 4_096;

/// One secret a command takes.
#[derive(Debug, Clone, Copy)]
pub struct Secret {
    /// The flag that once took the value (`--bootstrap-token`); `--…-file` names a file.
    pub flag: &'static str,
    /// The environment variable that holds the value.
    pub env: &'static str,
}

impl Secret {
    /// The secret: read from `file` when one is named, else from the environment variable;
    /// `None` when neither gives one. A value given to the old flag (`given`) is refused.
    pub fn read(
        &self,
        file: Option<&Path>,
        given: Option<&str>,
    ) -> Result<Option<String>, CliError> {
        if given.is_some() {
            return Err(self.refused());
        }
        match file {
            Some(path) => read_file(self.flag, path).map(Some),
            None => Ok(std::env::var(self.env)
                .ok()
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())),
        }
    }

    /// Why the old flag is refused, and what to use instead.
    pub fn refused(&self) -> CliError {
        CliError::Usage(format!(
            "{flag} VALUE would put the secret in the process list, which every local user and \
             every job can read; set {env} or pass {flag}-file FILE (`-` for standard input)",
            flag = self.flag,
            env = self.env,
        ))
    }
}

/// The secret in `path` (`-`: standard input), whitespace around it trimmed; at most
/// [`MAX_SECRET_FILE_BYTES`], and not empty.
fn read_file(flag: &str, path: &Path) -> Result<String, CliError> {
    let shown = path.display();
    let mut bytes = Vec::new();
    let limit = MAX_SECRET_FILE_BYTES + 1;
    let read = if path == Path::new("-") {
        std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|file| file.take(limit).read_to_end(&mut bytes))
    };
    read.map_err(|error| CliError::Input(format!("{flag}-file {shown}: {error}")))?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(CliError::Input(format!(
            "{flag}-file {shown}: more than {MAX_SECRET_FILE_BYTES} bytes; is it the right file?"
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| CliError::Input(format!("{flag}-file {shown}: not UTF-8 text")))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(CliError::Input(format!("{flag}-file {shown}: empty")));
    }
    Ok(secret.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: Secret = Secret {
        flag: "--bootstrap-token",
        env: "EDGERUNNER_TEST_SECRET_ARG_UNSET",
    };

    fn file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("a temp file");
        std::io::Write::write_all(&mut file, bytes).expect("written");
        file
    }

    #[test]
    fn a_value_given_to_the_old_flag_is_refused_with_the_ways_to_give_it() {
        let refused = TOKEN.read(None, Some("erb_secret")).unwrap_err();
        let CliError::Usage(message) = refused else {
            panic!("not a usage error: {refused:?}");
        };
        assert!(
            message.contains("EDGERUNNER_TEST_SECRET_ARG_UNSET"),
            "{message}"
        );
        assert!(message.contains("--bootstrap-token-file"), "{message}");
        assert!(!message.contains("erb_secret"), "{message}");
    }

    #[test]
    fn a_file_gives_its_trimmed_text() {
        let file = file_with(b"  erb_abc\n");
        assert_eq!(
            TOKEN.read(Some(file.path()), None).unwrap().as_deref(),
            Some("erb_abc")
        );
    }

    #[test]
    fn an_empty_oversized_or_binary_file_is_refused() {
        for bytes in [
            &b"\n \n"[..],
            &[b'x'; MAX_SECRET_FILE_BYTES as usize + 1][..],
            &[0xff, 0xfe][..],
        ] {
            let file = file_with(bytes);
            let refused = TOKEN.read(Some(file.path()), None).unwrap_err();
            assert!(matches!(refused, CliError::Input(_)), "{refused:?}");
        }
        let at_limit = file_with(&[b'x'; MAX_SECRET_FILE_BYTES as usize]);
        assert!(TOKEN.read(Some(at_limit.path()), None).is_ok());
    }

    #[test]
    fn a_missing_file_names_the_flag_and_the_path() {
        let refused = TOKEN
            .read(Some(Path::new("/nonexistent/token")), None)
            .unwrap_err();
        let CliError::Input(message) = refused else {
            panic!("{refused:?}");
        };
        assert!(
            message.starts_with("--bootstrap-token-file /nonexistent/token"),
            "{message}"
        );
    }

    #[test]
    fn without_a_file_or_the_variable_there_is_none() {
        assert_eq!(TOKEN.read(None, None).unwrap(), None);
    }
}
