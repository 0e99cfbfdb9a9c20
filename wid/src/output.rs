//! How `wid` talks: the run's context (JSON or text, the time), errors on
//! stderr, times for people, durations from people.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{CliError, Exit};

/// What every command knows about the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// `--json`: JSON on stdout (and for errors on stderr).
    pub(crate) json: bool,
    now: Option<i64>,
}

impl Ctx {
    pub(crate) fn new(json: bool, now: Option<i64>) -> Ctx {
        Ctx { json, now }
    }

    /// `--now`, else the system clock.
    pub(crate) fn now(&self) -> i64 {
        self.now.unwrap_or_else(workload_identity::unix_now)
    }

    /// Whether `--now` froze the clock.
    pub(crate) fn fixed_now(&self) -> Option<i64> {
        self.now
    }

    /// Prints a JSON document on stdout (pretty for people, one line for
    /// scripts).
    pub(crate) fn print_json(&self, value: &Value) {
        let text = if self.json {
            value.to_string()
        } else {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        };
        outln!("{text}");
    }

    /// Prints `human` for people, `machine` with `--json`.
    pub(crate) fn emit(&self, human: &str, machine: &Value) {
        if self.json {
            outln!("{machine}");
        } else if !human.is_empty() {
            outln!("{}", human.trim_end_matches('\n'));
        }
    }

    /// A failure on stderr: the code's C name, the message and what to do.
    pub(crate) fn report_error(&self, e: &CliError) {
        let mut err = std::io::stderr().lock();
        if self.json {
            let v = json!({ "error": {
                "code": e.code.name(),
                "number": e.code as u32,
                "message": e.message,
                "hint": e.hint,
                "exit": e.exit as u8,
            }});
            let _ = writeln!(err, "{v}");
            return;
        }
        let kind = if e.exit == Exit::Rejected {
            "rejected"
        } else {
            "error"
        };
        let _ = writeln!(err, "wid: {kind}: {}: {}", e.code.name(), e.message);
        if let Some(hint) = &e.hint {
            let _ = writeln!(err, "hint: {hint}");
        }
    }

    /// A note for people on stderr (never with `--json`, which says it in the
    /// document instead).
    pub(crate) fn note(&self, text: &str) {
        if crate::logging::stamped() {
            crate::logging::line(log::Level::Info, "wid", text, serde_json::Map::new());
        } else if !self.json {
            eprintln!("wid: {text}");
        }
    }
}

/// Writes one line to stdout (see `outln!`). A reader that went away ends
/// the run quietly with status 0, as its answer is no longer wanted; any other
/// failure (a full disk) is an I/O error, exit 3.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(
            std::io::stderr(),
            "wid: error: WID_RESULT_IO_ERROR: writing to stdout: {e}"
        );
        std::process::exit(Exit::Io as i32);
    }
}

/// `2024-05-01T12:00:00Z` for Unix seconds (proleptic Gregorian, UTC).
pub(crate) fn utc(t: i64) -> String {
    workload_identity::rfc3339(t)
}

/// `in 59m 58s`, `2h 3m ago`, `now`.
pub(crate) fn relative(t: i64, now: i64) -> String {
    let d = t.saturating_sub(now);
    if d == 0 {
        return "now".to_string();
    }
    let span = span(d.unsigned_abs());
    if d > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// `1d 2h`, `3h 4m`, `5m 6s`, `7s`: the two largest units.
pub(crate) fn span(secs: u64) -> String {
    let units = [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)];
    let mut parts = Vec::new();
    let mut left = secs;
    for (name, size) in units {
        if left >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{name}", left / size));
            left %= size;
        }
        if parts.len() == 2 {
            break;
        }
    }
    if parts.len() == 2 && parts[1].starts_with('0') {
        parts.pop();
    }
    parts.join(" ")
}

/// A time for people: `2024-05-01T12:00:00Z (in 3h 4m)`; `-` for 0 (unset).
pub(crate) fn when(t: i64, now: i64) -> String {
    if t == 0 {
        "-".to_string()
    } else {
        format!("{} ({})", utc(t), relative(t, now))
    }
}

/// A Go-style duration: `90s`, `15m`, `1h30m`, `720h`, `500ms` (whole
/// numbers; units ns, us, ms, s, m, h, and d for days).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        Err(format!(
            "{why} in duration {text:?}: expected a number with a unit, like 90s, 15m, 1h30m or 720h"
        ))
    };
    let s = text.trim();
    if s.is_empty() {
        return bad("nothing");
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return bad("a unit without a number");
        }
        let Ok(n) = rest[..digits].parse::<u64>() else {
            return bad("a number too large");
        };
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ns" => Duration::from_nanos(n),
            "us" | "µs" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "d" => Duration::from_secs(n.saturating_mul(86_400)),
            "" => return bad("a number without a unit"),
            _ => return bad(&format!("the unknown unit {unit:?}")),
        };
        total = total.saturating_add(part);
    }
    Ok(total)
}

/// Reads a file of at most `max` bytes (`-` is stdin), naming it on failure.
pub(crate) fn read_input(path: &str, what: &str, max: u64) -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    let mut buf = Vec::new();
    let result = if path == "-" {
        std::io::stdin().lock().take(max + 1).read_to_end(&mut buf)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(max + 1).read_to_end(&mut buf))
    };
    let shown = if path == "-" { "standard input" } else { path };
    result.map_err(|e| CliError::io(format!("reading {what} {shown}"), &e))?;
    if buf.len() as u64 > max {
        return Err(CliError::new(
            workload_identity::ResultCode::DecodeError,
            format!("{what} {shown} is larger than the {max}-byte limit"),
        )
        .exit(Exit::Io));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(relative(100, 100), "now");
        assert_eq!(relative(160, 100), "in 1m");
        assert_eq!(relative(100, 3_800), "1h 1m ago");
        assert_eq!(span(59), "59s");
        assert_eq!(span(90_061), "1d 1h");
        assert_eq!(span(7_200), "2h");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("720h"), Ok(Duration::from_secs(2_592_000)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("3600").is_err());
        assert!(parse_duration("1.5h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5y").is_err());
    }
}
