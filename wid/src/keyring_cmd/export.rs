//! `wid keyring export --dir DIR`: the documents `wid serve` serves, as
//! static files, byte for byte: `.well-known/jwks.json` and, with
//! `--issuer`, `.well-known/openid-configuration`, for hosting in a bucket
//! (AWS IAM OIDC providers are commonly served from S3) or behind a CDN.
//! Each file is replaced whole (written beside it, then renamed), readable by
//! all (they are public documents).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use crate::CliError;
use crate::etcd_args::StoreArgs;
use crate::output::Ctx;

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The directory to write into (made if missing); the files go under
    /// its .well-known/.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The issuer URL tokens carry in iss: also writes the discovery
    /// document, whose jwks_uri is <issuer>/.well-known/jwks.json (https).
    #[arg(long, value_name = "URL")]
    issuer: Option<String>,
}

pub(super) fn run(a: &ExportArgs, ctx: &Ctx) -> Result<(), CliError> {
    let opened = a.store.open(ctx)?;
    let keyring = opened.keyring();
    let jwks = keyring.jwks();
    // Everything is made before anything is written: a bad issuer writes
    // nothing.
    let discovery = match &a.issuer {
        Some(issuer) => Some(keyring.oidc_discovery(issuer)?.to_json()),
        None => None,
    };
    let dir = a.dir.join(".well-known");
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::io(format!("making {}", dir.display()), &e))?;
    let mut written = Vec::new();
    let jwks_path = dir.join("jwks.json");
    replace(&jwks_path, jwks.to_json().as_bytes())?;
    written.push(jwks_path);
    if let Some(doc) = discovery {
        let path = dir.join("openid-configuration");
        replace(&path, doc.as_bytes())?;
        written.push(path);
    }
    let files: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    ctx.emit(
        &format!(
            "wrote {} ({} keys); serve them as application/json",
            files.join(" and "),
            jwks.keys.len()
        ),
        &json!({ "files": files, "keys": jwks.keys.len() }),
    );
    Ok(())
}

/// Replaces `path` with `bytes`: written to a new file of a random name
/// beside it (created exclusively: never an existing file or a planted
/// symlink), flushed, renamed over it, and the directory flushed (a reader
/// never sees half a document; a crash leaves the old one or the new one).
fn replace(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let io = |what: &str, e: &std::io::Error| CliError::io(format!("{what} {}", path.display()), e);
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        f.write_all(bytes)?;
        f.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("writing", &e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("replacing", &e)
    })?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("flushing the directory of", &e))?;
    }
    Ok(())
}
