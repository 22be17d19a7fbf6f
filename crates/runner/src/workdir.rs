//! Where jobs run: one private directory per runner process, one per job inside it, and job
//! files only their owner can read.
//!
//! The runner's directory is made as `mkdtemp` makes one: a name nobody can predict, created
//! in one step that fails if anything already has that name, mode `0700`. So no other local
//! user can pre-create it, read a job's input, or swap `input.json` between the hash check and
//! the command reading it. Each job's directory is created inside it (again failing rather than
//! reusing a path), and each job file is created new with mode `0600` and `O_NOFOLLOW`, so a
//! planted file or symbolic link makes the write fail instead of being written through.
//!
//! The crate is Unix-only (process groups, signals, owner-only key files), as is this module.

use core::fmt;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How many names are tried before giving up. Each is 64 random bits, so a collision is
/// already someone trying to race us; a few tries are plenty.
const ATTEMPTS: u32 = 16;

/// The runner's own work directory, made private and fresh by [`RunnerWorkDir::create_in`]:
/// the only way to get one, so a worker never runs jobs in a directory someone else made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerWorkDir(PathBuf);

impl RunnerWorkDir {
    /// Makes `<parent>/edgerunner-<random>` with mode `0700`. `parent` is made (owner-only)
    /// when missing; an existing `parent` that anyone may write to without the sticky bit is
    /// refused, since there another user could rename our directory away and put theirs in
    /// its place.
    pub fn create_in(parent: &Path) -> Result<Self, WorkDirError> {
        Self::create_named(parent, || {
            let mut suffix = [0u8; 8];
            getrandom::fill(&mut suffix)
                .map_err(|error| WorkDirError::Random(error.to_string()))?;
            Ok(format!("edgerunner-{}", hex::encode(suffix)))
        })
    }

    /// [`RunnerWorkDir::create_in`] with the names to try given (the random source, passed in
    /// so tests can make names collide).
    fn create_named(
        parent: &Path,
        mut next_name: impl FnMut() -> Result<String, WorkDirError>,
    ) -> Result<Self, WorkDirError> {
        let io = |error: io::Error| WorkDirError::Io {
            path: parent.to_owned(),
            detail: error.to_string(),
        };
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io)?;
        let mode = fs::metadata(parent).map_err(io)?.permissions().mode();
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(WorkDirError::Shared {
                path: parent.to_owned(),
                mode: mode & 0o7777,
            });
        }
        for _ in 0..ATTEMPTS {
            let path = parent.join(next_name()?);
            match DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self(path)),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(error) => return Err(io(error)),
            }
        }
        Err(WorkDirError::Exhausted {
            path: parent.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Makes the job directory `name` (mode `0700`) inside; fails if anything has that name.
    pub fn create_job_dir(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.0.join(name);
        DirBuilder::new().mode(0o700).create(&path)?;
        Ok(path)
    }

    /// Removes the runner's directory if it is empty (a job directory still in it was kept
    /// on purpose).
    pub fn remove_if_empty(&self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// Writes a new file at `path`, mode `0600`. Fails if anything exists there, a symbolic link
/// included (`O_EXCL` and `O_NOFOLLOW`): the link's target is never opened.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
}

/// Why the runner has no work directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkDirError {
    Io {
        path: PathBuf,
        detail: String,
    },
    /// World-writable without the sticky bit.
    Shared {
        path: PathBuf,
        mode: u32,
    },
    /// Every name tried was taken.
    Exhausted {
        path: PathBuf,
    },
    Random(String),
}

impl fmt::Display for WorkDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, detail } => {
                write!(
                    f,
                    "cannot make a work directory in {}: {detail}",
                    path.display()
                )
            }
            Self::Shared { path, mode } => write!(
                f,
                "{} (mode {mode:o}) is writable by every user without the sticky bit: another \
                 user could replace the runner's work directory there; choose another \
                 --work-dir, or `chmod +t` it",
                path.display()
            ),
            Self::Exhausted { path } => write!(
                f,
                "cannot make a work directory in {}: {ATTEMPTS} fresh names were all taken",
                path.display()
            ),
            Self::Random(detail) => write!(f, "no random source for a work directory: {detail}"),
        }
    }
}

impl std::error::Error for WorkDirError {}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A parent for one test, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).expect("random");
            let path = std::env::temp_dir().join(format!("edgerunner-test-{}", hex::encode(bytes)));
            DirBuilder::new()
                .mode(0o700)
                .create(&path)
                .expect("scratch");
            Self(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path)
            .expect("exists")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn the_runner_directory_is_fresh_private_and_unpredictable() {
        let scratch = Scratch::new();
        let first = RunnerWorkDir::create_in(&scratch.0).expect("made");
        let second = RunnerWorkDir::create_in(&scratch.0).expect("made");
        assert_ne!(first, second, "each runner gets its own name");
        for dir in [&first, &second] {
            assert_eq!(dir.path().parent(), Some(scratch.0.as_path()));
            assert!(fs::symlink_metadata(dir.path()).expect("exists").is_dir());
            assert_eq!(mode(dir.path()), 0o700);
            let name = dir.path().file_name().expect("named").to_string_lossy();
            let suffix = name.strip_prefix("edgerunner-").expect("prefix");
            assert_eq!(suffix.len(), 16, "64 random bits: {name}");
            assert!(suffix.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
            assert_ne!(name, format!("edgerunner-{}", std::process::id()));
        }
    }

    #[test]
    fn an_existing_name_is_never_reused_and_a_new_one_is_tried() {
        let scratch = Scratch::new();
        let taken_dir = scratch.0.join("edgerunner-taken");
        DirBuilder::new()
            .mode(0o777)
            .create(&taken_dir)
            .expect("planted");
        let victim = scratch.0.join("victim");
        DirBuilder::new().create(&victim).expect("made");
        let taken_link = scratch.0.join("edgerunner-link");
        symlink(&victim, &taken_link).expect("planted");

        let mut names = ["edgerunner-taken", "edgerunner-link", "edgerunner-free"].into_iter();
        let dir = RunnerWorkDir::create_named(&scratch.0, || {
            Ok(names.next().expect("at most three tries").to_owned())
        })
        .expect("the free name");
        assert_eq!(dir.path(), scratch.0.join("edgerunner-free"));
        assert_eq!(mode(dir.path()), 0o700);
        assert!(fs::symlink_metadata(&taken_link)
            .expect("still there")
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_dir(&victim).expect("readable").count(), 0);

        let mut tries = 0;
        let error = RunnerWorkDir::create_named(&scratch.0, || {
            tries += 1;
            Ok("edgerunner-taken".to_owned())
        })
        .expect_err("every name taken");
        assert!(matches!(error, WorkDirError::Exhausted { .. }), "{error}");
        assert_eq!(tries, ATTEMPTS);
    }

    #[test]
    fn a_missing_parent_is_made_owner_only() {
        let scratch = Scratch::new();
        let parent = scratch.0.join("a").join("b");
        let dir = RunnerWorkDir::create_in(&parent).expect("made");
        assert_eq!(mode(&parent) & 0o077, 0);
        assert_eq!(mode(dir.path()), 0o700);
    }

    #[test]
    fn a_world_writable_parent_without_the_sticky_bit_is_refused() {
        let scratch = Scratch::new();
        let shared = scratch.0.join("shared");
        DirBuilder::new().mode(0o700).create(&shared).expect("made");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("chmod");
        let error = RunnerWorkDir::create_in(&shared).expect_err("refused");
        assert!(matches!(error, WorkDirError::Shared { mode: 0o777, .. }));
        assert!(error.to_string().contains("sticky bit"), "{error}");
        assert_eq!(
            fs::read_dir(&shared).expect("readable").count(),
            0,
            "nothing was made there"
        );
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).expect("chmod");
        let dir = RunnerWorkDir::create_in(&shared).expect("a sticky /tmp-like parent is fine");
        assert_eq!(mode(dir.path()), 0o700);
    }

    #[test]
    fn a_job_directory_is_private_and_never_reused() {
        let scratch = Scratch::new();
        let runner = RunnerWorkDir::create_in(&scratch.0).expect("made");
        let job = runner.create_job_dir("job_1-1").expect("made");
        assert_eq!(mode(&job), 0o700);
        let again = runner.create_job_dir("job_1-1").expect_err("exists");
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);

        let elsewhere = scratch.0.join("elsewhere");
        DirBuilder::new().create(&elsewhere).expect("made");
        symlink(&elsewhere, runner.path().join("job_2-1")).expect("planted");
        let planted = runner
            .create_job_dir("job_2-1")
            .expect_err("a link is not reused");
        assert_eq!(planted.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn job_files_are_owner_only_and_never_replace_what_is_there() {
        let scratch = Scratch::new();
        let path = scratch.0.join("input.json");
        write_private_file(&path, b"{}").expect("written");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(fs::read(&path).expect("readable"), b"{}");
        let again = write_private_file(&path, b"[]").expect_err("exists");
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).expect("readable"), b"{}", "unchanged");
    }

    #[test]
    fn a_job_file_where_a_symlink_was_planted_fails_and_the_target_is_untouched() {
        let scratch = Scratch::new();
        let target = scratch.0.join("victim");
        fs::write(&target, "precious").expect("written");
        let planted = scratch.0.join("artifact.json");
        symlink(&target, &planted).expect("planted");
        let error = write_private_file(&planted, b"attacker-chosen").expect_err("refused");
        // O_CREAT | O_EXCL refuses any existing name, a link included (EEXIST); O_NOFOLLOW
        // alone would say ELOOP.
        assert!(
            error.kind() == io::ErrorKind::AlreadyExists
                || error.raw_os_error() == Some(nix::libc::ELOOP),
            "{error:?}"
        );
        assert_eq!(fs::read_to_string(&target).expect("readable"), "precious");

        let dangling = scratch.0.join("input.json");
        let absent = scratch.0.join("would-be-created");
        symlink(&absent, &dangling).expect("planted");
        write_private_file(&dangling, b"{}").expect_err("a dangling link is refused too");
        assert!(!absent.exists(), "nothing was created through the link");
    }
}
