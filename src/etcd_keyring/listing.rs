//! Listing the whole prefix into the copy: once at the start (checking the
//! KEK against the `wrapping` record, and writing that record on an empty
//! prefix), and again after a compaction, a cut-off, or when asked.

use std::collections::BTreeMap;
use std::time::Instant;

use zeroize::Zeroizing;

use super::sync::{SyncOutcome, sync};
use super::view::{Entry, KEYS, WRAPPING};
use super::{Counters, Shared};
use crate::codec;
use crate::custody::Wrapping;
use crate::error::{Error, Result, truncate_for_message};
use crate::state::StoreError;
use crate::state::etcd::client::Listed;

/// Lists the whole prefix (linearizable, one revision, page by page).
type Listing = (
    i64,
    BTreeMap<String, Entry>,
    std::collections::BTreeSet<Vec<u8>>,
);

fn list(shared: &Shared) -> std::result::Result<Listing, StoreError> {
    let mut entries = BTreeMap::new();
    let mut foreign = std::collections::BTreeSet::new();
    let revision = shared
        .client
        .list_prefix(shared.prefix.as_bytes(), 500, |item| {
            if let Listed::Pair {
                suffix,
                value,
                mod_revision,
            } = item
            {
                let value = Zeroizing::new(value);
                match String::from_utf8(suffix.to_vec()) {
                    Ok(suffix) => {
                        entries.insert(
                            suffix,
                            Entry {
                                mod_revision,
                                value,
                            },
                        );
                    }
                    Err(_) => {
                        foreign.insert(suffix.to_vec());
                    }
                }
            }
            Ok(true)
        })?
        .unwrap_or_default(); // never stopped: the visitor always goes on
    Ok((revision, entries, foreign))
}

/// Checks the `wrapping` record of a listing against this process's KEK.
fn check_wrapping(shared: &Shared, entries: &BTreeMap<String, Entry>) -> Result<()> {
    let has_keys = entries.keys().any(|k| k.starts_with(KEYS));
    match (&shared.wrapper, entries.get(WRAPPING)) {
        (Some(w), Some(e)) => {
            let map: Wrapping = codec::decode(&e.value).map_err(|_| Error::KeyCustody {
                custodian: format!("KEK {}", w.kek_id()),
                reason: format!(
                    "the wrapping record at {}{WRAPPING} does not decode as a Wrapping map (Kind, KekID)",
                    shared.prefix
                ),
            })?;
            map.check(w.as_ref(), "replicated keyring")
        }
        (Some(w), None) if has_keys => Err(Error::KeyCustody {
            custodian: format!("KEK {}", w.kek_id()),
            reason: format!(
                "the keyring at {} holds keys but no wrapping record: its keys are plaintext, and a KEK was given (copy them into a wrapped keyring with `wid keyring migrate`)",
                shared.prefix
            ),
        }),
        (Some(_), None) | (None, None) => Ok(()),
        (None, Some(e)) => {
            let named = codec::decode::<Wrapping>(&e.value)
                .map(|m| format!("{:?} KEK {:?}", m.kind, truncate_for_message(&m.kek_id)))
                .unwrap_or_else(|_| "a KEK".into());
            Err(Error::KeyCustody {
                custodian: named.clone(),
                reason: format!(
                    "the keyring at {} is wrapped by {named} and no KEK was given (insecure_plaintext_keys() never reads wrapped keys): give its KEK",
                    shared.prefix
                ),
            })
        }
    }
}

/// The first listing: checks the KEK against the `wrapping` record (writing
/// it with `create_wrapping` when a KEK is given and the prefix is empty, then
/// checking again: two servers with different KEKs may race to write it) and
/// builds the keyring.
/// Fails when no record could be unwrapped although some exist (the KMS did
/// not answer): a server must not start with no keys. Records that cannot be
/// used are left out and reported (`stats().bad_records`, the log).
pub(crate) fn open(
    shared: &Shared,
    create_wrapping: impl FnOnce(&Shared, &dyn crate::custody::KeyWrapper) -> Result<()>,
) -> Result<()> {
    let (_, entries, _) = list(shared).map_err(|e| shared.unavailable(e.message))?;
    check_wrapping(shared, &entries)?;
    if let (Some(w), None) = (&shared.wrapper, entries.get(WRAPPING)) {
        create_wrapping(shared, w.as_ref())?;
    }
    let outcome = relist_checked(shared, true)?;
    if outcome.unwrapped == 0 && outcome.unwrap_failures > 0 {
        return Err(Error::KeyCustody {
            custodian: shared
                .wrapper
                .as_ref()
                .map_or_else(|| "plaintext".into(), |w| format!("KEK {}", w.kek_id())),
            reason: format!(
                "none of the {} keys at {} could be unwrapped: {}",
                outcome.unwrap_failures,
                shared.prefix,
                outcome.first_problem.unwrap_or_default()
            ),
        });
    }
    Ok(())
}

/// Lists the prefix again and replaces the copy (after compaction, after a
/// cut-off, or when asked).
pub(crate) fn relist(shared: &Shared) -> Result<()> {
    relist_checked(shared, false).map(drop)
}

fn relist_checked(shared: &Shared, opening: bool) -> Result<SyncOutcome> {
    let sent_at = Instant::now();
    let (revision, entries, foreign) = list(shared).map_err(|e| shared.unavailable(e.message))?;
    let mismatch = check_wrapping(shared, &entries).err();
    if let (true, Some(e)) = (opening, &mismatch) {
        return Err(match e {
            Error::KeyCustody { custodian, reason } => Error::KeyCustody {
                custodian: custodian.clone(),
                reason: reason.clone(),
            },
            other => shared.unavailable(other.to_string()),
        });
    }
    if opening {
        // Before the first sync: no record is followed unauthenticated.
        shared.take_record_key(&entries)?;
    }
    {
        let mut view = shared.lock_view();
        if revision < view.revision {
            // A linearizable listing never goes back in one cluster: this
            // one was restored from an older snapshot (without
            // --bump-revision), or another cluster answers at these
            // endpoints. Its records are what etcd holds now; the copy takes
            // them (the previous revision would hide every change made from
            // here on, which reuses revisions the copy has seen).
            let before = view.revision;
            log::warn!(
                "replicated keyring at {}: etcd's revision went back from {before} to {revision} (a cluster restored from an older snapshot without --bump-revision, or another cluster at these endpoints): listing the keys again and following etcd as it now is; keys and changes made after the snapshot are gone from etcd",
                shared.prefix
            );
            view.note(format!(
                "etcd's revision went back from {before} to {revision}: listed again"
            ));
            Counters::bump(&shared.counters.revision_resets);
            view.revision = 0;
            view.synced = 0;
            // A restored cluster's manifest is older: followed, as etcd is.
            view.followed_sequence = 0;
        }
        if revision >= view.revision {
            view.revision = revision;
            view.entries = entries;
            view.foreign = foreign;
            view.wrapping_mismatch = mismatch.map(|e| e.to_string());
            // The listing is itself the proof: linearizable, at one revision.
            view.proven_at = Some(sent_at);
            view.stood_down.clear();
            if view.warned_cut_off {
                log::info!(
                    "replicated keyring at {}: in touch with etcd again",
                    shared.prefix
                );
                view.warned_cut_off = false;
            }
        }
    }
    Counters::bump(&shared.counters.relists);
    let outcome = sync(shared);
    shared.advanced.notify_all();
    Ok(outcome)
}
