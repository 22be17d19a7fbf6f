//! Where jobs run: one private directory per runner process, one per job inside it, and job
//! files only their owner can read.
//!
//! Both directories get a random name (16 of `[A-Za-z0-9]`, about 95 bits) and are made with
//! `mkdirat` in one step that fails if anything already has that name (then another name is
//! tried), mode `0700`. So no other local user can pre-create one, read a job's input, or swap
//! `input.json` between the hash check and the command reading it.
//!
//! Everything after that goes **by handle, not by path**: the runner's directory is opened once
//! (`O_DIRECTORY | O_NOFOLLOW`) and kept open; each job directory is made relative to that
//! handle and opened the same way; its files and subdirectories are made relative to the job
//! directory's handle (`openat` with `O_CREAT | O_EXCL | O_NOFOLLOW`, `mkdirat`), and handed to
//! a `--run-as` user with `fchown` on the handle and `fchownat(AT_SYMLINK_NOFOLLOW)` inside. A
//! directory renamed away and replaced by a symbolic link after it was made changes nothing:
//! the runner keeps writing where it made it, and never into the link's target.
//!
//! The parent is checked too: it and every directory above it must be writable by no one but
//! their owner, or have the sticky bit (as `/tmp` has); there, another user could rename the
//! runner's directory away and put theirs in its place. Job files have fixed names, so a
//! planted file or symbolic link makes the write fail instead of being written through.
//!
//! The crate is Unix-only (process groups, signals, owner-only key files), as is this module.

use core::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{fchown, fchownat, Gid, Uid};

/// Random characters in a directory name: 16 of `[A-Za-z0-9]`, about 95 bits.
const RANDOM_CHARS: usize = 16;

/// Names tried before giving up: a clash of 95 random bits means something is wrong.
const NAME_ATTEMPTS: usize = 16;

fn random_name(prefix: &str) -> io::Result<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut name = String::with_capacity(prefix.len() + RANDOM_CHARS);
    name.push_str(prefix);
    while name.len() < prefix.len() + RANDOM_CHARS {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|error| io::Error::other(error.to_string()))?;
        // 248 = 4 × 62: no bias.
        for byte in bytes.into_iter().filter(|b| *b < 248) {
            if name.len() < prefix.len() + RANDOM_CHARS {
                name.push(char::from(ALPHABET[usize::from(byte % 62)]));
            }
        }
    }
    Ok(name)
}

fn directory_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Makes `<prefix><random>` (mode `0700`) in the directory `parent` and opens it; returns its
/// name and handle.
fn make_private_dir(parent: &OwnedFd, prefix: &str) -> io::Result<(String, OwnedFd)> {
    for _ in 0..NAME_ATTEMPTS {
        let name = random_name(prefix)?;
        match mkdirat(parent, name.as_str(), Mode::S_IRWXU) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(error) => return Err(error.into()),
        }
        let dir = openat(parent, name.as_str(), directory_flags(), Mode::empty())?;
        return Ok((name, dir));
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free directory name after 16 tries",
    ))
}

/// The runner's own work directory, made private and fresh by [`RunnerWorkDir::create_in`]:
/// the only way to get one, so a worker never runs jobs in a directory someone else made.
/// It holds the directory open: every job directory is made through that handle.
#[derive(Clone, Debug)]
pub struct RunnerWorkDir {
    path: PathBuf,
    dir: Arc<OwnedFd>,
}

impl PartialEq for RunnerWorkDir {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for RunnerWorkDir {}

impl RunnerWorkDir {
    /// Makes `<parent>/edgerunner-<random>` with mode `0700`. `parent` is made (owner-only)
    /// when missing; `parent` or a directory above it that others may write to without the
    /// sticky bit (group- or world-writable) is refused, before anything is made.
    pub fn create_in(parent: &Path) -> Result<Self, WorkDirError> {
        let io = |error: io::Error| WorkDirError::Io {
            path: parent.to_owned(),
            detail: error.to_string(),
        };
        check_ancestors(parent)?;
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io)?;
        // What exists now is checked again, the made part included, and then opened: from
        // here on, the parent is a handle.
        let real = parent.canonicalize().map_err(io)?;
        check_ancestors(&real)?;
        let parent_dir = openat(
            nix::fcntl::AT_FDCWD,
            real.as_path(),
            directory_flags(),
            Mode::empty(),
        )
        .map_err(|error| io(error.into()))?;
        let (name, dir) = make_private_dir(&parent_dir, "edgerunner-").map_err(io)?;
        Ok(Self {
            path: real.join(name),
            dir: Arc::new(dir),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes a fresh job directory `<name>-<random>` (mode `0700`) inside, through the runner
    /// directory's handle; it is removed when the [`JobDir`] is dropped, unless kept with
    /// [`JobDir::keep`].
    pub fn create_job_dir(&self, name: &str) -> io::Result<JobDir> {
        let (made, dir) = make_private_dir(&self.dir, &format!("{name}-"))?;
        Ok(JobDir {
            path: self.path.join(&made),
            name: made,
            parent: Arc::clone(&self.dir),
            dir,
            kept: false,
        })
    }

    /// Lets other users pass through (mode `0711`) but not list the directory: a job run as
    /// another user (`--run-as`) reaches its own directory, whose random name it is given,
    /// and no other.
    pub fn allow_passing_through(&self) -> io::Result<()> {
        nix::sys::stat::fchmod(&*self.dir, Mode::S_IRWXU | Mode::S_IXGRP | Mode::S_IXOTH)
            .map_err(io::Error::from)
    }

    /// Removes the runner's directory if it is empty (a job directory still in it was kept
    /// on purpose).
    pub fn remove_if_empty(&self) {
        let _ = fs::remove_dir(&self.path);
    }
}

/// Refuses `path` when it, or a directory above it, may be written by others than its owner
/// without the sticky bit. Parts that do not exist yet are not checked (they are made
/// owner-only).
fn check_ancestors(path: &Path) -> Result<(), WorkDirError> {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|error| WorkDirError::Io {
                path: path.to_owned(),
                detail: error.to_string(),
            })?
            .join(path)
    };
    for dir in absolute.ancestors() {
        let Ok(meta) = fs::metadata(dir) else {
            continue;
        };
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(WorkDirError::Shared {
                path: dir.to_owned(),
                mode,
            });
        }
    }
    Ok(())
}

/// One job's private directory, held open; removed with everything in it when dropped.
#[derive(Debug)]
pub struct JobDir {
    path: PathBuf,
    /// Its name in the runner's directory.
    name: String,
    parent: Arc<OwnedFd>,
    dir: OwnedFd,
    kept: bool,
}

impl JobDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the new file `name` inside, owner-only (`0600`), through the directory's handle:
    /// fails if anything exists there, a link included. Returns its path.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let fd = openat(
            &self.dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::S_IRUSR | Mode::S_IWUSR,
        )?;
        File::from(fd).write_all(bytes)?;
        Ok(self.path.join(name))
    }

    /// Makes the new directory `name` inside, owner-only (`0700`), through the directory's
    /// handle; fails if anything exists there. Returns its path.
    pub fn create_dir(&self, name: &str) -> io::Result<PathBuf> {
        mkdirat(&self.dir, name, Mode::S_IRWXU)?;
        Ok(self.path.join(name))
    }

    /// Gives the directory and what is directly in it (what the runner wrote: the job's files,
    /// `tmp` and `home`) to `uid`/`gid`, for a job run as that user: `fchown` on the handle,
    /// `fchownat` without following links inside.
    pub fn hand_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        fchown(&self.dir, uid, gid)?;
        let listing = openat(&self.dir, ".", directory_flags(), Mode::empty())?;
        let entries = nix::dir::Dir::from_fd(listing)?;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            fchownat(&self.dir, name, uid, gid, AtFlags::AT_SYMLINK_NOFOLLOW)?;
        }
        Ok(())
    }

    /// Leaves the directory in place; returns where it is.
    pub fn keep(mut self) -> PathBuf {
        self.kept = true;
        self.path.clone()
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        // By name in the runner's directory as held open (the kernel's name for the handle),
        // so a path renamed or replaced by a link above it is not followed; a job directory's
        // own name replaced by a link removes the link alone.
        let anchored = format!("/proc/self/fd/{}/{}", self.parent.as_raw_fd(), self.name);
        if fs::remove_dir_all(&anchored).is_err() {
            let _ = fs::remove_dir_all(&self.path);
        }
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
    /// Writable by others than its owner (group or world) without the sticky bit.
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
                "{} (mode {mode:o}) is writable by other users than its owner without the \
                 sticky bit: another user could replace the runner's work directory there; \
                 choose another --work-dir, or `chmod go-w` or `chmod +t` it",
                path.display()
            ),
        }
    }
}

impl std::error::Error for WorkDirError {}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, PermissionsExt};

    use tempfile::TempDir;

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

    /// The swap: whoever may write the work directory's parent renames the runner's directory
    /// away and plants a link to a directory of their choice in its place. Everything the
    /// runner then makes, writes and hands over must land in its own directory, never the
    /// link's target.
    #[test]
    fn a_runner_directory_swapped_for_a_link_sends_nothing_to_the_links_target() {
        let scratch = scratch();
        let runner = RunnerWorkDir::create_in(scratch.path()).expect("made");
        let victim = scratch.path().join("victim");
        DirBuilder::new().mode(0o755).create(&victim).expect("made");
        let moved = scratch.path().join("moved-away");
        fs::rename(runner.path(), &moved).expect("renamed");
        symlink(&victim, runner.path()).expect("planted");

        let job = runner.create_job_dir("job_1-1");
        if let Ok(job) = &job {
            let _ = job.write_file("input.json", b"{}");
            let _ = job.create_dir("tmp");
            let me = nix::unistd::geteuid().as_raw();
            let _ = job.hand_to(me, nix::unistd::getegid().as_raw());
        }
        assert_eq!(
            fs::read_dir(&victim).expect("readable").count(),
            0,
            "nothing was made in the link's target"
        );
        assert_eq!(mode(&victim), 0o755, "the target is untouched");
        // Where it went instead: the runner's own directory, wherever it was moved.
        if let Ok(job) = job {
            let name = job.path().file_name().expect("named").to_owned();
            assert!(moved.join(name).join("input.json").is_file());
        }
    }

    /// A job directory's name swapped for a link between its creation and its hand-over to
    /// the `--run-as` user: the hand-over must not follow it.
    #[test]
    fn a_job_directory_swapped_for_a_link_is_not_handed_over_through_it() {
        let scratch = scratch();
        let runner = RunnerWorkDir::create_in(scratch.path()).expect("made");
        let job = runner.create_job_dir("job_1-1").expect("made");
        let victim = scratch.path().join("victim");
        DirBuilder::new().mode(0o755).create(&victim).expect("made");
        let before = fs::metadata(&victim).expect("exists");
        let moved = runner.path().join("moved-away");
        fs::rename(job.path(), &moved).expect("renamed");
        symlink(&victim, job.path()).expect("planted");
        let _ = job.write_file("artifact.json", b"{}");
        let _ = job.create_dir("tmp");
        // Hand it to another owner where this test may (root); to the same one otherwise.
        let (uid, gid) = if nix::unistd::geteuid().is_root() {
            (65534, 65534)
        } else {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        };
        let _ = job.hand_to(uid, gid);
        let after = fs::metadata(&victim).expect("exists");
        assert_eq!(
            fs::read_dir(&victim).expect("readable").count(),
            0,
            "nothing was made in the link's target"
        );
        assert_eq!(
            (after.uid(), after.gid(), after.mode()),
            (before.uid(), before.gid(), before.mode()),
            "the target's owner and mode are untouched"
        );
        let _ = fs::remove_file(job.path());
        let _ = fs::rename(&moved, job.path());
    }

    #[test]
    fn a_group_writable_parent_or_ancestor_is_refused() {
        let scratch = scratch();
        let shared = scratch.path().join("group");
        DirBuilder::new().mode(0o700).create(&shared).expect("made");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o770)).expect("chmod");
        let error = RunnerWorkDir::create_in(&shared).expect_err("a group-writable parent");
        assert!(
            matches!(error, WorkDirError::Shared { mode: 0o770, .. }),
            "{error:?}"
        );
        let deeper = shared.join("a").join("b");
        let error = RunnerWorkDir::create_in(&deeper).expect_err("a group-writable ancestor");
        assert!(matches!(error, WorkDirError::Shared { .. }), "{error:?}");
        assert!(!shared.join("a").exists(), "nothing was made under it");
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1770)).expect("chmod");
        RunnerWorkDir::create_in(&deeper).expect("a sticky ancestor is fine");
    }
}
