//! What a job's process is given of the runner's environment: as little as it needs.
//!
//! The runner holds credentials a job must never see: the bootstrap token
//! (`EVALGATE_RUNNER_BOOTSTRAP_TOKEN`), API keys (`EDGERUNNER_API_KEY`,
//! `EDGERUNNER_EVIDENCE_API_KEY`), where its key and config files are, and in memory its session
//! credential and job-signing secret. A job's output is stored in its stream, which anyone with
//! `runs:read` reads back, so a job that prints its environment would hand those to them; and a
//! job's code is not the operator's to vouch for. So the job's process starts from an empty
//! environment ([`crate::exec`] clears it) and gets exactly:
//!
//! - `PATH`, `LANG`, `LC_*` and `TZ`, those of them the runner has;
//! - `TMPDIR` and `HOME`: a fresh `tmp` and `home` directory (`0700`) inside the job's own
//!   directory, removed with it: nothing one job leaves in its home or temp files reaches the
//!   next, even when all jobs run as one `--run-as` user;
//! - the job's values the runner sets: `EDGERUNNER_WORKDIR`, `EDGERUNNER_INPUT`,
//!   `EDGERUNNER_ARTIFACT`, `EDGERUNNER_JOB_ID`, `EDGERUNNER_CLAIM_ID`, `EDGERUNNER_ATTEMPT`;
//! - the variables the operator names (`--pass-env NAME`, `"passEnv"` in the config file), at
//!   most [`MAX_PASS_ENV`].
//!
//! No `EVALGATE_*` variable reaches a job: the protocol defines none for jobs, and in the
//! runner's environment they are its settings and its bootstrap token. Names in the runner's own
//! namespaces (`EVALGATE_*`, `EDGERUNNER_*`, any case) cannot be passed, nor `TMPDIR` and `HOME`,
//! which the runner sets; and a variable whose value holds one of the runner's credentials is refused
//! whatever its name (an operator's `CURL_AUTH="Bearer $EVALGATE_RUNNER_BOOTSTRAP_TOKEN"`).
//! All of this is decided once, when the runner starts ([`JobEnvironment::new`]); a refusal is a
//! usage error there, never a surprise in a job.
//!
//! This closes the environment, not the file system: a job runs as the runner's user unless
//! `--run-as` says otherwise, and can read any file that user can. That is why
//! [`check_files_outside`] refuses a config or key file inside the directory jobs start in. The
//! runner's own process is closed to its jobs too: `runner start` makes itself non-dumpable
//! (Linux), so a same-user job cannot read `/proc/<runner>/environ` or attach to it.

use core::fmt;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Variables a job gets from the runner's environment without being named (with `LC_*`).
pub const INHERITED: [&str; 3] = ["PATH", "LANG", "TZ"];

/// The most variables `--pass-env` and `"passEnv"` may name together.
pub const MAX_PASS_ENV: usize = 64;

/// The longest variable name `--pass-env` accepts, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// The runner's credentials by the names it reads them from (or names their files with).
pub const CREDENTIAL_NAMES: [&str; 6] = [
    "EVALGATE_RUNNER_BOOTSTRAP_TOKEN",
    "EDGERUNNER_API_KEY",
    "EDGERUNNER_EVIDENCE_API_KEY",
    "EDGERUNNER_ENROLLMENT_TOKEN",
    "EDGERUNNER_KEY_FILE",
    "EDGERUNNER_CONFIG",
];

/// Name prefixes that are the runner's own (compared without case).
const RESERVED_PREFIXES: [&str; 2] = ["EVALGATE_", "EDGERUNNER_"];

/// A credential shorter than this is not looked for inside other values: it would match by
/// chance, and real tokens and keys are far longer.
const MIN_SECRET_BYTES: usize = 8;

/// The variable names an operator chose to pass to jobs: checked, at most [`MAX_PASS_ENV`],
/// without repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassEnv(Vec<String>);

impl PassEnv {
    /// Checks each name ([`check_name`]) and the count; repeats are kept once.
    pub fn parse<I, S>(names: I) -> Result<Self, JobEnvError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kept: Vec<String> = Vec::new();
        for name in names {
            let name = name.as_ref();
            check_name(name)?;
            if !kept.iter().any(|k| k == name) {
                kept.push(name.to_owned());
            }
        }
        if kept.len() > MAX_PASS_ENV {
            return Err(JobEnvError::TooMany { count: kept.len() });
        }
        Ok(Self(kept))
    }

    pub fn names(&self) -> &[String] {
        &self.0
    }
}

/// A name `--pass-env` accepts: letters, digits and `_`, not starting with a digit, at most
/// [`MAX_NAME_BYTES`]; not the runner's own (`EVALGATE_*`, `EDGERUNNER_*`, `TMPDIR`, `HOME`).
pub fn check_name(name: &str) -> Result<(), JobEnvError> {
    let shaped = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if !shaped {
        return Err(JobEnvError::Malformed {
            name: name.chars().take(MAX_NAME_BYTES + 1).collect(),
        });
    }
    let upper = name.to_ascii_uppercase();
    if let Some(credential) = CREDENTIAL_NAMES.iter().find(|c| **c == upper) {
        return Err(JobEnvError::Credential {
            name: (*credential).to_owned(),
        });
    }
    if RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p))
        || upper == "TMPDIR"
        || upper == "HOME"
    {
        return Err(JobEnvError::Reserved {
            name: name.to_owned(),
        });
    }
    Ok(())
}

fn inherited(name: &str) -> bool {
    INHERITED.contains(&name) || (name.starts_with("LC_") && check_name(name).is_ok())
}

/// What every job of this runner gets from the runner's environment, decided at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobEnvironment {
    base: BTreeMap<String, OsString>,
    /// Names the operator passed that the runner's environment does not have.
    missing: Vec<String>,
}

impl JobEnvironment {
    /// Picks from `runner_env` (the runner's whole environment) what jobs get: the
    /// [`INHERITED`] variables and `LC_*`, and the names in `pass`. Refuses any picked variable
    /// whose value holds one of `credentials` (the runner's secrets as values: its bootstrap
    /// token, API keys, key file).
    pub fn new<I>(runner_env: I, pass: &PassEnv, credentials: &[&str]) -> Result<Self, JobEnvError>
    where
        I: IntoIterator<Item = (OsString, OsString)>,
    {
        let secrets: Vec<&[u8]> = credentials
            .iter()
            .map(|c| c.trim().as_bytes())
            .filter(|c| c.len() >= MIN_SECRET_BYTES)
            .collect();
        let mut base = BTreeMap::new();
        for (name, value) in runner_env {
            let Some(name) = name.to_str() else { continue };
            if !inherited(name) && !pass.names().iter().any(|p| p == name) {
                continue;
            }
            let bytes = value.as_encoded_bytes();
            if secrets
                .iter()
                .any(|secret| bytes.windows(secret.len()).any(|w| w == *secret))
            {
                return Err(JobEnvError::HoldsCredential {
                    name: name.to_owned(),
                });
            }
            base.insert(name.to_owned(), value);
        }
        let missing = pass
            .names()
            .iter()
            .filter(|name| !base.contains_key(name.as_str()))
            .cloned()
            .collect();
        Ok(Self { base, missing })
    }

    /// One job's whole environment: what [`JobEnvironment::new`] picked, `TMPDIR` = `tmp_dir`,
    /// `HOME` = `home_dir` (both the job's own), and the job's own values (`EDGERUNNER_*`), in
    /// name order.
    pub fn for_job(
        &self,
        tmp_dir: &Path,
        home_dir: &Path,
        job_values: Vec<(String, String)>,
    ) -> Vec<(String, OsString)> {
        let mut env = self.base.clone();
        env.insert("TMPDIR".to_owned(), tmp_dir.as_os_str().to_owned());
        env.insert("HOME".to_owned(), home_dir.as_os_str().to_owned());
        env.extend(job_values.into_iter().map(|(k, v)| (k, OsString::from(v))));
        env.into_iter().collect()
    }

    /// The names every job gets from the runner, for the start-up log (never the values).
    pub fn names(&self) -> Vec<&str> {
        self.base.keys().map(String::as_str).collect()
    }

    /// Names passed with `--pass-env` that the runner's environment does not have.
    pub fn missing(&self) -> &[String] {
        &self.missing
    }
}

/// Refuses when one of `files` (what, path) lies inside `start_dir`, where jobs start: a job
/// that archives or uploads its working directory would take the runner's credentials with it.
/// Files that do not exist are not checked.
pub fn check_files_outside(start_dir: &Path, files: &[(&str, &Path)]) -> Result<(), JobEnvError> {
    let Ok(start) = start_dir.canonicalize() else {
        return Ok(());
    };
    for (what, path) in files {
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        if real.starts_with(&start) {
            return Err(JobEnvError::FileInStartDir {
                what: (*what).to_owned(),
                path: real,
                start_dir: start,
            });
        }
    }
    Ok(())
}

/// Why the runner will not start jobs with the environment or files it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobEnvError {
    Malformed {
        name: String,
    },
    TooMany {
        count: usize,
    },
    /// One of [`CREDENTIAL_NAMES`].
    Credential {
        name: String,
    },
    /// In the runner's namespaces, or `TMPDIR` or `HOME`.
    Reserved {
        name: String,
    },
    /// Its value holds one of the runner's credentials.
    HoldsCredential {
        name: String,
    },
    FileInStartDir {
        what: String,
        path: PathBuf,
        start_dir: PathBuf,
    },
}

impl fmt::Display for JobEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { name } => write!(
                f,
                "--pass-env {name:?} is not a variable name (letters, digits and _, not \
                 starting with a digit, at most {MAX_NAME_BYTES} bytes)"
            ),
            Self::TooMany { count } => write!(
                f,
                "--pass-env and \"passEnv\" name {count} variables; at most {MAX_PASS_ENV} \
                 may be passed to jobs"
            ),
            Self::Credential { name } => write!(
                f,
                "--pass-env {name}: that is one of the runner's credentials, never given to a \
                 job (a job's output is readable by anyone with runs:read)"
            ),
            Self::Reserved { name } => write!(
                f,
                "--pass-env {name}: EVALGATE_* and EDGERUNNER_* are the runner's own settings \
                 and credentials, and the job values it sets itself, and it sets TMPDIR and HOME; pass \
                 the value under another name"
            ),
            Self::HoldsCredential { name } => write!(
                f,
                "the value of {name}, which jobs would get, holds one of the runner's \
                 credentials; unset it or stop passing it"
            ),
            Self::FileInStartDir {
                what,
                path,
                start_dir,
            } => write!(
                f,
                "the runner's {what} {} is inside {}, the directory jobs run in: a job could \
                 read or upload it with its working directory; start the runner from another \
                 directory, or move the file",
                path.display(),
                start_dir.display()
            ),
        }
    }
}

impl std::error::Error for JobEnvError {}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "erb_0123456789abcdefghij";
    const KEY: &str = "erk_9876543210zyxwvutsrq";

    fn runner_env(extra: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        let mut env = vec![
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/home/runner"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("LC_NUMERIC", "de_DE.UTF-8"),
            ("TZ", "Europe/Paris"),
            ("USER", "runner"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-agent"),
            ("EVALGATE_BASE_URL", "https://edge.example"),
            ("EVALGATE_RUNNER_ID", "run_1"),
            ("EVALGATE_RUNNER_BOOTSTRAP_TOKEN", TOKEN),
            ("EDGERUNNER_API_KEY", KEY),
            ("EDGERUNNER_EVIDENCE_API_KEY", KEY),
            (
                "EDGERUNNER_KEY_FILE",
                "/home/runner/.config/edgerunner/runner.key",
            ),
            ("TMPDIR", "/var/tmp"),
            ("MODEL_ENDPOINT", "https://model.example"),
        ];
        env.extend_from_slice(extra);
        env.into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn job(env: &JobEnvironment) -> BTreeMap<String, String> {
        env.for_job(
            Path::new("/srv/jobs/job-1/tmp"),
            Path::new("/srv/jobs/job-1/home"),
            vec![("EDGERUNNER_JOB_ID".into(), "job_1".into())],
        )
        .into_iter()
        .map(|(k, v)| (k, v.into_string().expect("UTF-8")))
        .collect()
    }

    #[test]
    fn a_job_gets_the_allowlist_its_tmpdir_and_its_values_and_nothing_else() {
        let env =
            JobEnvironment::new(runner_env(&[]), &PassEnv::default(), &[TOKEN, KEY]).expect("ok");
        let job = job(&env);
        let names: Vec<&str> = job.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "EDGERUNNER_JOB_ID",
                "HOME",
                "LANG",
                "LC_ALL",
                "LC_NUMERIC",
                "PATH",
                "TMPDIR",
                "TZ"
            ]
        );
        assert_eq!(
            job["TMPDIR"], "/srv/jobs/job-1/tmp",
            "not the runner's TMPDIR"
        );
        assert_eq!(job["HOME"], "/srv/jobs/job-1/home", "not the runner's HOME");
        assert_eq!(job["LC_NUMERIC"], "de_DE.UTF-8");
        assert_eq!(job["PATH"], "/usr/local/bin:/usr/bin:/bin");
        let all = format!("{job:?}");
        assert!(!all.contains(TOKEN) && !all.contains(KEY), "{all}");
        assert!(env.missing().is_empty());
    }

    #[test]
    fn only_the_allowlisted_variables_the_runner_has_are_given() {
        let sparse = vec![(OsString::from("PATH"), OsString::from("/bin"))];
        let env = JobEnvironment::new(sparse, &PassEnv::default(), &[]).expect("ok");
        assert_eq!(env.names(), ["PATH"]);
        assert_eq!(job(&env).len(), 4, "PATH, TMPDIR, HOME and the job's value");
    }

    #[test]
    fn pass_env_adds_exactly_the_named_variables() {
        let pass = PassEnv::parse(["MODEL_ENDPOINT", "NOT_SET_ANYWHERE"]).expect("valid");
        let env = JobEnvironment::new(runner_env(&[]), &pass, &[TOKEN, KEY]).expect("ok");
        let job = job(&env);
        assert_eq!(job["MODEL_ENDPOINT"], "https://model.example");
        assert!(!job.contains_key("USER") && !job.contains_key("SSH_AUTH_SOCK"));
        assert!(!job.contains_key("NOT_SET_ANYWHERE"));
        assert_eq!(env.missing(), ["NOT_SET_ANYWHERE"]);
    }

    #[test]
    fn pass_env_refuses_the_runners_credentials_and_namespaces_by_name() {
        for name in CREDENTIAL_NAMES {
            assert_eq!(
                PassEnv::parse([name]),
                Err(JobEnvError::Credential {
                    name: name.to_owned()
                }),
                "{name}"
            );
        }
        assert!(matches!(
            PassEnv::parse(["evalgate_runner_bootstrap_token"]),
            Err(JobEnvError::Credential { .. })
        ));
        for name in [
            "EVALGATE_BASE_URL",
            "EVALGATE_RUNNER_ID",
            "Evalgate_Anything",
            "EDGERUNNER_WORKDIR",
            "EDGERUNNER_JOB_ID",
            "TMPDIR",
            "HOME",
        ] {
            assert!(
                matches!(PassEnv::parse([name]), Err(JobEnvError::Reserved { .. })),
                "{name}"
            );
        }
        let shown = PassEnv::parse(["EVALGATE_RUNNER_BOOTSTRAP_TOKEN"])
            .expect_err("refused")
            .to_string();
        assert!(shown.contains("credential"), "{shown}");
        assert!(PassEnv::parse(["EVALGATE", "MY_EDGERUNNER_URL"]).is_ok());
    }

    #[test]
    fn pass_env_names_are_checked_for_shape_and_count() {
        for bad in ["", "1ABC", "A-B", "A B", "A=B", "Ä", "A\nB"] {
            assert!(
                matches!(PassEnv::parse([bad]), Err(JobEnvError::Malformed { .. })),
                "{bad:?}"
            );
        }
        let longest = "A".repeat(MAX_NAME_BYTES);
        assert!(PassEnv::parse([longest.as_str()]).is_ok());
        let over = "A".repeat(MAX_NAME_BYTES + 1);
        assert!(matches!(
            PassEnv::parse([over.as_str()]),
            Err(JobEnvError::Malformed { .. })
        ));

        let at_bound: Vec<String> = (0..MAX_PASS_ENV).map(|i| format!("VAR_{i}")).collect();
        assert_eq!(
            PassEnv::parse(&at_bound)
                .expect("at the bound")
                .names()
                .len(),
            MAX_PASS_ENV
        );
        let repeated: Vec<String> = at_bound.iter().chain(&at_bound).cloned().collect();
        assert!(PassEnv::parse(&repeated).is_ok(), "repeats count once");
        let past: Vec<String> = (0..=MAX_PASS_ENV).map(|i| format!("VAR_{i}")).collect();
        assert_eq!(
            PassEnv::parse(&past),
            Err(JobEnvError::TooMany {
                count: MAX_PASS_ENV + 1
            })
        );
    }

    #[test]
    fn a_passed_or_inherited_value_holding_a_credential_is_refused() {
        let pass = PassEnv::parse(["CURL_AUTH"]).expect("valid");
        let bearer = format!("Authorization: Bearer {TOKEN}");
        let refused = JobEnvironment::new(
            runner_env(&[("CURL_AUTH", bearer.as_str())]),
            &pass,
            &[TOKEN, KEY],
        );
        assert_eq!(
            refused,
            Err(JobEnvError::HoldsCredential {
                name: "CURL_AUTH".into()
            })
        );
        let lang = format!("C.{KEY}");
        let refused = JobEnvironment::new(
            runner_env(&[("LANG", lang.as_str())]),
            &PassEnv::default(),
            &[TOKEN, KEY],
        );
        assert!(matches!(refused, Err(JobEnvError::HoldsCredential { .. })));
        // The same variable without a credential in it passes; short "secrets" are not sought.
        let clean = runner_env(&[("CURL_AUTH", "Authorization: Bearer mine")]);
        assert!(JobEnvironment::new(clean.clone(), &pass, &[TOKEN, KEY]).is_ok());
        assert!(JobEnvironment::new(clean, &pass, &["bin", ""]).is_ok());
    }

    #[test]
    fn a_config_or_key_file_inside_the_start_dir_is_refused() {
        let dir = tempfile::tempdir().expect("scratch");
        let project = dir.path().join("project");
        let config_dir = dir.path().join("config");
        std::fs::create_dir_all(project.join("nested")).expect("dirs");
        std::fs::create_dir_all(&config_dir).expect("dirs");
        let inside = project.join("nested").join("runner.key");
        let outside = config_dir.join("runner.json");
        std::fs::write(&inside, "key").expect("file");
        std::fs::write(&outside, "{}").expect("file");

        assert_eq!(
            check_files_outside(&project, &[("config file", &outside)]),
            Ok(())
        );
        let error = check_files_outside(
            &project,
            &[("config file", &outside), ("key file", &inside)],
        )
        .expect_err("inside");
        assert!(matches!(&error, JobEnvError::FileInStartDir { what, .. } if what == "key file"));
        assert!(error.to_string().contains("runner.key"), "{error}");
        // A path that reaches inside through `..` is the same file.
        let dotted = config_dir
            .join("..")
            .join("project")
            .join("nested")
            .join("runner.key");
        assert!(check_files_outside(&project, &[("key file", &dotted)]).is_err());
        // Starting in a parent of the config directory counts too; a missing file is not there.
        assert!(check_files_outside(dir.path(), &[("config file", &outside)]).is_err());
        assert_eq!(
            check_files_outside(dir.path(), &[("config file", &dir.path().join("absent"))]),
            Ok(())
        );
    }
}
