//! PEM certificate bundles for the HTTPS clients (features `etcd` and
//! `remote-jwks`).

use crate::error::{Error, Result};

/// The certificates of a PEM bundle (other PEM items are ignored); at least
/// one. Errors name `subject` and `field`.
pub(crate) fn certificates(
    pem: &[u8],
    subject: &'static str,
    field: &str,
) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::invalid(
                    subject,
                    field,
                    format!("not a PEM bundle: {e}"),
                ));
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::invalid(
            subject,
            field,
            "holds no CERTIFICATE block; expected one or more PEM certificates",
        ));
    }
    Ok(certs)
}
