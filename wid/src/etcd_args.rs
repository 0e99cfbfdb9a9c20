//! `--etcd ...`: the keyring replicated through etcd (`EtcdKeyring`) in
//! place of a keystore file, for `wid keyring`, `wid issue` and `wid serve`.
//!
//! The flags mirror the library's `EtcdConfig` (endpoints, CA bundle, client
//! certificate, user and password, plain http only when asked for) and
//! `EtcdKeyringBuilder` (prefix, KEK or the loudly named plaintext opt-in,
//! lead time). Secrets (the password, the client key) come only from files
//! that group and others cannot read, or the password from
//! `WID_ETCD_PASSWORD`; never from the command line, never printed.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};
use workload_identity::{
    DEFAULT_KEYRING_PREFIX, EtcdConfig, EtcdKeyring, KeyWrapper, Keyring, ResultCode,
    RotationPolicy,
};
use zeroize::Zeroizing;

use crate::output::{Ctx, parse_duration};
use crate::sources::{CustodyArgs, bad_flag, load_keystore};
use crate::{CliError, Exit};

/// Where `--etcd-user`'s password comes from when `--etcd-password-file` is
/// not given.
pub(crate) const PASSWORD_ENV: &str = "WID_ETCD_PASSWORD";

/// Where `--help` lists the etcd flags.
pub(crate) const HEADING: &str = "Replicated keyring (etcd)";

/// The largest CA bundle, certificate, key or password file read.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// The replicated keyring: where etcd is, how to reach it, and the prefix.
#[derive(Debug, Clone, Args)]
pub(crate) struct EtcdArgs {
    /// Use the keyring replicated through etcd instead of a keystore file:
    /// the client URLs of the cluster's members, comma-separated (or the flag
    /// repeated); the first is this host's own member. Keys in etcd are
    /// always wrapped: give --kek-file (or --transit-addr and --transit-key).
    #[arg(long, help_heading = HEADING, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub(crate) etcd: Vec<String>,
    /// The etcd prefix the keyring lives under (default
    /// /workload-identity/keyring/).
    #[arg(long, help_heading = HEADING, value_name = "PREFIX", requires = "etcd")]
    pub(crate) etcd_prefix: Option<String>,
    /// Trust only the CA certificates of this PEM bundle for the members'
    /// certificates (default: the Mozilla roots).
    #[arg(long, help_heading = HEADING, value_name = "PEM", requires = "etcd")]
    pub(crate) etcd_ca_bundle: Option<PathBuf>,
    /// Present this client certificate (PEM, leaf first) to members started
    /// with --client-cert-auth; needs --etcd-key.
    #[arg(long, help_heading = HEADING, value_name = "PEM", requires = "etcd", requires = "etcd_key")]
    pub(crate) etcd_cert: Option<PathBuf>,
    /// The private key of --etcd-cert (PEM; mode 0600: a file group or
    /// others can read is refused).
    #[arg(long, help_heading = HEADING, value_name = "PEM", requires = "etcd", requires = "etcd_cert")]
    pub(crate) etcd_key: Option<PathBuf>,
    /// Authenticate to etcd as this user (etcd's `auth enable`). The password
    /// comes from --etcd-password-file, else from WID_ETCD_PASSWORD; never
    /// from the command line.
    #[arg(long, help_heading = HEADING, value_name = "NAME", requires = "etcd")]
    pub(crate) etcd_user: Option<String>,
    /// The file holding --etcd-user's password (mode 0600; one trailing
    /// newline is ignored).
    #[arg(long, help_heading = HEADING, value_name = "FILE", requires = "etcd_user")]
    pub(crate) etcd_password_file: Option<PathBuf>,
    /// Allow http:// member URLs. Only for a network no one else can touch
    /// (loopback, a test): without TLS anyone on the path can forge etcd's
    /// answers and read the credentials.
    #[arg(long, help_heading = HEADING, requires = "etcd")]
    pub(crate) etcd_allow_plain_http: bool,
    /// INSECURE, for tests: keep the keys' private material in etcd in
    /// plaintext instead of wrapped by a KEK. Anyone who can read the prefix,
    /// or a backup or snapshot of etcd, then holds every private key.
    #[arg(long, help_heading = HEADING, requires = "etcd")]
    pub(crate) etcd_insecure_plaintext_keys: bool,
    /// How long a new key is in the JWKS before it may sign (default 30s,
    /// never under 2s): every server has it before its first token. Give
    /// every process of a cluster the same.
    #[arg(long, help_heading = HEADING, value_name = "DURATION", value_parser = parse_duration, requires = "etcd")]
    pub(crate) etcd_lead_time: Option<Duration>,
}

impl EtcdArgs {
    /// Whether `--etcd` was given.
    pub(crate) fn given(&self) -> bool {
        !self.etcd.is_empty()
    }

    /// The prefix as the keyring uses it (with its trailing `/`).
    pub(crate) fn prefix(&self) -> String {
        let mut p = self
            .etcd_prefix
            .clone()
            .unwrap_or_else(|| DEFAULT_KEYRING_PREFIX.to_string());
        if !p.ends_with('/') {
            p.push('/');
        }
        p
    }

    /// Refuses the etcd flags without `--etcd` (clap lets them pass beside
    /// `--keystore`, which conflicts with `--etcd`): a flag that would be
    /// ignored is a mistake worth saying.
    pub(crate) fn refuse_without_etcd(&self) -> Result<(), CliError> {
        let given = [
            ("--etcd-prefix", self.etcd_prefix.is_some()),
            ("--etcd-ca-bundle", self.etcd_ca_bundle.is_some()),
            ("--etcd-cert", self.etcd_cert.is_some()),
            ("--etcd-key", self.etcd_key.is_some()),
            ("--etcd-user", self.etcd_user.is_some()),
            ("--etcd-password-file", self.etcd_password_file.is_some()),
            ("--etcd-allow-plain-http", self.etcd_allow_plain_http),
            (
                "--etcd-insecure-plaintext-keys",
                self.etcd_insecure_plaintext_keys,
            ),
            ("--etcd-lead-time", self.etcd_lead_time.is_some()),
        ];
        match given.iter().find(|(_, on)| *on) {
            Some((flag, _)) if !self.given() => Err(bad_flag(
                flag,
                "applies to the replicated keyring only: it needs --etcd (not --keystore)",
            )),
            _ => Ok(()),
        }
    }

    /// `--etcd URL,... --etcd-prefix PREFIX`, for hints.
    pub(crate) fn flags(&self) -> String {
        format!(
            "--etcd {} --etcd-prefix {}",
            self.etcd.join(","),
            self.prefix()
        )
    }

    /// The members' URLs, checked: at least one, each http(s), http only
    /// with `--etcd-allow-plain-http`.
    fn endpoints(&self) -> Result<Vec<String>, CliError> {
        let urls: Vec<String> = self
            .etcd
            .iter()
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(bad_flag(
                "--etcd",
                "names no URL: expected the members' client URLs, like https://10.0.0.1:2379,https://10.0.0.2:2379",
            ));
        }
        for url in &urls {
            if url.starts_with("http://") {
                if !self.etcd_allow_plain_http {
                    return Err(bad_flag(
                        "--etcd",
                        format!(
                            "{url} is plain http: anyone on the path could forge etcd's answers and read the credentials"
                        ),
                    )
                    .hint("use https:// (with --etcd-ca-bundle for a private CA), or add --etcd-allow-plain-http for a network no one else can touch (loopback, a test)"));
                }
            } else if !url.starts_with("https://") {
                return Err(bad_flag(
                    "--etcd",
                    format!("{url:?} is not an http(s) URL: expected https://HOST:PORT"),
                ));
            }
        }
        Ok(urls)
    }

    /// The client configuration the flags describe.
    fn config(&self) -> Result<EtcdConfig, CliError> {
        let urls = self.endpoints()?;
        let all: Vec<&str> = urls.iter().map(String::as_str).collect();
        // The config's own prefix is where allocations live; the keyring's
        // prefix is given to the keyring builder.
        let mut config = EtcdConfig::new(&urls[0], &all, "/");
        if self.etcd_allow_plain_http {
            config = config.allow_plain_http();
        }
        if let Some(ca) = &self.etcd_ca_bundle {
            config = config.ca_bundle_pem(read_file(ca, "--etcd-ca-bundle", false)?.to_vec());
        }
        if let (Some(cert), Some(key)) = (&self.etcd_cert, &self.etcd_key) {
            let cert = read_file(cert, "--etcd-cert", false)?;
            let key = read_file(key, "--etcd-key", true)?;
            config = config.client_certificate_pem(cert.to_vec(), key.to_vec());
        }
        if let Some(user) = &self.etcd_user {
            let password = self.password()?;
            config = config.credentials(user, password.as_str());
        }
        Ok(config)
    }

    /// `--etcd-user`'s password: the file, else the environment.
    fn password(&self) -> Result<Zeroizing<String>, CliError> {
        let bytes = match &self.etcd_password_file {
            Some(path) => read_file(path, "--etcd-password-file", true)?,
            None => match std::env::var_os(PASSWORD_ENV) {
                Some(v) if !v.is_empty() => Zeroizing::new(v.into_encoded_bytes()),
                _ => {
                    return Err(bad_flag(
                        "--etcd-user",
                        format!(
                            "needs a password: give --etcd-password-file FILE (mode 0600) or set {PASSWORD_ENV}"
                        ),
                    ));
                }
            },
        };
        let text = std::str::from_utf8(&bytes).map_err(|_| {
            bad_flag(
                "--etcd-user",
                "the password is not UTF-8 (etcd passwords are strings)",
            )
        })?;
        let text = text
            .strip_suffix('\n')
            .map_or(text, |t| t.strip_suffix('\r').unwrap_or(t));
        if text.is_empty() {
            return Err(bad_flag("--etcd-user", "the password is empty"));
        }
        Ok(Zeroizing::new(text.to_string()))
    }

    /// Opens the replicated keyring: one linearizable listing of the prefix
    /// (every key unwrapped with the KEK the custody flags name), then the
    /// watch keeps the copy current. `policy` is the rotation policy whose
    /// threshold bounds how long a copy cut off from etcd keeps signing.
    pub(crate) fn open(
        &self,
        custody: &CustodyArgs,
        policy: Option<RotationPolicy>,
        ctx: &Ctx,
    ) -> Result<EtcdKeyring, CliError> {
        self.open_with(custody.wrapper()?, policy, ctx)
    }

    /// [`EtcdArgs::open`] with the KEK the custody flags named, made already.
    pub(crate) fn open_with(
        &self,
        wrapper: Option<Arc<dyn KeyWrapper>>,
        policy: Option<RotationPolicy>,
        ctx: &Ctx,
    ) -> Result<EtcdKeyring, CliError> {
        self.open_sealing(wrapper, policy, false, ctx)
    }

    /// [`EtcdArgs::open_with`]; with `unauthenticated`, a keyring whose
    /// records are not authenticated opens too (to seal it).
    pub(crate) fn open_sealing(
        &self,
        wrapper: Option<Arc<dyn KeyWrapper>>,
        policy: Option<RotationPolicy>,
        unauthenticated: bool,
        ctx: &Ctx,
    ) -> Result<EtcdKeyring, CliError> {
        // The KEK first: nothing (a password file, etcd) is read for a
        // command that would be refused anyway.
        let wrapper = match (wrapper, self.etcd_insecure_plaintext_keys) {
            (Some(_), true) => {
                return Err(bad_flag(
                    "--etcd-insecure-plaintext-keys",
                    "and a KEK (--kek-file, --transit-key) were both given: the keys in etcd are either wrapped by the KEK or in plaintext; choose one",
                ));
            }
            (None, false) => {
                return Err(bad_flag(
                    "--etcd",
                    "no KEK was given: keys in etcd are always wrapped, so anyone who can read etcd (or a backup of it) gets nothing",
                )
                .hint("give the KEK with --kek-file FILE (`wid keyring generate-kek` makes one) or --transit-addr URL --transit-key NAME; --etcd-insecure-plaintext-keys keeps the keys in plaintext, for tests only"));
            }
            (w, _) => w,
        };
        let mut builder = EtcdKeyring::builder(self.config()?).prefix(&self.prefix());
        match wrapper {
            Some(w) => builder = builder.wrapper(w),
            None => {
                ctx.note(&format!(
                    "warning: --etcd-insecure-plaintext-keys: the private keys under {} are in plaintext in etcd; anyone who can read it holds them",
                    self.prefix()
                ));
                builder = builder.insecure_plaintext_keys();
            }
        }
        if let Some(lead) = self.etcd_lead_time {
            builder = builder.lead_time(lead);
        }
        if let Some(policy) = policy {
            builder = builder.rotation_policy(policy);
        }
        builder = builder.allow_unauthenticated_records(unauthenticated);
        builder.open().map_err(|e| {
            let code = e.code();
            let unsealed = e.to_string().contains("are not authenticated");
            let err = CliError::from(e);
            match code {
                ResultCode::KeyCustodyFailed if unsealed => err.hint(format!(
                    "check `wid keyring list --etcd ... --etcd-prefix {}` shows the keys as they should be, then run `wid keyring migrate --authenticate-records` with the same --etcd flags and KEK, once",
                    self.prefix()
                )),
                ResultCode::KeyCustodyFailed => err.hint(format!(
                    "the keyring at {} is wrapped by another KEK, or holds keys of the other kind (wrapped or plaintext): give the KEK it was made with",
                    self.prefix()
                )),
                ResultCode::KeyringUnavailable => err.hint(
                    "check the --etcd URLs, --etcd-ca-bundle, the client certificate and the credentials",
                ),
                _ => err,
            }
        })
    }
}

/// Reads a flag's file; `secret`: refuse one that group or others can
/// access (as keystores and KEK files are), and keep it in a zeroizing
/// buffer.
pub(crate) fn read_file(
    path: &Path,
    flag: &str,
    secret: bool,
) -> Result<Zeroizing<Vec<u8>>, CliError> {
    let io = |e: &std::io::Error| CliError::io(format!("reading {flag} {}", path.display()), e);
    let file = std::fs::File::open(path).map_err(|e| io(&e))?;
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::PermissionsExt;
        let mode = file.metadata().map_err(|e| io(&e))?.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(CliError::new(
                ResultCode::IoError,
                format!(
                    "{flag} {}: group or others have access to it (mode {mode:04o}) and it holds a secret",
                    path.display()
                ),
            )
            .hint(format!("`chmod 600 {}`", path.display())));
        }
    }
    let mut buf = Zeroizing::new(Vec::new());
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| io(&e))?;
    if buf.len() as u64 > MAX_PEM_BYTES {
        return Err(CliError::new(
            ResultCode::DecodeError,
            format!(
                "{flag} {} is larger than the {MAX_PEM_BYTES}-byte limit",
                path.display()
            ),
        )
        .exit(Exit::Io));
    }
    Ok(buf)
}

/// Where a command finds the keys: a keystore file, or the replicated
/// keyring with `--etcd`. (`wid issue` and `wid serve` say in their own
/// words what the keystore is for: `mut_arg("keystore", ...)`.)
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The keystore file (or --etcd for the replicated keyring).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "etcd",
        conflicts_with = "etcd"
    )]
    pub(crate) keystore: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) custody: CustodyArgs,
    #[command(flatten)]
    pub(crate) etcd: EtcdArgs,
}

/// The flag that gives each field of the stored policy.
pub(crate) fn policy_flag(field: &str) -> &'static str {
    match field {
        "RotationThreshold" => "--rotation-threshold",
        "LongestTTL" => "--longest-ttl",
        "LeadTime" => "--etcd-lead-time",
        _ => "--retention",
    }
}

/// The keys a command looks at, read without their material (no KEK).
pub(crate) struct Inspected {
    /// Every key's public facts.
    pub(crate) keys: Vec<workload_identity::KeyInfo>,
    /// The stored policy.
    pub(crate) policy: Option<workload_identity::KeyringPolicy>,
    /// The replicated keyring's status (`--etcd` only).
    pub(crate) etcd: Option<workload_identity::KeyringStatus>,
    /// The KEK named by the keys (kind, ID).
    pub(crate) wrapping: Option<(String, String)>,
    /// The keystore file or the etcd prefix, for people.
    pub(crate) describe: String,
    /// `"keystore": FILE` or `"etcd_prefix": PREFIX`.
    pub(crate) json_fields: serde_json::Map<String, Value>,
}

/// Refuses a KEK (or the plaintext opt-in) that is not what the keys were
/// stored with, though nothing is unwrapped: a wrong flag is a mistake worth
/// saying. Nothing given is fine (reading IDs and states needs no KEK).
fn check_named_kek(
    given: Option<Arc<dyn KeyWrapper>>,
    plaintext_opt_in: bool,
    stored: Option<&(String, String)>,
    what: &str,
) -> Result<(), CliError> {
    let wrong = match (given, stored) {
        (None, Some((kind, kek_id))) if plaintext_opt_in => Some(format!(
            "{what} is wrapped by {kind} KEK {kek_id}, and --etcd-insecure-plaintext-keys never reads wrapped keys"
        )),
        (None, _) => None,
        (Some(w), None) => Some(format!(
            "{what} is plaintext, and {} KEK {} was given",
            w.kind(),
            w.kek_id()
        )),
        (Some(w), Some((kind, kek_id))) if w.kind() != kind || w.kek_id() != kek_id => {
            Some(format!(
                "{what} is wrapped by {kind} KEK {kek_id}, and {} KEK {} was given",
                w.kind(),
                w.kek_id()
            ))
        }
        (Some(_), Some(_)) => None,
    };
    match wrong {
        None => Ok(()),
        Some(why) => Err(CliError::new(ResultCode::KeyCustodyFailed, why).hint(
            "give the KEK the keys were wrapped with (plaintext keys are wrapped with `wid keyring wrap`, or copied into etcd with `wid keyring migrate`), or no KEK: listing needs none",
        )),
    }
}

/// The keys a command works on, opened.
pub(crate) enum Opened {
    /// A keystore file, loaded (changes are saved back to it).
    File { path: PathBuf, keyring: Keyring },
    /// The replicated keyring (changes are etcd transactions).
    Etcd(EtcdKeyring),
}

impl StoreArgs {
    /// Opens the keystore or the replicated keyring.
    pub(crate) fn open(&self, ctx: &Ctx) -> Result<Opened, CliError> {
        self.open_with_policy(None, ctx)
    }

    /// Opens what the flags name (clap has made sure exactly one was
    /// given); `policy` holds the rotation policy flags (the threshold bounds
    /// how long a replicated copy cut off from etcd keeps signing). A
    /// keyring that stores its policy refuses policy flags (and
    /// `--etcd-lead-time`) with other values, naming each flag and the
    /// stored value.
    pub(crate) fn open_with_policy(
        &self,
        policy: Option<(RotationPolicy, workload_identity::PolicyOverrides)>,
        ctx: &Ctx,
    ) -> Result<Opened, CliError> {
        self.etcd.refuse_without_etcd()?;
        let rotation = policy.map(|(p, _)| p);
        let opened = match &self.keystore {
            Some(path) => Opened::File {
                path: path.clone(),
                keyring: load_keystore(path, &self.custody)?,
            },
            None if self.etcd.given() => {
                Opened::Etcd(self.etcd.open(&self.custody, rotation, ctx)?)
            }
            None => {
                return Err(bad_flag(
                    "--keystore",
                    "or --etcd is required: where the keys are",
                ));
            }
        };
        let mut given = policy.map_or_else(workload_identity::PolicyOverrides::none, |(_, o)| o);
        given.lead_time = self.etcd.etcd_lead_time;
        opened.refuse_other_policy(&given)?;
        Ok(opened)
    }

    /// Reads the keys' public facts, the policy and (with `--etcd`) the
    /// cluster's status without unwrapping anything: no KEK is needed (one
    /// given is not used).
    pub(crate) fn inspect(&self) -> Result<Inspected, CliError> {
        self.etcd.refuse_without_etcd()?;
        let mut json_fields = serde_json::Map::new();
        match &self.keystore {
            Some(path) => {
                let summary = workload_identity::inspect_keystore(path).map_err(|e| {
                    let missing = matches!(&e, workload_identity::Error::Io { error, .. }
                        if error.kind() == std::io::ErrorKind::NotFound);
                    let err = CliError::from(e);
                    if missing {
                        err.hint(format!(
                            "create it with `wid keyring init --keystore {}`",
                            path.display()
                        ))
                    } else {
                        err
                    }
                })?;
                json_fields.insert("keystore".into(), json!(path.display().to_string()));
                // A KEK given must be the keystore's, though nothing is
                // unwrapped: a wrong --kek-file is a mistake worth saying.
                check_named_kek(
                    self.custody.wrapper()?,
                    false,
                    summary.wrapping.as_ref(),
                    &path.display().to_string(),
                )?;
                Ok(Inspected {
                    keys: summary.keys,
                    policy: summary.policy,
                    etcd: None,
                    wrapping: summary.wrapping,
                    describe: path.display().to_string(),
                    json_fields,
                })
            }
            None if self.etcd.given() => {
                let prefix = self.etcd.prefix();
                let status = EtcdKeyring::status(self.etcd.config()?, &prefix)
                    .map_err(|e| CliError::from(e).hint("check the --etcd URLs, --etcd-ca-bundle, the client certificate and the credentials"))?;
                json_fields.insert("etcd_prefix".into(), json!(prefix));
                let given = self.custody.wrapper()?;
                if given.is_some() && self.etcd.etcd_insecure_plaintext_keys {
                    return Err(bad_flag(
                        "--etcd-insecure-plaintext-keys",
                        "and a KEK (--kek-file, --transit-key) were both given: the keys in etcd are either wrapped by the KEK or in plaintext; choose one",
                    ));
                }
                if !status.keys.is_empty() || status.wrapping.is_some() {
                    check_named_kek(
                        given,
                        self.etcd.etcd_insecure_plaintext_keys,
                        status.wrapping.as_ref(),
                        &format!("the keyring at {prefix}"),
                    )?;
                }
                Ok(Inspected {
                    keys: status.keys.clone(),
                    policy: status.policy,
                    wrapping: status.wrapping.clone(),
                    describe: format!("etcd {prefix}"),
                    etcd: Some(status),
                    json_fields,
                })
            }
            None => Err(bad_flag(
                "--keystore",
                "or --etcd is required: where the keys are",
            )),
        }
    }

    /// `--keystore FILE` or `--etcd ... --etcd-prefix ...`, for hints.
    pub(crate) fn flags(&self) -> String {
        match &self.keystore {
            Some(p) => format!("--keystore {}", p.display()),
            None => self.etcd.flags(),
        }
    }
}

impl Opened {
    /// Refuses flags that contradict the policy stored with the keys.
    pub(crate) fn refuse_other_policy(
        &self,
        given: &workload_identity::PolicyOverrides,
    ) -> Result<(), CliError> {
        let Some(stored) = self.keyring().policy() else {
            return Ok(());
        };
        let diffs = stored.differences(given);
        let Some((first, _)) = diffs.first() else {
            return Ok(());
        };
        let named: Vec<String> = diffs
            .iter()
            .map(|(field, value)| {
                format!(
                    "{} differs from the stored {field} ({value})",
                    policy_flag(field)
                )
            })
            .collect();
        Err(bad_flag(
            policy_flag(first),
            format!(
                "the keyring stores its policy, and every process of it follows that policy: {}",
                named.join("; ")
            ),
        )
        .hint("drop the flag (the stored value applies), or change the policy for every process with `wid keyring policy set`; `wid keyring policy show` prints it"))
    }

    /// The rotation policy in force: the stored one, else `fallback` (the
    /// flags').
    pub(crate) fn rotation_policy(&self, fallback: RotationPolicy) -> RotationPolicy {
        self.keyring()
            .policy()
            .map_or(fallback, |p| p.rotation_policy())
    }

    /// The keyring to read, sign and verify with.
    pub(crate) fn keyring(&self) -> Keyring {
        match self {
            Opened::File { keyring, .. } => keyring.clone(),
            Opened::Etcd(r) => r.keyring(),
        }
    }

    /// For scripts: `"keystore": FILE` or `"etcd_prefix": PREFIX`.
    pub(crate) fn json_fields(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        match self {
            Opened::File { path, .. } => {
                m.insert("keystore".into(), json!(path.display().to_string()));
            }
            Opened::Etcd(r) => {
                m.insert("etcd_prefix".into(), json!(r.prefix()));
            }
        }
        m
    }
}
