//! [`SpiffeBundleSource`]: a peer trust domain's SPIFFE bundle, followed
//! through its bundle endpoint. The fetching, scheduling, single flight and
//! failure handling are [`RemoteJwks`]'s; this type names the bundle's
//! rules (sequence, refresh hint, no redirects) and the trust domain.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{RefreshReport, Refresher, RemoteJwks, RemoteJwksBuilder, RemoteJwksStats, Source};
use crate::clock::Clock;
use crate::error::Result;
use crate::keyring::Keyring;
use crate::profile::SpiffeProfile;

/// A peer trust domain's SPIFFE bundle, kept current (cargo feature
/// `remote-jwks`): SPIFFE federation's consuming side.
///
/// The source fetches the bundle at the peer's bundle endpoint URL (SPIFFE
/// Federation, `https_web` profile: HTTPS with a web PKI certificate —
/// Mozilla's roots, or only the CA bundle given) and keeps a verify-only
/// [`Keyring`] in step with it: the bundle's `jwt-svid` entries become
/// bearer keys (they verify JWT-SVIDs), its `wit-svid` entries WIT keys
/// (they verify WITs only), and `x509-svid` entries and other uses are
/// skipped (an entry with `use` `sig` or none, which the SPIFFE bundle
/// format does not allow, is taken as a bearer key, as in a JWKS). Give [`SpiffeBundleSource::keyring`] to a verifier (or to a
/// trust set, under the peer's trust domain).
///
/// * **Refresh hint.** The next fetch is due after the bundle's
///   `spiffe_refresh_hint` (else the response's `max-age`, else the default
///   refresh), clamped to the refresh bounds (default 1 minute to 1 day):
///   a peer cannot make us fetch every second nor keep a key for a year.
/// * **Sequence.** Once the source holds a bundle with a `spiffe_sequence`,
///   a bundle whose sequence is lower, or that carries none, is a rollback
///   and refused: the keyring keeps the held bundle, the refusal is
///   counted in [`RemoteJwksStats::sequence_refusals`] (and as a failure, its
///   message in `last_error`) and logged at debug level, until the operator
///   calls [`SpiffeBundleSource::reset_sequence`]. An equal sequence
///   is taken (a publisher may change its keys without raising it; `wid
///   serve`'s sequence can stay put on a deprecation, see
///   [`Keyring::spiffe_sequence`]).
/// * **Failures keep the last good bundle**, as [`RemoteJwks`]: the peer down,
///   a status other than 200, a redirect (none is followed), a body over
///   the limit, not a bundle, a private or malformed key: nothing changes,
///   and the next attempt is due after the minimum refresh.
/// * **Unknown kids** start a fetch, with the same cooldown and single
///   flight as [`RemoteJwks`].
///
/// Plain `http` only to a loopback host, and only with
/// [`SpiffeBundleSourceBuilder::allow_http_loopback`].
///
/// ```no_run
/// # // no_run: it needs a peer (tests/remote_jwks.rs starts one on loopback).
/// use std::sync::Arc;
/// use workload_identity::{Audience, MemoryStore, SpiffeBundleSource, Verifier};
///
/// let peer = SpiffeBundleSource::builder("prod.example.org", "https://wid.prod.example.org/spiffe/bundle.json")
///     .build()?;
/// peer.refresh()?;
/// let _refresher = peer.spawn_refresher()?;
/// let verifier = Verifier::builder(peer.keyring().clone(), Arc::new(MemoryStore::new()), Audience::new("billing")?)
///     .build();
/// # let _ = verifier;
/// println!("sequence {:?}", peer.stats().sequence);
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Clone)]
pub struct SpiffeBundleSource {
    source: RemoteJwks,
    trust_domain: Arc<str>,
}

impl fmt::Debug for SpiffeBundleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpiffeBundleSource")
            .field("trust_domain", &self.trust_domain)
            .field("source", &self.source)
            .finish()
    }
}

impl SpiffeBundleSource {
    /// A source for the trust domain `trust_domain` (e.g. `example.org`)
    /// whose bundle endpoint is `bundle_url` (`https://…`).
    pub fn builder(trust_domain: &str, bundle_url: &str) -> SpiffeBundleSourceBuilder {
        SpiffeBundleSourceBuilder {
            trust_domain: trust_domain.to_string(),
            inner: RemoteJwksBuilder::new(Source::SpiffeBundle(bundle_url.to_string())),
        }
    }

    /// The peer's trust domain, as given.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The keyring this source keeps in step with the bundle: the peer's
    /// JWT-SVID authorities (bearer keys) and WIT-SVID authorities (WIT
    /// keys), verify-only.
    pub fn keyring(&self) -> &Keyring {
        self.source.keyring()
    }

    /// Fetches now, on this thread (after a fetch in flight finishes). On
    /// error the keyring is unchanged: network and HTTP failures (a redirect
    /// included) are `IoError`; a body that is no acceptable bundle (too
    /// large, too many keys, not JSON, a `spiffe_sequence` lower than the
    /// held one) is `DecodeError`; a key set the keyring refuses fails with
    /// its error.
    pub fn refresh(&self) -> Result<RefreshReport> {
        self.source.refresh()
    }

    /// Fetches on this thread if a fetch is due at `now_ms` (clock
    /// milliseconds) and none is in flight; `Ok(None)` otherwise.
    pub fn refresh_if_due(&self, now_ms: i64) -> Result<Option<RefreshReport>> {
        self.source.refresh_if_due(now_ms)
    }

    /// When the next fetch is due (clock milliseconds).
    pub fn next_refresh_ms(&self) -> i64 {
        self.source.next_refresh_ms()
    }

    /// What this source has done so far (`jwks_uri` is the bundle URL;
    /// `sequence` and `sequence_refusals` are the bundle's).
    pub fn stats(&self) -> RemoteJwksStats {
        self.source.stats()
    }

    /// Starts a thread that fetches whenever a fetch is due; dropping the
    /// handle stops it.
    pub fn spawn_refresher(&self) -> Result<Refresher> {
        self.source.spawn_refresher()
    }

    /// The operator's reset of the rollback protection: forgets the
    /// `spiffe_sequence` held, so that the next bundle is taken whatever its
    /// sequence (or none). For a peer that restarted its sequence on purpose
    /// (a rebuilt trust domain); the keys held stay until that fetch. Returns
    /// the sequence forgotten, and logs it (warn). A new
    /// source (a restart of this process) starts with no sequence held too.
    pub fn reset_sequence(&self) -> Option<u64> {
        let forgotten = self.source.reset_sequence();
        log::warn!(
            "SPIFFE bundle source for {}: sequence reset by the operator (held {})",
            self.trust_domain,
            forgotten.map_or("none".to_string(), |n| n.to_string())
        );
        forgotten
    }
}

/// Builds a [`SpiffeBundleSource`]; the trust domain and the bundle URL
/// are the required inputs.
pub struct SpiffeBundleSourceBuilder {
    trust_domain: String,
    inner: RemoteJwksBuilder,
}

impl fmt::Debug for SpiffeBundleSourceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpiffeBundleSourceBuilder")
            .field("trust_domain", &self.trust_domain)
            .field("inner", &self.inner)
            .finish()
    }
}

impl SpiffeBundleSourceBuilder {
    fn map(self, f: impl FnOnce(RemoteJwksBuilder) -> RemoteJwksBuilder) -> Self {
        SpiffeBundleSourceBuilder {
            trust_domain: self.trust_domain,
            inner: f(self.inner),
        }
    }

    /// Trusts only the certificates of this PEM bundle instead of Mozilla's
    /// roots (a peer whose endpoint certificate a private CA signed).
    pub fn ca_bundle_pem(self, pem: &[u8]) -> Self {
        self.map(|b| b.ca_bundle_pem(pem))
    }

    /// Allows plain `http` to a loopback host (tests, a sidecar); default off.
    pub fn allow_http_loopback(self, allow: bool) -> Self {
        self.map(|b| b.allow_http_loopback(allow))
    }

    /// The whole time one request may take (default 5 s).
    pub fn timeout(self, timeout: Duration) -> Self {
        self.map(|b| b.timeout(timeout))
    }

    /// The bounds on the time between fetches, whatever the bundle's
    /// `spiffe_refresh_hint` says (default 1 minute to 1 day); the minimum is
    /// also the wait after a failure. `build` refuses `min > max`.
    pub fn refresh_bounds(self, min: Duration, max: Duration) -> Self {
        self.map(|b| b.refresh_bounds(min, max))
    }

    /// The time between fetches when the bundle has no refresh hint and the
    /// response no `max-age` (default 1 hour; clamped to the bounds).
    pub fn default_refresh(self, interval: Duration) -> Self {
        self.map(|b| b.default_refresh(interval))
    }

    /// The least time between two fetches started by unknown kids (default 15 s).
    pub fn unknown_kid_cooldown(self, cooldown: Duration) -> Self {
        self.map(|b| b.unknown_kid_cooldown(cooldown))
    }

    /// The largest body read (default 512 KiB).
    pub fn max_body_bytes(self, max: usize) -> Self {
        self.map(|b| b.max_body_bytes(max))
    }

    /// The most entries a bundle may list, skipped ones included (default 100).
    pub fn max_keys(self, max: usize) -> Self {
        self.map(|b| b.max_keys(max))
    }

    /// The clock that schedules refreshes (default the system clock).
    pub fn clock(self, clock: Arc<dyn Clock>) -> Self {
        self.map(|b| b.clock(clock))
    }

    /// The source, with an empty keyring and the first fetch due at once.
    /// `InvalidArgument` for a trust domain that is not one (lower-case
    /// letters, digits, `.`, `-`, `_`; 1 to 255 bytes), and for what
    /// [`RemoteJwksBuilder::build`] refuses (the URL, the CA bundle, the
    /// bounds).
    pub fn build(self) -> Result<SpiffeBundleSource> {
        SpiffeProfile::new(&self.trust_domain)?;
        Ok(SpiffeBundleSource {
            source: self.inner.build()?,
            trust_domain: self.trust_domain.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ResultCode::InvalidArgument;

    #[test]
    fn builder_checks_trust_domain_and_url() {
        let code = |td: &str, url: &str| {
            SpiffeBundleSource::builder(td, url)
                .build()
                .map(drop)
                .map_err(|e| e.code())
        };
        assert_eq!(code("example.org", "https://example.org/bundle"), Ok(()));
        assert_eq!(
            code("Example.org", "https://example.org/bundle"),
            Err(InvalidArgument)
        );
        assert_eq!(code("", "https://example.org/bundle"), Err(InvalidArgument));
        assert_eq!(
            code("example.org", "http://example.org/bundle"),
            Err(InvalidArgument)
        );
        let e = SpiffeBundleSource::builder("example.org", "http://10.0.0.1/b")
            .allow_http_loopback(true)
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("bundle_url"), "{e}");
    }
}
