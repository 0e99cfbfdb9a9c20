//! `wid`'s log lines on stderr: each one stamped with its RFC 3339 time (to
//! the millisecond, UTC), as text or, with `--log-format json`, one JSON
//! object per line. The library's records (the audit trail of key and
//! election changes, the replicated keyring's warnings) go through the same
//! writer, with their key-values.

use std::io::Write;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// `2026-12-05T01:02:03.456Z wid serve: message key=value ...`.
    Text,
    /// `{"time": ..., "level": ..., "source": ..., "message": ..., ...}`.
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// One stamped line from `wid serve`: `serve_log!(Info, "reloaded {}", path)`.
macro_rules! serve_log {
    ($level:ident, $($arg:tt)*) => {
        $crate::logging::line(
            log::Level::$level,
            "wid serve",
            &format!($($arg)*),
            serde_json::Map::new(),
        )
    };
}

/// Sends the library's records at `level` and above to stderr, stamped, in
/// `format`. Once per process; later calls change nothing.
pub(crate) fn init(format: LogFormat, level: log::LevelFilter) {
    if FORMAT.set(format).is_ok() && log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// Whether lines are stamped (a logger was set up).
pub(crate) fn stamped() -> bool {
    FORMAT.get().is_some()
}

/// Now, as `2026-12-05T01:02:03.456Z`.
fn stamp() -> String {
    use workload_identity::Clock;
    let ms = workload_identity::SystemClock.now_ms();
    let secs = workload_identity::rfc3339(ms.div_euclid(1000));
    format!("{}.{:03}Z", secs.trim_end_matches('Z'), ms.rem_euclid(1000))
}

/// Writes one line: `source` (`wid serve`, a library target) says who.
pub(crate) fn line(level: log::Level, source: &str, message: &str, fields: Map<String, Value>) {
    let text = match FORMAT.get().copied().unwrap_or(LogFormat::Text) {
        LogFormat::Text => {
            let mut t = format!("{} {source}: {message}", stamp());
            if level <= log::Level::Warn {
                t = format!(
                    "{} {source}: {}: {message}",
                    stamp(),
                    level.as_str().to_lowercase()
                );
            }
            t
        }
        LogFormat::Json => {
            let mut m = Map::new();
            m.insert("time".into(), json!(stamp()));
            m.insert("level".into(), json!(level.as_str().to_lowercase()));
            m.insert("source".into(), json!(source));
            m.insert("message".into(), json!(message));
            for (k, v) in fields {
                m.entry(k).or_insert(v);
            }
            Value::Object(m).to_string()
        }
    };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

struct Logger;

static LOGGER: Logger = Logger;

/// Collects a record's key-values (numbers stay numbers).
struct Fields(Map<String, Value>);

impl<'kvs> log::kv::VisitSource<'kvs> for Fields {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'kvs>,
        value: log::kv::Value<'kvs>,
    ) -> Result<(), log::kv::Error> {
        let v = match value.to_i64() {
            Some(n) => json!(n),
            None => json!(value.to_string()),
        };
        self.0.insert(key.as_str().to_string(), v);
        Ok(())
    }
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target().starts_with("workload_identity") && metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let mut fields = Fields(Map::new());
        let _ = record.key_values().visit(&mut fields);
        line(
            record.level(),
            record.target(),
            &record.args().to_string(),
            fields.0,
        );
    }

    fn flush(&self) {}
}
