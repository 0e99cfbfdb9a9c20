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

#[cfg(any(
    feature = "remote-jwks",
    feature = "transit",
    feature = "vault",
    feature = "consul"
))]
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

/// How a client is told whom to trust, for the advice of [`explain_refusal`].
pub(crate) struct TrustSettings<'a> {
    /// The setting that gives the CA bundle, as its users know it, e.g.
    /// `EtcdConfig::ca_bundle_pem (wid: --etcd-ca-bundle)`.
    pub(crate) ca_bundle: &'a str,
    /// Whether a CA bundle was given (else the Mozilla roots are trusted).
    pub(crate) ca_bundle_given: bool,
    /// The setting that gives a client certificate, for clients that have
    /// one (etcd).
    pub(crate) client_certificate: Option<&'a str>,
}

/// What a refused TLS handshake with the server of `url` means and what to
/// do, in plain words: a CA certificate presented as a server's own, a chain
/// to no trusted CA, a name the certificate does not list, a certificate out
/// of its validity period, one not made for TLS servers, or (with a client
/// certificate setting) the server refusing ours. `None` when `error` (a
/// `ureq::Error` or an `io::Error` from one, however wrapped) is none of
/// these: the caller's own text stands. Only the URL's scheme, host and port
/// and the certificate's names and dates are shown, never certificate or key
/// bytes.
pub(crate) fn explain_refusal(
    url: &str,
    error: &(dyn std::error::Error + 'static),
    trust: &TrustSettings<'_>,
) -> Option<String> {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    let server = origin(url);
    let recipe = "docs/etcd.md's \"Certificates with openssl\" shows how to make a CA and its leaf certificates";
    let refusal = rustls_error(error)?;
    let reason = match refusal {
        rustls::Error::InvalidCertificate(cert) => match cert {
            Cert::Other(other) => match other.0.downcast_ref::<webpki::Error>()? {
                webpki::Error::CaUsedAsEndEntity => format!(
                    "the server presented a CA certificate (basicConstraints CA:TRUE) as its own, \
                     which TLS clients built on rustls/webpki refuse (curl, Python and Go clients may accept it); \
                     a self-signed `openssl req -x509` certificate is such a CA certificate. Issue the \
                     server a leaf certificate (basicConstraints CA:FALSE, its host in subjectAltName, \
                     extendedKeyUsage serverAuth) signed by that CA, and give the CA in {}; {recipe}",
                    trust.ca_bundle
                ),
                webpki::Error::EndEntityUsedAsCa => format!(
                    "the server's certificate was signed by a certificate that is not a CA \
                     (basicConstraints CA:FALSE or absent); sign server certificates with a CA \
                     certificate (CA:TRUE) and give that CA in {}; {recipe}",
                    trust.ca_bundle
                ),
                _ => return None,
            },
            Cert::UnknownIssuer if trust.ca_bundle_given => format!(
                "the server's certificate does not lead to any CA of the bundle given with {}: put \
                 in that bundle the CA certificate that signed the server's certificate (`openssl \
                 x509 -noout -issuer -in SERVER.pem` names it), or have the server send its \
                 intermediate certificates too",
                trust.ca_bundle
            ),
            Cert::UnknownIssuer => format!(
                "the server's certificate does not lead to any CA this client trusts (no CA \
                 bundle was given, so only the Mozilla root CAs): for a private CA, give its \
                 certificate with {}",
                trust.ca_bundle
            ),
            Cert::NotValidForNameContext {
                expected,
                presented,
            } => {
                let host = expected.to_str();
                let kind = if host.parse::<std::net::IpAddr>().is_ok() {
                    "IP"
                } else {
                    "DNS"
                };
                let listed = if presented.is_empty() {
                    "lists no name".to_string()
                } else {
                    let names: Vec<String> = presented.iter().take(8).map(|n| san(n)).collect();
                    let more = if presented.len() > 8 { ", …" } else { "" };
                    format!("lists only {}{more}", names.join(", "))
                };
                format!(
                    "the server's certificate is not valid for {host:?}, the host this client asked \
                     for: its subjectAltName {listed}. Reissue the certificate with \
                     subjectAltName={kind}:{host} (a name in the subject's CN alone is not enough), \
                     or connect with a name the certificate lists",
                    host = crate::error::truncate_for_message(&host)
                )
            }
            Cert::NotValidForName => "the server's certificate is not valid for the host this \
                 client asked for: its subjectAltName must list the URL's host (DNS:name or IP:address)"
                .to_string(),
            Cert::ExpiredContext { time, not_after } => format!(
                "the server's certificate expired at {} (it is {} now): renew it (or, if it has \
                 not expired, correct this machine's clock)",
                utc(not_after.as_secs()),
                utc(time.as_secs())
            ),
            Cert::NotValidYetContext { time, not_before } => format!(
                "the server's certificate is not valid before {} (it is {} now): check the \
                 clocks of this machine and of the CA that issued it, or wait",
                utc(not_before.as_secs()),
                utc(time.as_secs())
            ),
            Cert::Expired | Cert::NotValidYet => "the server's certificate is outside its \
                 validity period (expired, not yet valid, or its dates are inverted): renew it, \
                 or correct this machine's clock"
                .to_string(),
            Cert::InvalidPurpose | Cert::InvalidPurposeContext { .. } => "the server's \
                 certificate is not for TLS servers: its extendedKeyUsage lacks serverAuth; \
                 reissue it with extendedKeyUsage=serverAuth"
                .to_string(),
            _ => return None,
        },
        rustls::Error::AlertReceived(
            alert @ (Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateRequired
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired),
        ) => format!(
            "the server refused this client's certificate, or its lack of one (TLS alert \
             {alert:?}): it wants a client certificate (extendedKeyUsage clientAuth) from a CA it \
             trusts (etcd: --trusted-ca-file); give it with {}",
            trust.client_certificate?
        ),
        _ => return None,
    };
    Some(format!(
        "TLS with {server} refused ({}): {reason}",
        tag(refusal)
    ))
}

/// The refusal's own name (`CaUsedAsEndEntity`, `UnknownIssuer`,
/// `NotValidForName`, `Expired`, `alert CertificateRequired`), for searching
/// and for those who know rustls's or webpki's words.
fn tag(refusal: &rustls::Error) -> String {
    match refusal {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            other.0.to_string()
        }
        rustls::Error::InvalidCertificate(cert) => {
            let debug = format!("{cert:?}");
            let name = debug.split(['{', '(', ' ']).next().unwrap_or_default();
            name.strip_suffix("Context").unwrap_or(name).to_string()
        }
        rustls::Error::AlertReceived(alert) => format!("alert {alert:?}"),
        other => format!("{other:?}"),
    }
}

/// The rustls error inside `error`, however ureq and `io::Error` wrap it
/// (ureq returns a failed handshake as an `io::Error` holding it, and
/// `into_io` wraps other ureq errors in an `io::Error`).
fn rustls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut current = Some(error);
    // A bounded walk: a chain is a few links long.
    for _ in 0..16 {
        let e = current?;
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        current = match e.downcast_ref::<ureq::Error>() {
            Some(ureq::Error::Rustls(r)) => return Some(r),
            Some(ureq::Error::Io(io)) => io.get_ref().map(|i| i as _),
            Some(_) => None,
            None => match e.downcast_ref::<std::io::Error>() {
                Some(io) => io.get_ref().map(|i| i as _),
                None => e.source(),
            },
        };
    }
    None
}

/// `scheme://host[:port]` of `url`: no credentials, path, query or fragment
/// (any of them may hold a secret).
fn origin(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "the server".into();
    };
    let authority = &rest[..rest.find(['/', '?', '#', '\\']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{}", crate::error::truncate_for_message(host))
}

/// A subjectAltName entry as webpki describes it (`DnsName("a.example")`,
/// `IpAddress(10.0.0.1)`), in openssl's words (`DNS:a.example`, `IP:10.0.0.1`).
fn san(name: &str) -> String {
    let shown = if let Some(dns) = name
        .strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
    {
        format!("DNS:{dns}")
    } else if let Some(ip) = name
        .strip_prefix("IpAddress(")
        .and_then(|n| n.strip_suffix(')'))
    {
        format!("IP:{ip}")
    } else {
        name.to_string()
    };
    // The names are the server's to choose: keep them short and printable.
    crate::error::truncate_for_message(&shown.replace(|c: char| c.is_control(), "?"))
}

/// `2024-05-01T12:00:00Z` for Unix seconds.
fn utc(t: u64) -> String {
    crate::clock::rfc3339(i64::try_from(t).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_leave_out_credentials_paths_and_queries() {
        assert_eq!(
            origin("https://user:s3cr3t@etcd.example.com:2379/v3/kv?token=s3cr3t#x"),
            "https://etcd.example.com:2379"
        );
        assert_eq!(origin("https://[::1]:2379"), "https://[::1]:2379");
        assert_eq!(origin("s3cr3t"), "the server");
    }

    #[test]
    fn subject_alt_names_in_openssl_words() {
        assert_eq!(san("DnsName(\"etcd.example.com\")"), "DNS:etcd.example.com");
        assert_eq!(san("IpAddress(10.9.9.9)"), "IP:10.9.9.9");
        assert_eq!(san("DirectoryName"), "DirectoryName");
        assert_eq!(san("DnsName(\"a\nb\")"), "DNS:a?b");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(978_307_200), "2001-01-01T00:00:00Z");
        assert_eq!(utc(3_786_912_000), "2090-01-01T00:00:00Z");
    }

    /// What the walk finds where ureq and `io::Error` put a handshake error.
    #[test]
    fn finds_the_rustls_error_however_wrapped() {
        let refused = || rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let trust = TrustSettings {
            ca_bundle: "ca_bundle_pem",
            ca_bundle_given: true,
            client_certificate: None,
        };
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refused());
        let direct = ureq::Error::Io(io);
        let wrapped = ureq::Error::Rustls(refused()).into_io();
        for e in [&direct as &(dyn std::error::Error + 'static), &wrapped] {
            let text = explain_refusal("https://h:1/p?q=s3cr3t", e, &trust).unwrap();
            assert!(
                text.starts_with("TLS with https://h:1 refused (UnknownIssuer): "),
                "{text}"
            );
            assert!(text.contains("ca_bundle_pem"), "{text}");
        }
        let other = ureq::Error::Io(std::io::Error::other("connection refused"));
        assert!(explain_refusal("https://h:1", &other, &trust).is_none());
    }
}
