//! Crash-safe file replacement, and careful reading of files that hold secrets.
//!
//! A file is replaced by writing a temporary file in the same directory (mode
//! 0600), flushing it to disk, renaming it over the target and flushing the
//! directory. Rename is atomic on POSIX file systems, so a crash at any point
//! leaves either the old file or the new one, whole; the temporary file is removed
//! on every error this process survives.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// A point where a save can be made to fail, for tests of the failure paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Creating the temporary file.
    Create,
    /// Half-way through writing it.
    Write,
    /// Flushing it to disk.
    Sync,
    /// Renaming it over the target.
    Rename,
}

fn io_err(context: String, source: io::Error) -> Error {
    Error::Io {
        context,
        error: source,
    }
}

fn injected(at: Fault) -> io::Error {
    io::Error::other(format!("injected failure at {at:?}"))
}

/// A path the OS could never open is an argument error, not an I/O one: empty,
/// or with a NUL byte inside (C callers pass lengths, so one can slip in).
fn check_path(path: &Path) -> Result<()> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.is_empty() || bytes.contains(&0) {
        return Err(Error::invalid(
            "path",
            "path",
            "must be a non-empty path without NUL bytes",
        ));
    }
    Ok(())
}

fn temp_path(target: &Path) -> Result<PathBuf> {
    check_path(target)?;
    // A directory is refused before anything is created: its "file name" would
    // put the temporary file (with secrets in it) in the directory's parent.
    let ends_in_slash = target.as_os_str().as_encoded_bytes().ends_with(b"/");
    if ends_in_slash || target.is_dir() {
        return Err(Error::invalid(
            "path",
            "path",
            format!(
                "{} is a directory: expected the path of a file to write, e.g. {}",
                target.display(),
                target.join("keystore").display()
            ),
        ));
    }
    let name = target.file_name().ok_or_else(|| {
        Error::invalid(
            "path",
            "path",
            format!("{} does not name a file", target.display()),
        )
    })?;
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| {
        io_err(
            "reading the OS random source".into(),
            io::Error::other(e.to_string()),
        )
    })?;
    let tmp = format!(
        ".{}.tmp.{}.{:016x}",
        name.to_string_lossy(),
        std::process::id(),
        u64::from_le_bytes(nonce)
    );
    Ok(target.with_file_name(tmp))
}

/// Which file modes [`read_secret_file`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileAccess {
    /// Only files no one but the owner may access (mode `0600` or stricter).
    OwnerOnly,
    /// Any mode (an explicit opt-out).
    AnyMode,
}

/// Reads a file that holds secrets (`what` names it in messages): a regular
/// file; with [`FileAccess::OwnerOnly`] (on Unix) refused before it is read if
/// group or others have any access to it; at most `max` bytes; read into one
/// zeroized buffer of its exact size, so no reallocation leaves copies behind.
pub(crate) fn read_secret_file(
    path: &Path,
    what: &'static str,
    max: u64,
    access: FileAccess,
) -> Result<Zeroizing<Vec<u8>>> {
    let io = |e| Error::Io {
        context: format!("reading {what} {}", path.display()),
        error: e,
    };
    check_path(path)?;
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    check_mode(&meta, access).map_err(|e| Error::Io {
        context: format!("refusing {what} {}", path.display()),
        error: e,
    })?;
    if meta.len() > max {
        return Err(Error::Decode(crate::error::DecodeError {
            type_name: what,
            path: String::new(),
            reason: format!("{} is larger than the {max}-byte limit", path.display()),
        }));
    }
    // Fits: at most `max` bytes, and callers pass a few MiB.
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    let mut bytes = Zeroizing::new(vec![0u8; len]);
    file.read_exact(&mut bytes).map_err(io)?;
    let mut probe = [0u8; 1];
    if file.read(&mut probe).map_err(io)? != 0 {
        return Err(io(io::Error::other(
            "the file grew while it was being read",
        )));
    }
    Ok(bytes)
}

#[cfg(unix)]
fn check_mode(meta: &fs::Metadata, access: FileAccess) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if access == FileAccess::OwnerOnly && mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "group or others have access to it (mode {mode:04o}) and it holds secrets; `chmod 600` it (files this library writes are 0600)"
            ),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_mode(_: &fs::Metadata, _: FileAccess) -> io::Result<()> {
    Ok(())
}

/// Replaces `target` with `bytes`, crash-safely (see the module docs).
pub(crate) fn replace_file(target: &Path, bytes: &[u8]) -> Result<()> {
    replace_file_with_fault(target, bytes, None)
}

pub(crate) fn replace_file_with_fault(
    target: &Path,
    bytes: &[u8],
    fault: Option<Fault>,
) -> Result<()> {
    let tmp = temp_path(target)?;
    let fail = |at: Fault| fault == Some(at);
    let what = |step: &str| format!("{step} {} (saving {})", tmp.display(), target.display());

    let mut file = (|| {
        if fail(Fault::Create) {
            return Err(injected(Fault::Create));
        }
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
    })()
    .map_err(|e| io_err(what("creating"), e))?;

    let written = (|| -> io::Result<()> {
        if fail(Fault::Write) {
            file.write_all(&bytes[..bytes.len() / 2])?;
            return Err(injected(Fault::Write));
        }
        file.write_all(bytes)?;
        if fail(Fault::Sync) {
            return Err(injected(Fault::Sync));
        }
        file.sync_all()
    })();
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(what("writing"), e));
    }

    let renamed = if fail(Fault::Rename) {
        Err(injected(Fault::Rename))
    } else {
        fs::rename(&tmp, target)
    };
    if let Err(e) = renamed {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(
            format!("renaming {} over {}", tmp.display(), target.display()),
            e,
        ));
    }

    // Flush the directory entry so the rename itself survives a power loss.
    sync_parent(target)
}

/// Flushes the directory that holds `target`, so a new entry in it (a rename,
/// a link) survives a power loss.
pub(crate) fn sync_parent(target: &Path) -> Result<()> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(format!("flushing directory {}", dir.display()), e))
}

/// Creates `target` holding `bytes` (mode 0600), crash-safely and only if
/// nothing is there: the bytes are written to a temporary file and fsynced,
/// then hard-linked into place, which fails when `target` exists. After a
/// crash the file is absent or whole.
pub(crate) fn create_new_file(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(target)?;
    let what = |step: &str| format!("{step} {} (creating {})", tmp.display(), target.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io_err(what("creating"), e))?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    let linked = written
        .map_err(|e| io_err(what("writing"), e))
        .and_then(|()| {
            fs::hard_link(&tmp, target).map_err(|e| {
                let context = if e.kind() == io::ErrorKind::AlreadyExists {
                    format!(
                        "{} already exists; refusing to replace it",
                        target.display()
                    )
                } else {
                    format!("linking {} to {}", tmp.display(), target.display())
                };
                io_err(context, e)
            })
        });
    let _ = fs::remove_file(&tmp);
    linked?;
    sync_parent(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp."))
            .collect()
    }

    #[test]
    fn replaces_whole_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state");
        replace_file(&target, b"one").unwrap();
        replace_file(&target, b"two").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"two");
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn every_injected_failure_leaves_the_old_file_and_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("state");
        replace_file(&target, b"old contents").unwrap();
        for fault in [Fault::Create, Fault::Write, Fault::Sync, Fault::Rename] {
            let e = replace_file_with_fault(&target, b"new contents!", Some(fault)).unwrap_err();
            assert_eq!(e.code(), crate::error::ResultCode::IoError);
            assert!(e.to_string().contains("injected failure"), "{e}");
            assert_eq!(fs::read(&target).unwrap(), b"old contents", "{fault:?}");
            assert!(leftovers(dir.path()).is_empty(), "{fault:?}");
        }
    }

    #[test]
    fn a_missing_directory_is_a_clear_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = replace_file(&dir.path().join("no/such/dir/state"), b"x").unwrap_err();
        assert!(e.to_string().contains("creating"), "{e}");
    }

    /// `Keyring::save(dir)` used to write its key-bearing temporary file into
    /// the directory's parent (for a directory under `/`, into `/` itself).
    #[test]
    fn a_directory_is_refused_before_any_file_is_created() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("keys");
        fs::create_dir(&dir).unwrap();
        let slash = format!("{}/", parent.path().join("not-yet").display());
        for target in [dir.clone(), PathBuf::from(&slash)] {
            let e = replace_file(&target, b"secret").unwrap_err();
            assert_eq!(e.code(), crate::error::ResultCode::InvalidArgument, "{e}");
            assert!(e.to_string().contains("is a directory"), "{e}");
        }
        let names = |p: &Path| -> Vec<String> {
            fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(parent.path()), ["keys"], "nothing created beside it");
        assert!(names(&dir).is_empty(), "nothing created inside it");
    }

    #[test]
    fn empty_paths_and_nul_bytes_are_argument_errors() {
        for bad in ["", "/tmp\0x"] {
            let p = Path::new(bad);
            let e = replace_file(p, b"x").unwrap_err();
            assert_eq!(
                e.code(),
                crate::error::ResultCode::InvalidArgument,
                "{bad:?}: {e}"
            );
            let e = read_secret_file(p, "test file", 10, FileAccess::OwnerOnly).unwrap_err();
            assert_eq!(
                e.code(),
                crate::error::ResultCode::InvalidArgument,
                "{bad:?}: {e}"
            );
        }
    }
}
