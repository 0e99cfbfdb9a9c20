//! Files on disk: how they are written and how their contents are framed.
//!
//! * [`atomic_file`]: crash-safe replacement (temporary file, fsync, rename,
//!   directory fsync), mode 0600, and the checks made before a secret-bearing
//!   file is read (regular file, owner-only mode).
//! * [`envelope`]: a versioned, checksummed msgpack envelope around a body. It
//!   detects truncation and corruption; it is **not** encryption: the body is
//!   plaintext, which is why the files are 0600.
//!
//! The keystore (`keyring::keystore`) and the identity manager's state files
//! (`manager::db`) are envelopes written through an atomic file.

pub(crate) mod atomic_file;
pub(crate) mod envelope;
