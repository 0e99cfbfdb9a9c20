//! `wid`: the operator's tool for workload identities.
//!
//! Keystores (`wid keyring ...`), issuing (`wid issue`), verifying (`wid
//! verify`), explaining (`wid inspect`) and serving the JWKS and OIDC discovery
//! documents (`wid serve`), all through the library's public API. Built only
//! as the `wid` package (wid/ in the repository): `cargo install --locked --path wid`.
//!
//! Output is for people by default and JSON with `--json`; errors go to stderr
//! with the stable result code's C name (`WID_RESULT_EXPIRED`), and the exit
//! status says what kind of failure it was (see [`Exit`] and `wid --help`).

#![forbid(unsafe_code)]

/// `println!` for stdout that ends quietly when the reader has gone
/// (`wid keyring jwks | head`) instead of panicking.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

#[macro_use]
mod logging;
mod etcd_args;
mod inspect_cmd;
mod issue_cmd;
mod k8s_signer;
mod keyring_cmd;
mod output;
mod request;
mod serve;
mod sources;
mod stamp;
mod verify_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use workload_identity::{Error, ResultCode};

use output::Ctx;

/// What `wid --help` says about exit statuses and errors; docs/wid.md repeats it.
const EXIT_CODES: &str = "\
Exit status:
  0  success (verify: the token was accepted)
  1  the token was rejected (verify; inspect when it ran the verification)
  2  usage: a bad flag, or an input value that is not acceptable
  3  I/O or decode: a file could not be read or written, or a keystore,
     JWKS, request or allocation-state file could not be decoded, or a
     wrapped keystore could not be unwrapped (no KEK, another KEK, altered),
     or etcd (--etcd) did not answer
  4  the keyring refused: no active key of that algorithm, a duplicate key,
     a replicated change that lost to another writer (run it again)
  5  internal error

Errors go to stderr as `wid: error: WID_RESULT_<NAME>: <message>` (a
rejected token: `wid: rejected: ...`), or as one JSON object with --json.";

/// Mint, verify, inspect and serve workload identities (JWTs signed with
/// EdDSA, ES256 or RS256 keys from a rotating keystore).
#[derive(Debug, Parser)]
#[command(name = "wid", version, after_help = EXIT_CODES)]
struct Cli {
    /// Print JSON for scripts instead of text for people (errors too, on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// Use this time (Unix seconds) instead of the system clock: for tests,
    /// replays and "what will the plan be next week".
    #[arg(
        long,
        global = true,
        value_name = "UNIX_SECONDS",
        allow_negative_numbers = true
    )]
    now: Option<i64>,
    /// How log lines on stderr are written, each stamped with its time:
    /// `text`, or `json` (one object per line, for log collectors).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, rotate, list and publish the keys of a keystore file, or of
    /// the keyring replicated through etcd (--etcd); migrate between them.
    #[command(subcommand)]
    Keyring(keyring_cmd::KeyringCommand),
    /// Sign an identity for an IssueRequest (JSON or msgpack) and print the token.
    Issue(issue_cmd::IssueArgs),
    /// Verify a token as a relying party would (signature, times, audience,
    /// issuer, allocation).
    #[command(after_help = verify_cmd::AFTER_HELP)]
    Verify(verify_cmd::VerifyArgs),
    /// Decode a token without trusting it; with a key source, explain every
    /// verification step.
    #[command(after_help = inspect_cmd::AFTER_HELP)]
    Inspect(inspect_cmd::InspectArgs),
    /// Serve the JWKS and OIDC discovery documents over HTTP, following the
    /// keystore (or the replicated keyring) as it changes.
    #[command(after_help = serve::AFTER_HELP)]
    Serve(serve::ServeArgs),
    /// Sign a Kubernetes cluster's service-account tokens for kube-apiserver
    /// (its external signer: gRPC on a Unix socket) with the keyring's
    /// kubernetes keys.
    #[command(name = "k8s-signer", after_help = k8s_signer::AFTER_HELP)]
    K8sSigner(k8s_signer::K8sSignerArgs),
}

/// The exit statuses `wid` documents (`EXIT_CODES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 1: the token was rejected.
    Rejected = 1,
    /// 2: a bad flag or input value.
    Usage = 2,
    /// 3: a file could not be read, written or decoded.
    Io = 3,
    /// 4: the keyring refused the operation.
    Refused = 4,
    /// 5: a bug or a failure inside the crypto library.
    Internal = 5,
}

impl Exit {
    /// The exit status for a library result code.
    pub(crate) fn for_code(code: ResultCode) -> Exit {
        match code {
            ResultCode::NullArgument | ResultCode::InvalidArgument => Exit::Usage,
            ResultCode::DecodeError
            | ResultCode::IoError
            | ResultCode::KeyCustodyFailed
            | ResultCode::KeyringUnavailable => Exit::Io,
            ResultCode::NoActiveKey | ResultCode::DuplicateKey | ResultCode::KeyringConflict => {
                Exit::Refused
            }
            ResultCode::MalformedToken
            | ResultCode::UnsupportedAlgorithm
            | ResultCode::UnknownKey
            | ResultCode::BadSignature
            | ResultCode::Expired
            | ResultCode::NotYetValid
            | ResultCode::AudienceMismatch
            | ResultCode::IssuerMismatch
            | ResultCode::AllocationNotFound
            | ResultCode::AllocationTerminal
            | ResultCode::TokenKindRefused
            | ResultCode::NodeNotFound
            | ResultCode::NodeDown
            | ResultCode::StoreUnavailable => Exit::Rejected,
            _ => Exit::Internal,
        }
    }
}

/// A failure of one `wid` command: the library's code, a message, what to do.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: ResultCode,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
    pub(crate) exit: Exit,
}

impl CliError {
    /// An error of `code` with the exit status that code implies.
    pub(crate) fn new(code: ResultCode, message: impl Into<String>) -> CliError {
        CliError {
            code,
            message: message.into(),
            hint: None,
            exit: Exit::for_code(code),
        }
    }

    /// A bad flag or input value (`WID_RESULT_INVALID_ARGUMENT`, exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError::new(ResultCode::InvalidArgument, message)
    }

    /// A file operation that failed (`WID_RESULT_IO_ERROR`, exit 3).
    pub(crate) fn io(context: impl std::fmt::Display, e: &std::io::Error) -> CliError {
        CliError::new(ResultCode::IoError, format!("{context}: {e}"))
    }

    /// Adds what the operator can do about it.
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> CliError {
        self.hint = Some(hint.into());
        self
    }

    /// Overrides the exit status (an unknown key in `keyring promote` is a
    /// usage error, not a rejected token).
    pub(crate) fn exit(mut self, exit: Exit) -> CliError {
        self.exit = exit;
        self
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> CliError {
        // The library speaks Unix seconds; people read dates.
        let dated = match &e {
            Error::Expired { exp, now, .. } => Some(format!(
                "; exp is {}, now is {}",
                output::utc(*exp),
                output::utc(*now)
            )),
            Error::NotYetValid {
                claim, value, now, ..
            } => Some(format!(
                "; {claim} is {}, now is {}",
                output::utc(*value),
                output::utc(*now)
            )),
            _ => None,
        };
        CliError::new(e.code(), format!("{e}{}", dated.unwrap_or_default()))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let ctx = Ctx::new(cli.json, cli.now);
    // A server logs what happens as it happens (the audit trail: elections,
    // key changes); a one-shot command prints what it did, and only the
    // library's warnings.
    let server = matches!(cli.command, Command::Serve(_) | Command::K8sSigner(_));
    let level = if server {
        log::LevelFilter::Info
    } else {
        log::LevelFilter::Warn
    };
    if server || cli.log_format == logging::LogFormat::Json {
        logging::init(cli.log_format, level);
    }
    let result = match cli.command {
        Command::Keyring(cmd) => keyring_cmd::run(cmd, &ctx),
        Command::Issue(args) => issue_cmd::run(&args, &ctx),
        Command::Verify(args) => verify_cmd::run(&args, &ctx),
        Command::Inspect(args) => inspect_cmd::run(&args, &ctx),
        Command::Serve(args) => serve::run(&args, &ctx),
        Command::K8sSigner(args) => k8s_signer::run(&args, &ctx),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            ctx.report_error(&e);
            ExitCode::from(e.exit as u8)
        }
    }
}

/// clap's refusal of the command line: as JSON on stderr when `--json` was
/// among the arguments (docs/wid.md promises JSON errors with it), else as
/// clap prints it. Help and version requests print as usual.
fn usage_error(e: clap::Error) -> ExitCode {
    let wants_json = std::env::args_os().skip(1).any(|a| a == "--json");
    // Help and version asked for exit 0; help shown because something was
    // missing is an error (exit 2), and JSON under --json.
    if !wants_json || e.exit_code() == 0 {
        e.exit();
    }
    let text = e.render().to_string();
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let usage = text
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap_or("Usage: wid --help")
            .to_string();
        let err = CliError::usage("a command is required here")
            .hint(format!("{usage} (--help lists the commands)"))
            .exit(Exit::Usage);
        Ctx::new(true, None).report_error(&err);
        return ExitCode::from(Exit::Usage as u8);
    }
    // clap's text: the error (up to the first blank line), then usage and a
    // tip, which become the hint.
    let mut paragraphs = text.split("\n\n").map(str::trim).filter(|p| !p.is_empty());
    let message = paragraphs
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let hint: Vec<String> = paragraphs
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let err = CliError::usage(message).exit(Exit::Usage);
    let err = if hint.is_empty() {
        err
    } else {
        err.hint(hint.join(" "))
    };
    Ctx::new(true, None).report_error(&err);
    ExitCode::from(Exit::Usage as u8)
}
