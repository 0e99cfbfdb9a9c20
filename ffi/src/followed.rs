//! What the two followed key sources' C handles share (`wid_remote_jwks`,
//! `wid_spiffe_bundle_source`): the Rust source behind the handle, its
//! refresher once started, and the keyring, refresh, refresher and stats
//! calls, answered the same way for both (a SPIFFE bundle source adds its
//! trust domain, its `spiffe_sequence` and its refresh hint).

use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use super::fetch_tuning::millis_out;
use super::handle::{self, Castable, out_optional, require_out};
use super::keyring::wid_keyring;
use super::wid_bytes;
use workload_identity::{
    Error, KeyId, Keyring, RefreshReport, Refresher, RemoteJwks, RemoteJwksStats,
    SpiffeBundleSource,
};

/// A library source a handle can follow.
pub(crate) trait Follows: Send + Sync + 'static {
    /// The JSON name of the URL it fetches (`jwks_uri`, `bundle_url`).
    const URL_NAME: &'static str;
    /// Its keyring.
    fn keyring(&self) -> &Keyring;
    /// A fetch now.
    fn refresh(&self) -> Result<RefreshReport, Error>;
    /// A thread that fetches when due.
    fn spawn_refresher(&self) -> Result<Refresher, Error>;
    /// Its counters.
    fn stats(&self) -> RemoteJwksStats;
    /// What only this source adds to a refresh report.
    fn report_extra(&self, _report: &RefreshReport, _json: &mut Map<String, Value>) {}
    /// What only this source adds to its stats.
    fn stats_extra(&self, _stats: &RemoteJwksStats, _json: &mut Map<String, Value>) {}
}

/// The methods a library source has under the same names.
macro_rules! delegate {
    ($source:ty) => {
        fn keyring(&self) -> &Keyring {
            <$source>::keyring(self)
        }
        fn refresh(&self) -> Result<RefreshReport, Error> {
            <$source>::refresh(self)
        }
        fn spawn_refresher(&self) -> Result<Refresher, Error> {
            <$source>::spawn_refresher(self)
        }
        fn stats(&self) -> RemoteJwksStats {
            <$source>::stats(self)
        }
    };
}

impl Follows for RemoteJwks {
    const URL_NAME: &'static str = "jwks_uri";
    delegate!(RemoteJwks);
}

impl Follows for SpiffeBundleSource {
    const URL_NAME: &'static str = "bundle_url";
    delegate!(SpiffeBundleSource);
    fn report_extra(&self, report: &RefreshReport, json: &mut Map<String, Value>) {
        json.insert(
            "refresh_hint_ms".into(),
            json!(report.refresh_hint.map(millis_out)),
        );
        json.insert("sequence".into(), json!(report.sequence));
    }
    fn stats_extra(&self, stats: &RemoteJwksStats, json: &mut Map<String, Value>) {
        json.insert("trust_domain".into(), json!(self.trust_domain()));
        json.insert("sequence".into(), json!(stats.sequence));
        json.insert("sequence_refusals".into(), json!(stats.sequence_refusals));
    }
}

/// What a source handle holds: the source, and its refresher once started
/// (dropped with the last reference, which stops it).
pub(crate) struct Followed<S> {
    pub(crate) source: S,
    refresher: Mutex<Option<Refresher>>,
}

impl<S> Followed<S> {
    /// A source with no refresher yet.
    pub(crate) fn new(source: S) -> Followed<S> {
        Followed {
            source,
            refresher: Mutex::new(None),
        }
    }
}

/// # Safety
/// `h` NULL or a live handle from this library.
unsafe fn followed<'a, C, S>(h: *const C, name: &'static str) -> Result<&'a Followed<S>, Error>
where
    C: Castable<Rust = Followed<S>>,
{
    // SAFETY: `h` is NULL or a live handle (this function's contract).
    unsafe { handle::borrow(h, name) }
}

/// The source's keyring, shared, in `*out`.
///
/// # Safety
/// `h` NULL or a live handle; `out` NULL or writable.
pub(crate) unsafe fn keyring<C, S>(
    h: *const C,
    name: &'static str,
    out: *mut *mut wid_keyring,
) -> Result<(), Error>
where
    C: Castable<Rust = Followed<S>>,
    S: Follows,
{
    // SAFETY: the contract.
    let keyring = unsafe { followed(h, name)? }.source.keyring().clone();
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe { handle::out(out, "out", || handle::into_raw::<wid_keyring>(keyring)) }
}

/// A fetch now; its report as JSON in `*out` when `out` is not NULL.
///
/// # Safety
/// `h` NULL or a live handle; `out` NULL or writable.
pub(crate) unsafe fn refresh<C, S>(
    h: *const C,
    name: &'static str,
    out: *mut wid_bytes,
) -> Result<(), Error>
where
    C: Castable<Rust = Followed<S>>,
    S: Follows,
{
    // SAFETY: the contract.
    let source = &unsafe { followed(h, name)? }.source;
    let report = source.refresh()?;
    let ids = |ids: &[KeyId]| {
        ids.iter()
            .map(|k| k.as_str().to_string())
            .collect::<Vec<_>>()
    };
    let mut json = Map::new();
    json.insert(S::URL_NAME.into(), json!(report.jwks_uri));
    json.insert("keys".into(), json!(ids(&report.keys)));
    json.insert("added".into(), json!(ids(&report.added)));
    json.insert("removed".into(), json!(ids(&report.removed)));
    json.insert("skipped".into(), json!(report.skipped));
    json.insert("max_age_ms".into(), json!(report.max_age.map(millis_out)));
    json.insert(
        "next_refresh_in_ms".into(),
        json!(millis_out(report.next_refresh_in)),
    );
    source.report_extra(&report, &mut json);
    // SAFETY: `out` is NULL or writable (the contract).
    unsafe {
        out_optional(out, || {
            wid_bytes::from_vec(Value::Object(json).to_string().into_bytes())
        })
    };
    Ok(())
}

/// Starts the source's refresher, once.
///
/// # Safety
/// `h` NULL or a live handle.
pub(crate) unsafe fn start_refresher<C, S>(h: *const C, name: &'static str) -> Result<(), Error>
where
    C: Castable<Rust = Followed<S>>,
    S: Follows,
{
    // SAFETY: the contract.
    let followed = unsafe { followed(h, name)? };
    // A panic while the lock was held left `None` or a running refresher.
    let mut running = followed
        .refresher
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if running.is_none() {
        *running = Some(followed.source.spawn_refresher()?);
    }
    Ok(())
}

/// The source's counters as JSON in `*out`.
///
/// # Safety
/// `h` NULL or a live handle; `out` NULL or writable.
pub(crate) unsafe fn stats<C, S>(
    h: *const C,
    name: &'static str,
    out: *mut wid_bytes,
) -> Result<(), Error>
where
    C: Castable<Rust = Followed<S>>,
    S: Follows,
{
    // SAFETY: the contract.
    let source = &unsafe { followed(h, name)? }.source;
    require_out(out, "out_json")?;
    let s = source.stats();
    let mut json = Map::new();
    json.insert(S::URL_NAME.into(), json!(s.jwks_uri));
    json.insert("fetches".into(), json!(s.fetches));
    json.insert("failures".into(), json!(s.failures));
    json.insert("unknown_kid_fetches".into(), json!(s.unknown_kid_fetches));
    json.insert(
        "unknown_kid_suppressed".into(),
        json!(s.unknown_kid_suppressed),
    );
    json.insert("stale".into(), json!(s.stale));
    json.insert("last_error".into(), json!(s.last_error));
    json.insert("last_attempt_ms".into(), json!(s.last_attempt_ms));
    json.insert("last_success_ms".into(), json!(s.last_success_ms));
    json.insert("next_refresh_ms".into(), json!(s.next_refresh_ms));
    json.insert("keys".into(), json!(s.keys));
    source.stats_extra(&s, &mut json);
    let text = Value::Object(json).to_string();
    // SAFETY: `out` is writable (checked non-NULL; the contract).
    unsafe { handle::out(out, "out_json", || wid_bytes::from_vec(text.into_bytes())) }
}
