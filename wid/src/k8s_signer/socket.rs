//! The Unix socket `wid k8s-signer` serves on: a path, made with its mode
//! and owner before anyone can connect (bound in a private directory, then
//! renamed into place), or a Linux abstract name (`@name`). An existing
//! file is replaced only when it is a stale socket (nothing answers on it);
//! anything else is refused and left as it is.

use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::CliError;
use crate::sources::bad_flag;

/// The longest socket path the kernel takes (`sun_path` less its NUL).
const MAX_PATH_BYTES: usize = 107;

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place {
    /// A socket file.
    Path(PathBuf),
    /// A Linux abstract socket (no file; any process of the network
    /// namespace may connect).
    Abstract(String),
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Path(p) => write!(f, "unix:{}", p.display()),
            Place::Abstract(name) => write!(f, "unix:@{name}"),
        }
    }
}

/// `--socket PATH|@NAME`.
pub(super) fn parse_place(s: &str) -> Result<Place, String> {
    if let Some(name) = s.strip_prefix('@') {
        if name.is_empty() {
            return Err("an abstract socket needs a name after @".into());
        }
        if name.len() > MAX_PATH_BYTES - 1 {
            return Err(format!(
                "an abstract socket name is at most {} bytes, not {}",
                MAX_PATH_BYTES - 1,
                name.len()
            ));
        }
        return Ok(Place::Abstract(name.to_string()));
    }
    if s.is_empty() {
        return Err("give a socket path, or @name for an abstract socket".into());
    }
    if s.len() > MAX_PATH_BYTES {
        return Err(format!(
            "a Unix socket path is at most {MAX_PATH_BYTES} bytes, not {} (choose a shorter directory)",
            s.len()
        ));
    }
    Ok(Place::Path(PathBuf::from(s)))
}

/// `--socket-mode`: octal permission bits, e.g. 600 or 0660.
pub(super) fn parse_mode(s: &str) -> Result<u32, String> {
    let mode = u32::from_str_radix(s.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{s:?} is not an octal mode such as 600 or 0660"))?;
    if mode > 0o777 {
        return Err(format!(
            "{s:?} sets bits beyond rwx for owner, group and others (at most 777)"
        ));
    }
    if mode & 0o600 != 0o600 {
        return Err(format!(
            "{s:?} leaves the owner unable to read and write the socket: the signer could not be reached by its own user"
        ));
    }
    Ok(mode)
}

/// `--socket-owner UID[:GID]`.
pub(super) fn parse_owner(s: &str) -> Result<(u32, Option<u32>), String> {
    let (uid, gid) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let number = |v: &str, what: &str| {
        v.parse::<u32>().map_err(|_| {
            format!("{what} {v:?} in {s:?} is not a number (give numeric IDs, e.g. 0:998)")
        })
    };
    Ok((
        number(uid, "the user")?,
        gid.map(|g| number(g, "the group")).transpose()?,
    ))
}

/// A listening socket, and what to remove when it stops.
pub(super) struct Bound {
    pub(super) listener: UnixListener,
    pub(super) place: Place,
    /// The socket file's device and inode, to remove it only while it is
    /// still ours.
    ours: Option<(u64, u64)>,
}

impl Bound {
    /// Removes the socket file if it is still the one bound here.
    pub(super) fn remove(&self) {
        let (Place::Path(path), Some(ours)) = (&self.place, self.ours) else {
            return;
        };
        if std::fs::symlink_metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == ours) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds `place`: a path with `mode` (default 0600) and `owner`, replacing a
/// stale socket; an abstract name as is (mode and owner do not apply).
pub(super) fn bind(
    place: &Place,
    mode: Option<u32>,
    owner: Option<(u32, Option<u32>)>,
) -> Result<(Bound, Option<String>), CliError> {
    match place {
        Place::Abstract(name) => {
            if mode.is_some() || owner.is_some() {
                return Err(bad_flag(
                    if mode.is_some() {
                        "--socket-mode"
                    } else {
                        "--socket-owner"
                    },
                    "does not apply to an abstract socket (@name has no file, so no mode or owner: any process of this network namespace can connect); give a socket path to restrict who can",
                ));
            }
            bind_abstract(name).map(|listener| {
                (
                    Bound {
                        listener,
                        place: place.clone(),
                        ours: None,
                    },
                    None,
                )
            })
        }
        Place::Path(path) => {
            let replaced = clear_stale(path)?;
            let listener = bind_path(path, mode.unwrap_or(0o600), owner)?;
            let m = std::fs::symlink_metadata(path)
                .map_err(|e| CliError::io(format!("reading the socket {}", path.display()), &e))?;
            Ok((
                Bound {
                    listener,
                    place: place.clone(),
                    ours: Some((m.dev(), m.ino())),
                },
                replaced,
            ))
        }
    }
}

#[cfg(target_os = "linux")]
fn bind_abstract(name: &str) -> Result<UnixListener, CliError> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| CliError::io(format!("naming the abstract socket @{name}"), &e))?;
    UnixListener::bind_addr(&addr).map_err(|e| {
        let err = CliError::io(format!("listening on the abstract socket @{name}"), &e);
        if e.kind() == ErrorKind::AddrInUse {
            err.hint("another process listens on that name: stop it, or choose another")
        } else {
            err
        }
    })
}

#[cfg(not(target_os = "linux"))]
fn bind_abstract(name: &str) -> Result<UnixListener, CliError> {
    Err(bad_flag(
        "--socket",
        format!("@{name}: abstract sockets are Linux's; give a socket path"),
    ))
}

/// Refuses an existing file unless it is a socket nothing answers on, which
/// is removed (returns a note saying so).
fn clear_stale(path: &Path) -> Result<Option<String>, CliError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(CliError::io(format!("looking at {}", path.display()), &e)),
    };
    if !meta.file_type().is_socket() {
        return Err(bad_flag(
            "--socket",
            format!(
                "{} exists and is not a socket: it is left as it is; remove it or choose another path",
                path.display()
            ),
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(bad_flag(
            "--socket",
            format!(
                "another process is serving on {}: stop it first (two signers cannot share one socket)",
                path.display()
            ),
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|e| {
                CliError::io(format!("removing the stale socket {}", path.display()), &e)
            })?;
            Ok(Some(format!(
                "replaced the stale socket {} (nothing was listening on it)",
                path.display()
            )))
        }
        Err(e) => Err(CliError::io(
            format!("checking whether the socket {} is in use", path.display()),
            &e,
        )),
    }
}

/// Binds in a directory only this user can enter, sets the mode and owner,
/// then renames the socket into place: no one can connect before it has
/// them.
fn bind_path(
    path: &Path,
    mode: u32,
    owner: Option<(u32, Option<u32>)>,
) -> Result<UnixListener, CliError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "socket".into(), |n| n.to_string_lossy().into_owned());
    let private = parent.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| CliError::io(format!("making {}", private.display()), &e))?;
    let staged = private.join("s");
    let result = (|| {
        let listener = UnixListener::bind(&staged)
            .map_err(|e| CliError::io(format!("binding {}", staged.display()), &e))?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))
            .map_err(|e| CliError::io(format!("setting the mode of {}", path.display()), &e))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&staged, Some(uid), gid).map_err(|e| {
                CliError::io(format!("giving {} to {uid}", path.display()), &e)
                    .hint("changing a file's owner needs root (CAP_CHOWN); a group you belong to needs none")
            })?;
        }
        std::fs::rename(&staged, path)
            .map_err(|e| CliError::io(format!("moving the socket to {}", path.display()), &e))?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_say_what_is_wrong() {
        assert_eq!(parse_place("@wid").unwrap(), Place::Abstract("wid".into()));
        assert!(parse_place("@").unwrap_err().contains("name"));
        assert!(parse_place(&"x".repeat(108)).unwrap_err().contains("107"));
        assert_eq!(parse_mode("600").unwrap(), 0o600);
        assert_eq!(parse_mode("0660").unwrap(), 0o660);
        assert!(parse_mode("9").unwrap_err().contains("octal"));
        assert!(parse_mode("1777").unwrap_err().contains("777"));
        assert!(parse_mode("060").unwrap_err().contains("owner"));
        assert_eq!(parse_owner("0:998").unwrap(), (0, Some(998)));
        assert_eq!(parse_owner("1000").unwrap(), (1000, None));
        assert!(parse_owner("root").unwrap_err().contains("numeric"));
    }

    #[test]
    fn a_stale_socket_is_replaced_and_anything_else_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let place = Place::Path(path.clone());
        let (first, _) = bind(&place, None, None).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        // Live: refused.
        let e = bind(&place, None, None).err().unwrap();
        assert!(
            e.message.contains("another process is serving"),
            "{}",
            e.message
        );
        // Stale (the listener gone, the file left, as after SIGKILL).
        drop(first);
        let (second, note) = bind(&place, Some(0o660), None).unwrap();
        assert!(note.unwrap().contains("stale"));
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o660);
        second.remove();
        assert!(!path.exists());
        // A regular file is never touched.
        std::fs::write(&path, b"keep me").unwrap();
        let e = bind(&place, None, None).err().unwrap();
        assert!(e.message.contains("not a socket"), "{}", e.message);
        assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
        // No private directory is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }
}
