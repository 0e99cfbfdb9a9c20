//! TLS for `wid serve` (`--tls-cert`, `--tls-key`, `--tls-client-ca`):
//! rustls (TLS 1.2 and 1.3, ring as ureq's), the certificate and key
//! reloaded when their files change (certificates rotate without a
//! restart; a bad pair keeps the last good one served), and client
//! certificates verified against a CA when one is given, but not required at
//! the handshake: the JWKS and discovery routes stay open to relying parties
//! that cannot present one (Vault, Consul), and the other routes refuse a
//! connection without one.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, version};

use super::metrics::Metrics;
use crate::CliError;
use crate::etcd_args::read_file;
use crate::stamp::{Stamp, stamp};

/// The files TLS is served from.
pub(super) struct TlsFiles {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    pub(super) client_ca: Option<PathBuf>,
}

/// The current certificate, swapped on reload; every handshake reads it.
#[derive(Debug)]
struct Resolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The TLS side of the server.
pub(super) struct Tls {
    pub(super) acceptor: TlsAcceptor,
    resolver: Arc<Resolver>,
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    /// What the certificate and key files looked like when last loaded
    /// (`None`s after a failure to read them: tried again at the next look).
    stamps: Mutex<(Option<Stamp>, Option<Stamp>)>,
    /// The last reload failure, reported once until it changes.
    last_error: Mutex<Option<String>>,
    /// Whether routes other than the documents need a client certificate.
    pub(super) client_auth: bool,
}

/// The certificate chain and key of `files`, checked to belong together.
fn load_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, CliError> {
    let bad = |flag: &str, path: &Path, why: String| {
        CliError::new(
            workload_identity::ResultCode::DecodeError,
            format!("{flag} {}: {why}", path.display()),
        )
    };
    let cert_pem = read_file(&files.cert, "--tls-cert", false)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            bad(
                "--tls-cert",
                &files.cert,
                format!("not a PEM certificate chain: {e}"),
            )
        })?;
    if chain.is_empty() {
        return Err(bad(
            "--tls-cert",
            &files.cert,
            "holds no CERTIFICATE block; expected the server's certificate, then its chain".into(),
        ));
    }
    // The key is a secret: a file group or others can read is refused.
    let key_pem = read_file(&files.key, "--tls-key", true)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        bad(
            "--tls-key",
            &files.key,
            format!("not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        bad(
            "--tls-key",
            &files.key,
            format!(
                "cannot be used with --tls-cert {}: {e}",
                files.cert.display()
            ),
        )
    })
}

impl Tls {
    /// TLS from `files`; fails (before anything is served) when they cannot
    /// be used.
    pub(super) fn new(files: TlsFiles) -> Result<Tls, CliError> {
        let provider = Arc::new(ring::default_provider());
        let stamps = (stamp(&files.cert), stamp(&files.key));
        let pair = load_pair(&files, &provider)?;
        let resolver = Arc::new(Resolver {
            current: ArcSwap::from_pointee(pair),
        });
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&version::TLS13, &version::TLS12])
            .map_err(|e| {
                CliError::new(
                    workload_identity::ResultCode::InvalidArgument,
                    e.to_string(),
                )
            })?;
        let builder = match &files.client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => {
                let pem = read_file(path, "--tls-client-ca", false)?;
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        CliError::new(
                            workload_identity::ResultCode::DecodeError,
                            format!("--tls-client-ca {}: not a PEM bundle: {e}", path.display()),
                        )
                    })?;
                    roots.add(cert).map_err(|e| {
                        CliError::new(
                            workload_identity::ResultCode::DecodeError,
                            format!("--tls-client-ca {}: {e}", path.display()),
                        )
                    })?;
                }
                if roots.is_empty() {
                    return Err(CliError::new(
                        workload_identity::ResultCode::DecodeError,
                        format!(
                            "--tls-client-ca {}: holds no CERTIFICATE block; expected the CA certificates that sign client certificates",
                            path.display()
                        ),
                    ));
                }
                // Verified when presented, not required: the documents stay
                // reachable without one (see the module docs).
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| {
                            CliError::new(
                                workload_identity::ResultCode::InvalidArgument,
                                format!("--tls-client-ca {}: {e}", path.display()),
                            )
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Tls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            resolver,
            client_auth: files.client_ca.is_some(),
            files,
            provider,
            stamps: Mutex::new(stamps),
            last_error: Mutex::new(None),
        })
    }

    /// Loads the certificate and key again if either file changed; a pair
    /// that cannot be used is reported and the last good one kept (tried
    /// again when the files change again).
    pub(super) fn reload_if_changed(&self, metrics: &Metrics) {
        let now = (stamp(&self.files.cert), stamp(&self.files.key));
        let mut last = self.stamps.lock().unwrap_or_else(PoisonError::into_inner);
        if *last == now && now.0.is_some() && now.1.is_some() {
            return;
        }
        *last = now;
        drop(last);
        let mut last_error = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match load_pair(&self.files, &self.provider) {
            Ok(pair) => {
                self.resolver.current.store(Arc::new(pair));
                metrics.tls_reloads.fetch_add(1, Ordering::Relaxed);
                *last_error = None;
                serve_log!(
                    Info,
                    "reloaded the TLS certificate {}",
                    self.files.cert.display()
                );
            }
            Err(e) => {
                if e.code == workload_identity::ResultCode::IoError {
                    // Unreadable now (out of descriptors, mid-replace): look
                    // again at the next check even if nothing changes.
                    *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = (None, None);
                }
                if last_error.as_deref() != Some(e.message.as_str()) {
                    metrics.tls_reload_failures.fetch_add(1, Ordering::Relaxed);
                    serve_log!(
                        Warn,
                        "TLS reload failed, serving the last good certificate: {}",
                        e.message
                    );
                    *last_error = Some(e.message);
                }
            }
        }
    }
}
