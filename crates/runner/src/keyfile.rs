//! The runner's ed25519 key, generated once and kept in a file only its owner can read.
//!
//! Format (text, two lines): `edgerunner-ed25519-seed-v1` and standard base64 of the 32-byte
//! seed. The file is written beside its final name with mode `0600` and linked into place, so
//! it never exists with wider permissions, is never half-written under its real name, and an
//! existing key is never overwritten. Loading refuses a key that anyone but its owner could
//! read or that another user owns, as `ssh` does: such a key may already be someone else's.

use core::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use edgerunner_protocol::keypair::RunnerSigningKey;

const HEADER: &str = "edgerunner-ed25519-seed-v1";

/// Loads the key at `path`, or makes one there if the file does not exist. The flag says
/// whether it was made now.
pub fn load_or_generate(path: &Path) -> Result<(RunnerSigningKey, bool), KeyFileError> {
    match fs::symlink_metadata(path) {
        Ok(_) => load(path).map(|key| (key, false)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            generate(path).map(|key| (key, true))
        }
        Err(error) => Err(KeyFileError::io(path, &error)),
    }
}

/// Makes a new key at `path`; refuses to replace an existing file.
pub fn generate(path: &Path) -> Result<RunnerSigningKey, KeyFileError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|error| KeyFileError::Random(error.to_string()))?;
    let key = RunnerSigningKey::from_random_bytes(seed);
    let text = format!("{HEADER}\n{}\n", STANDARD.encode(key.to_seed()));
    write_private(path, text.as_bytes(), false)?;
    Ok(key)
}

/// Reads the key at `path`, refusing one with unsafe ownership or permissions.
pub fn load(path: &Path) -> Result<RunnerSigningKey, KeyFileError> {
    check_private(path)?;
    let text = fs::read_to_string(path).map_err(|error| KeyFileError::io(path, &error))?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(KeyFileError::Malformed {
            path: path.to_owned(),
            detail: format!("the first line is not {HEADER:?}"),
        });
    }
    let seed: [u8; 32] = lines
        .next()
        .and_then(|line| STANDARD.decode(line.trim()).ok())
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| KeyFileError::Malformed {
            path: path.to_owned(),
            detail: "the second line is not base64 of 32 bytes".into(),
        })?;
    Ok(RunnerSigningKey::from_random_bytes(seed))
}

/// Refuses a file that is not a regular file owned by this user with no group or other
/// permissions.
pub fn check_private(path: &Path) -> Result<(), KeyFileError> {
    let metadata = fs::symlink_metadata(path).map_err(|error| KeyFileError::io(path, &error))?;
    if !metadata.file_type().is_file() {
        return Err(KeyFileError::Malformed {
            path: path.to_owned(),
            detail: "not a regular file".into(),
        });
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Exposed {
            path: path.to_owned(),
            mode,
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if metadata.uid() != me {
        return Err(KeyFileError::NotOwner {
            path: path.to_owned(),
            owner: metadata.uid(),
        });
    }
    Ok(())
}

/// Writes `bytes` to `path` with mode `0600`, through a temporary file in the same directory.
/// `replace` chooses between renaming over an existing file and refusing to.
pub fn write_private(path: &Path, bytes: &[u8], replace: bool) -> Result<(), KeyFileError> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(|error| KeyFileError::io(&parent, &error))?;
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "key".into());
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).map_err(|error| KeyFileError::Random(error.to_string()))?;
    let temporary = parent.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&temporary);
        return Err(KeyFileError::io(&temporary, &error));
    }
    let placed = if replace {
        fs::rename(&temporary, path)
    } else {
        // A hard link fails if `path` exists: the no-clobber rename.
        let linked = fs::hard_link(&temporary, path);
        let _ = fs::remove_file(&temporary);
        linked
    };
    placed.map_err(|error| {
        let _ = fs::remove_file(&temporary);
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            KeyFileError::Exists(path.to_owned())
        } else {
            KeyFileError::io(path, &error)
        }
    })
}

/// Why the key (or another owner-only file) could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFileError {
    Io { path: PathBuf, detail: String },
    Exists(PathBuf),
    Exposed { path: PathBuf, mode: u32 },
    NotOwner { path: PathBuf, owner: u32 },
    Malformed { path: PathBuf, detail: String },
    Random(String),
}

impl KeyFileError {
    fn io(path: &Path, error: &std::io::Error) -> Self {
        Self::Io {
            path: path.to_owned(),
            detail: error.to_string(),
        }
    }
}

impl fmt::Display for KeyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, detail } => write!(f, "{}: {detail}", path.display()),
            Self::Exists(path) => write!(f, "{} already exists; not replacing it", path.display()),
            Self::Exposed { path, mode } => write!(
                f,
                "{} has mode {mode:04o}: others could read it, so it is not used \
                 (run `chmod 600 {}` if it was never exposed, or make a new identity)",
                path.display(),
                path.display()
            ),
            Self::NotOwner { path, owner } => write!(
                f,
                "{} belongs to uid {owner}, not to this user; it is not used",
                path.display()
            ),
            Self::Malformed { path, detail } => write!(f, "{}: {detail}", path.display()),
            Self::Random(detail) => write!(f, "the system random source failed: {detail}"),
        }
    }
}

impl std::error::Error for KeyFileError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("random");
        std::env::temp_dir()
            .join(format!("edgerunner-keyfile-{}", hex::encode(bytes)))
            .join(name)
    }

    #[test]
    fn a_generated_key_is_owner_only_and_loads_back() {
        let path = scratch("runner.key");
        let (key, created) = load_or_generate(&path).expect("generated");
        assert!(created);
        let mode = fs::metadata(&path).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, created) = load_or_generate(&path).expect("loaded");
        assert!(!created);
        assert_eq!(again.public_key(), key.public_key());
        assert_eq!(
            generate(&path).map(|_| ()),
            Err(KeyFileError::Exists(path.clone()))
        );
        let _ = fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let path = scratch("runner.key");
        generate(&path).expect("generated");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            load(&path),
            Err(KeyFileError::Exposed { mode: 0o644, .. })
        ));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(load(&path).is_ok());
        fs::write(&path, "garbage\n").expect("write");
        assert!(matches!(load(&path), Err(KeyFileError::Malformed { .. })));
        let _ = fs::remove_dir_all(path.parent().expect("dir"));
    }
}
