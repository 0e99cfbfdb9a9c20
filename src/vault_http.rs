//! What every client of a Vault/OpenBao server shares (features `transit`
//! and `vault`; `consul`'s login too): the address rule (https, or http to a loopback host when
//! allowed), the HTTP agent (rustls, no redirects: a redirect would resend
//! the token elsewhere), answers read into zeroizing buffers, and Vault's own
//! error texts.

use std::time::Duration;

#[cfg(any(feature = "transit", feature = "vault"))]
use serde_json::Value;
use zeroize::Zeroizing;

use crate::error::{Error, Result, truncate_for_message};

/// The largest answer read (a Transit batch of 1,000 wrapped RSA keys is
/// well under this).
pub(crate) const MAX_ANSWER_BYTES: u64 = 16 << 20;

/// `addr` as every message and log shows it: `scheme://host[:port]` and
/// nothing else, even when the address is malformed. Credentials, a path, a
/// query or a fragment may hold a secret (`https://user:pass@host`,
/// `?token=`), so they are never repeated; a value with no scheme may be a
/// secret itself (a token passed as the address), so none of it is shown;
/// nor is the host when an `@` after it makes it ambiguous (a password with
/// a raw `/`: `https://user:pa/ss@host`).
pub(crate) fn shown_addr(addr: &str) -> String {
    let scheme_ok = |s: &str| {
        s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    };
    let Some((scheme, rest)) = addr.split_once("://").filter(|(s, _)| scheme_ok(s)) else {
        return "[not a URL]".into();
    };
    let end = rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    if after.contains('@') {
        return format!("{}://[host not shown]", truncate_for_message(scheme));
    }
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    truncate_for_message(&format!("{scheme}://{host}"))
}

/// Checks `addr` is `https://host[:port]` (or `http://` to a loopback host
/// when `allow_http_loopback`), with nothing after the authority: no path,
/// query, fragment or credentials. `why_https` says what the connection
/// carries. Errors name `subject` and show the address as [`shown_addr`]
/// does.
pub(crate) fn check_addr(
    addr: &str,
    allow_http_loopback: bool,
    subject: &'static str,
    why_https: &str,
) -> Result<()> {
    let bad = |why: String| Error::invalid(subject, "addr", why);
    let shown = shown_addr(addr);
    let rest = if let Some(rest) = addr.strip_prefix("https://") {
        rest
    } else if let Some(rest) = addr.strip_prefix("http://") {
        let host = if let Some(v6) = rest.strip_prefix('[') {
            v6.split(']').next().unwrap_or_default()
        } else {
            rest.split([':', '/']).next().unwrap_or_default()
        };
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !(allow_http_loopback && loopback) {
            return Err(bad(format!(
                "{shown:?} is plain http: {why_https}, so https is required (http only to a loopback host, when allowed)"
            )));
        }
        rest
    } else {
        let example = if subject == "ConsulLogin" {
            "https://consul.example.com:8501"
        } else {
            "https://vault.example.com:8200"
        };
        return Err(bad(format!(
            "{shown:?} is not an https:// URL (expected e.g. {example})"
        )));
    };
    // Only the authority: anything after it could be a secret in every
    // message that names the server, and the API paths are ours to add.
    if rest.is_empty()
        || rest
            .bytes()
            .any(|b| matches!(b, b'/' | b'?' | b'#' | b'@' | b'\\' | b' ') || b.is_ascii_control())
    {
        return Err(bad(format!(
            "{shown:?} must be scheme://host[:port] with no path, query, fragment or credentials (the rest of the address is not repeated here)"
        )));
    }
    Ok(())
}

/// The HTTP agent: rustls with the roots of `ca_bundle_pem` (else the
/// Mozilla roots), `timeout` per whole request, no redirects, statuses as
/// answers (the caller reads Vault's errors).
pub(crate) fn agent(
    ca_bundle_pem: Option<&[u8]>,
    timeout: Duration,
    allow_http_loopback: bool,
    subject: &'static str,
) -> Result<ureq::Agent> {
    let tls = crate::tls_pem::tls_config(ca_bundle_pem, subject, "ca_bundle_pem")?;
    Ok(ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .https_only(!allow_http_loopback)
        // A redirect would resend the token elsewhere.
        .max_redirects(0)
        .user_agent(concat!("workload-identity/", env!("CARGO_PKG_VERSION")))
        .tls_config(tls)
        .build()
        .into())
}

#[cfg(any(feature = "transit", feature = "vault"))]
/// Whether `mount` is a mount path we put into a URL (segments of letters,
/// digits, '-', '_' and '.', none `.` or `..`).
pub(crate) fn is_mount_path(mount: &str) -> bool {
    !mount.is_empty()
        && mount.split('/').all(|seg| {
            !seg.is_empty() && seg != ".." && seg != "." && seg.bytes().all(is_path_byte)
        })
}

/// The PEM bundle in file `path`, for a login builder's `ca_bundle_file`
/// (`subject` names the builder in the error).
#[cfg(any(feature = "vault", feature = "consul"))]
pub(crate) fn read_ca_bundle_file(
    path: &std::path::Path,
    subject: &'static str,
) -> crate::error::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        crate::error::Error::invalid(
            subject,
            "ca_bundle_file",
            format!("cannot read {}: {e}", path.display()),
        )
    })
}

/// A byte allowed in a mount path segment or a name.
pub(crate) fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// The whole body (at most [`MAX_ANSWER_BYTES`]) in a zeroizing buffer: an
/// answer may hold key material or a token, and growing a plain `Vec` would
/// leave copies in the blocks it frees. Each growth copies into a new
/// zeroizing buffer and drops (zeroizes) the old one; the read chunk is
/// cleared too.
pub(crate) fn read_zeroizing(body: &mut ureq::Body) -> std::io::Result<Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let hint = body
        .content_length()
        .unwrap_or(16 << 10)
        .min(MAX_ANSWER_BYTES);
    let mut out = Zeroizing::new(Vec::with_capacity(hint as usize + 1));
    let mut reader = body.as_reader();
    let mut chunk = Zeroizing::new([0u8; 16 << 10]);
    loop {
        let n = reader.read(&mut chunk[..])?;
        if n == 0 {
            return Ok(out);
        }
        if (out.len() + n) as u64 > MAX_ANSWER_BYTES {
            return Err(std::io::Error::other(format!(
                "the answer is larger than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        if out.len() + n > out.capacity() {
            let mut bigger = Zeroizing::new(Vec::with_capacity((out.len() + n) * 2));
            bigger.extend_from_slice(&out);
            out = bigger;
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

#[cfg(any(feature = "transit", feature = "vault"))]
/// The server's `errors` array, joined (its messages name paths, roles,
/// claims and keys, never secrets), shortened.
pub(crate) fn vault_errors(json: &Value) -> String {
    let joined = json
        .get("errors")
        .and_then(Value::as_array)
        .map(|errs| {
            errs.iter()
                .filter_map(Value::as_str)
                .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let mut out = truncate_for_message(&joined);
    if out.len() < joined.len() {
        out.push_str(" (shortened)");
    }
    out
}

/// Addresses that hold secrets, for the tests of every client of this module.
#[cfg(test)]
pub(crate) mod test_addresses {
    /// Addresses whose credentials, path, query or fragment hold a secret
    /// (`s3cr3t`), and one made of a secret alone; `{port}` is a loopback
    /// port nothing listens on.
    pub(crate) fn secret_addresses(port: u16) -> Vec<String> {
        [
            "https://user:s3cr3t@vault.example.com:8200",
            "https://vault.example.com:8200/s3cr3t",
            "https://vault.example.com:8200?token=s3cr3t",
            "https://vault.example.com:8200/#s3cr3t",
            "https://vault.example.com:8200/v1/x?token=s3cr3t#s3cr3t",
            "https://user:pa/s3cr3t@vault.example.com",
            "https://vault.example.com/p?x=a@s3cr3t",
            "http://user:s3cr3t@vault.example.com:8200",
            "ftp://user:s3cr3t@vault.example.com",
            "user:s3cr3t@vault.example.com",
            "hvs.s3cr3t",
            "http://user:s3cr3t@127.0.0.1:{port}",
            "http://127.0.0.1:{port}/s3cr3t",
            "http://127.0.0.1:{port}/v1?token=s3cr3t",
            "http://127.0.0.1:{port}#s3cr3t",
            "http://[::1]:{port}/s3cr3t",
            // Nothing secret: it gets as far as the connection.
            "http://127.0.0.1:{port}",
        ]
        .iter()
        .map(|a| a.replace("{port}", &port.to_string()))
        .collect()
    }

    /// A loopback port nothing listens on (the listener is gone; a
    /// newcomer binding it meanwhile would only change which error comes).
    pub(crate) fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(1)
    }

    #[track_caller]
    pub(crate) fn assert_no_secret(addr: &str, shown: &str) {
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("user"),
            "{addr:?} leaks into: {shown}"
        );
    }
}
