//! `wid keyring ...`: keystore files (or, with `--etcd`, the replicated
//! keyring), their keys and what relying parties fetch.
//!
//! Every command that changes a keystore file saves it with `Keyring::save`
//! (mode 0600, temp file + fsync + rename) and prints what changed. With
//! `--etcd` each change is one `EtcdKeyring` transaction instead (nothing is
//! saved locally), and `wid keyring migrate` copies keys between the two.
//!
//! The commands on the keys are written once for either store: `lifecycle`
//! (init, rotate, plan, promote, deprecate) and `show` (list, jwks, oidc).
//! How a change is made is `file`'s on a keystore file's keyring and
//! `etcd`'s as a transaction; `change` prints what changed (and saves a
//! keystore file). `migrate` copies keys between the two stores, `custody`
//! converts a keystore file between plaintext and wrapped (wrap, unwrap,
//! rewrap, generate-kek), and `flags` holds the flags several commands share.

mod change;
mod custody;
mod etcd;
mod export;
mod file;
mod flags;
mod lifecycle;
mod migrate;
mod policy;
mod retire;
mod show;
mod status;

use clap::Subcommand;

use crate::CliError;
use crate::output::Ctx;

pub(crate) use etcd::refuse_empty_prefix;
pub(crate) use flags::PolicyArgs;

#[derive(Debug, Subcommand)]
pub(crate) enum KeyringCommand {
    /// Create a keystore with one active key per --alg (default EdDSA);
    /// refuses to overwrite an existing file (with --etcd: to add to a
    /// prefix that already holds keys).
    Init(lifecycle::InitArgs),
    /// Make a new active key of --alg (default EdDSA); the previous one
    /// becomes inactive and keeps verifying. With --etcd the first key is
    /// active at once and later ones are prepublished for the lead time
    /// first (--immediate: at once).
    Rotate(lifecycle::RotateArgs),
    /// Show every key (or, with --purpose, those of one purpose): ID,
    /// algorithm, purpose, state and times.
    List(show::ListArgs),
    /// Show what the rotation policy says to do now (--apply does it).
    Plan(lifecycle::PlanArgs),
    /// Make a key the active key of its algorithm now.
    Promote(lifecycle::KeyArgs),
    /// Take an inactive or prepublished key out of the JWKS; it verifies no
    /// more. Refused while tokens it signed may still be valid (give
    /// --longest-ttl to let wid check) unless --force.
    Deprecate(lifecycle::DeprecateArgs),
    /// Print the JWKS relying parties fetch (/.well-known/jwks.json), or
    /// with --format pem each key as a PEM public key; with --purpose wit the
    /// WIT key set (/wit/jwks.json) instead, for receivers of WITs only.
    Jwks(show::JwksArgs),
    /// Write the documents `wid serve` serves as static files under --dir
    /// (.well-known/jwks.json and, with --issuer,
    /// .well-known/openid-configuration), byte for byte, for a bucket or a
    /// CDN.
    Export(export::ExportArgs),
    /// Print the OIDC discovery document (/.well-known/openid-configuration).
    Oidc(show::OidcArgs),
    /// Copy a keystore file's keys into an empty replicated keyring in etcd
    /// (wrapped by the KEK), or with --to-keystore the replicated keys into
    /// a new keystore file.
    Migrate(migrate::MigrateArgs),
    /// Wrap a plaintext keystore with --kek-file (keystore version 3): the
    /// file then yields no key without the KEK.
    Wrap(custody::KeystoreArgs),
    /// Write a wrapped keystore back in plaintext (version 2): anyone who can
    /// read the file then holds the keys.
    Unwrap(custody::KeystoreArgs),
    /// Wrap a keystore's keys again: with --new-kek-file or
    /// --new-transit-key, move them to another KEK; without, rewrap them with
    /// their own KEK (fresh nonces; a Transit key's newest version).
    /// The file is written sealed: its key states, purposes, times and
    /// policy under a MAC the KEK authenticates (a keystore of the format
    /// before is sealed this way; check `wid keyring list` first).
    Rewrap(custody::RewrapArgs),
    /// Make a new KEK file (32 random bytes, base64, mode 0600) for --kek-file;
    /// never replaces an existing file.
    GenerateKek(custody::GenerateKekArgs),
    /// Show or set the policy stored with the keys (rotation threshold,
    /// longest token TTL, lead time, retention), which every process of the
    /// keyring follows.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// What the keyring is doing, read without the KEK: the elected rotator
    /// and since when, the stored policy, the next planned change, the live
    /// servers (with --etcd) and every key's state and times.
    Status(status::StatusArgs),
    /// Remove deprecated keys whose tokens have all expired (all of them,
    /// or the KIDs given; others are refused, saying when they may go).
    Remove(retire::RemoveArgs),
    /// Revoke a compromised key: out of every JWKS at once (replaced first
    /// if it signs), refused by every verifier fed by the keyring; prints
    /// what each relying party must do.
    Revoke(retire::RevokeArgs),
}

pub(crate) fn run(cmd: KeyringCommand, ctx: &Ctx) -> Result<(), CliError> {
    match cmd {
        KeyringCommand::Init(a) => lifecycle::init(&a, ctx),
        KeyringCommand::Rotate(a) => lifecycle::rotate(&a, ctx),
        KeyringCommand::List(a) => show::list(&a, ctx),
        KeyringCommand::Plan(a) => lifecycle::plan(&a, ctx),
        KeyringCommand::Promote(a) => lifecycle::promote(&a, ctx),
        KeyringCommand::Deprecate(a) => lifecycle::deprecate(&a, ctx),
        KeyringCommand::Jwks(a) => show::jwks(&a, ctx),
        KeyringCommand::Oidc(a) => show::oidc(&a, ctx),
        KeyringCommand::Export(a) => export::run(&a, ctx),
        KeyringCommand::Migrate(a) => migrate::run(&a, ctx),
        KeyringCommand::Wrap(a) => custody::wrap(&a, ctx),
        KeyringCommand::Unwrap(a) => custody::unwrap(&a, ctx),
        KeyringCommand::Rewrap(a) => custody::rewrap(&a, ctx),
        KeyringCommand::GenerateKek(a) => custody::generate_kek(&a, ctx),
        KeyringCommand::Policy(c) => policy::run(&c, ctx),
        KeyringCommand::Status(a) => status::run(&a, ctx),
        KeyringCommand::Remove(a) => retire::remove(&a, ctx),
        KeyringCommand::Revoke(a) => retire::revoke(&a, ctx),
    }
}
