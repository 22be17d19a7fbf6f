//! Where jobs run: one private directory per runner process, one per job inside it, and job
//! files only their owner can read.
//!
//! Both directories come from [`tempfile`], which makes them as `mkdtemp` does: a random name,
//! created in one step that fails if anything already has that name (it then tries another),
//! here with mode `0700`. So no other local user can pre-create one, read a job's input, or
//! swap `input.json` between the hash check and the command reading it. What `tempfile` does
//! not give is added here: the parent is refused when anyone may write to it without the sticky
//! bit (there another user could rename our directory away and put theirs in its place), and
//! each job file has a fixed name, so it is created new with mode `0600` and `O_NOFOLLOW`: a
//! planted file or symbolic link makes the write fail instead of being written through.
//!
//! The crate is Unix-only (process groups, signals, owner-only key files), as is this module.

use core::fmt;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::TempDir;

/// Random characters in a directory name: 16 of `[A-Za-z0-9]`, about 95 bits.
const RANDOM_CHARS: usize = 16;

fn private_dir<'a, 'b>() -> tempfile::Builder<'a, 'b> {
    let mut builder = tempfile::Builder::new();
    builder
        .rand_bytes(RANDOM_CHARS)
        .permissions(Permissions::from_mode(0o700));
    builder
}

/// The runner's own work directory, made private and fresh by [`RunnerWorkDir::create_in`]:
/// the only way to get one, so a worker never runs jobs in a directory someone else made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerWorkDir(PathBuf);

impl RunnerWorkDir {
    /// Makes `<parent>/edgerunner-<random>` with mode `0700`. `parent` is made (owner-only)
    /// when missing; an existing `parent` that anyone may write to without the sticky bit is
    /// refused.
    pub fn create_in(parent: &Path) -> Result<Self, WorkDirError> {
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
        // Kept on drop: job directories kept with --keep-work live in it
        // (see [`RunnerWorkDir::remove_if_empty`]).
        let dir = private_dir()
            .prefix("edgerunner-")
            .disable_cleanup(true)
            .tempdir_in(parent)
            .map_err(io)?;
        Ok(Self(dir.keep()))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Makes a fresh job directory `<name>-<random>` (mode `0700`) inside; it is removed when
    /// the [`JobDir`] is dropped, unless kept with [`JobDir::keep`].
    pub fn create_job_dir(&self, name: &str) -> io::Result<JobDir> {
        let prefix = format!("{name}-");
        private_dir()
            .prefix(&prefix)
            .tempdir_in(&self.0)
            .map(JobDir)
    }

    /// Lets other users pass through (mode `0711`) but not list the directory: a job run as
    /// another user (`--run-as`) reaches its own directory, whose random name it is given,
    /// and no other.
    pub fn allow_passing_through(&self) -> io::Result<()> {
        fs::set_permissions(&self.0, Permissions::from_mode(0o711))
    }

    /// Removes the runner's directory if it is empty (a job directory still in it was kept
    /// on purpose).
    pub fn remove_if_empty(&self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// One job's private directory, removed with everything in it when dropped.
#[derive(Debug)]
pub struct JobDir(TempDir);

impl JobDir {
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Writes the new file `name` inside, owner-only (see [`write_private_file`]); returns its
    /// path.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let path = self.path().join(name);
        write_private_file(&path, bytes)?;
        Ok(path)
    }

    /// Makes the new directory `name` inside, owner-only (`0700`); fails if anything exists
    /// there. Returns its path.
    pub fn create_dir(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.path().join(name);
        DirBuilder::new().mode(0o700).create(&path)?;
        Ok(path)
    }

    /// Gives the directory and what is directly in it (what the runner wrote: the job's files
    /// and `tmp`) to `uid`/`gid`, for a job run as that user.
    pub fn hand_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        std::os::unix::fs::chown(self.path(), Some(uid), Some(gid))?;
        for entry in fs::read_dir(self.path())? {
            std::os::unix::fs::lchown(entry?.path(), Some(uid), Some(gid))?;
        }
        Ok(())
    }

    /// Leaves the directory in place; returns where it is.
    pub fn keep(self) -> PathBuf {
        self.0.keep()
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
        }
    }
}

impl std::error::Error for WorkDirError {}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn scratch() -> TempDir {
        tempfile::tempdir().expect("scratch")
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
        let scratch = scratch();
        let first = RunnerWorkDir::create_in(scratch.path()).expect("made");
        let second = RunnerWorkDir::create_in(scratch.path()).expect("made");
        assert_ne!(first, second, "each runner gets its own name");
        for dir in [&first, &second] {
            assert_eq!(dir.path().parent(), Some(scratch.path()));
            assert!(fs::symlink_metadata(dir.path()).expect("exists").is_dir());
            assert_eq!(mode(dir.path()), 0o700);
            let name = dir.path().file_name().expect("named").to_string_lossy();
            let suffix = name.strip_prefix("edgerunner-").expect("prefix");
            assert_eq!(suffix.len(), RANDOM_CHARS, "{name}");
            assert!(suffix.bytes().all(|b| b.is_ascii_alphanumeric()), "{name}");
        }
    }

    #[test]
    fn a_missing_parent_is_made_owner_only() {
        let scratch = scratch();
        let parent = scratch.path().join("a").join("b");
        let dir = RunnerWorkDir::create_in(&parent).expect("made");
        assert_eq!(mode(&parent) & 0o077, 0);
        assert_eq!(mode(dir.path()), 0o700);
    }

    #[test]
    fn a_world_writable_parent_without_the_sticky_bit_is_refused() {
        let scratch = scratch();
        let shared = scratch.path().join("shared");
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
    fn a_job_directory_is_private_fresh_and_removed_unless_kept() {
        let scratch = scratch();
        let runner = RunnerWorkDir::create_in(scratch.path()).expect("made");
        let job = runner.create_job_dir("job_1-1").expect("made");
        let again = runner.create_job_dir("job_1-1").expect("made");
        assert_ne!(job.path(), again.path(), "never the same directory twice");
        assert_eq!(mode(job.path()), 0o700);
        assert_eq!(job.path().parent(), Some(runner.path()));
        let name = job.path().file_name().expect("named").to_string_lossy();
        assert!(name.starts_with("job_1-1-"), "{name}");
        let input = job.write_file("input.json", b"{}").expect("written");
        assert_eq!(mode(&input), 0o600);

        let removed = job.path().to_owned();
        drop(job);
        assert!(!removed.exists(), "removed with its files");
        let kept = again.keep();
        assert!(kept.is_dir());
        runner.remove_if_empty();
        assert!(
            runner.path().is_dir(),
            "a kept job keeps the runner's directory"
        );
        fs::remove_dir(&kept).expect("emptied");
        runner.remove_if_empty();
        assert!(!runner.path().exists());
    }

    #[test]
    fn job_files_are_owner_only_and_never_replace_what_is_there() {
        let scratch = scratch();
        let path = scratch.path().join("input.json");
        write_private_file(&path, b"{}").expect("written");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(fs::read(&path).expect("readable"), b"{}");
        let again = write_private_file(&path, b"[]").expect_err("exists");
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).expect("readable"), b"{}", "unchanged");
    }

    #[test]
    fn a_job_file_where_a_symlink_was_planted_fails_and_the_target_is_untouched() {
        let scratch = scratch();
        let target = scratch.path().join("victim");
        fs::write(&target, "precious").expect("written");
        let planted = scratch.path().join("artifact.json");
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

        let dangling = scratch.path().join("input.json");
        let absent = scratch.path().join("would-be-created");
        symlink(&absent, &dangling).expect("planted");
        write_private_file(&dangling, b"{}").expect_err("a dangling link is refused too");
        assert!(!absent.exists(), "nothing was created through the link");
    }
}
