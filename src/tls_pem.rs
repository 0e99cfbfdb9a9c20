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

#[cfg(any(feature = "remote-jwks", feature = "transit", feature = "vault"))]
/// ureq's TLS settings for our HTTPS clients: rustls, and the certificates of
/// `ca_bundle_pem` as the only roots when one is given (else the Mozilla
/// roots). Errors name `subject` and `field`.
pub(crate) fn tls_config(
    ca_bundle_pem: Option<&[u8]>,
    subject: &'static str,
    field: &str,
) -> Result<ureq::tls::TlsConfig> {
    let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
    if let Some(pem) = ca_bundle_pem {
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certificates(
            pem, subject, field,
        )?));
    }
    Ok(tls.build())
}
