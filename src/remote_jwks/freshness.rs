//! How long a response stays fresh: `Cache-Control` and `Age`.

use std::time::Duration;

/// The freshness a response declares (RFC 9111 5.2.2): `max-age` less `Age`;
/// zero with `no-cache` or `no-store`; `None` without either. Repeated
/// `max-age` directives count as the smallest.
pub(super) fn freshness(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let mut max_age: Option<u64> = None;
    let mut no_cache = false;
    for value in headers.get_all("cache-control") {
        let Ok(value) = value.to_str() else { continue };
        for directive in value.split(',') {
            let (name, arg) = match directive.split_once('=') {
                Some((name, arg)) => (name.trim(), Some(arg.trim().trim_matches('"'))),
                None => (directive.trim(), None),
            };
            if name.eq_ignore_ascii_case("no-cache") || name.eq_ignore_ascii_case("no-store") {
                no_cache = true;
            } else if name.eq_ignore_ascii_case("max-age") {
                if let Some(secs) = arg.and_then(delta_seconds) {
                    max_age = Some(max_age.map_or(secs, |m| m.min(secs)));
                }
            }
        }
    }
    if no_cache {
        return Some(Duration::ZERO);
    }
    let age = headers
        .get("age")
        .and_then(|v| v.to_str().ok())
        .and_then(delta_seconds)
        .unwrap_or(0);
    max_age.map(|m| Duration::from_secs(m.saturating_sub(age)))
}

/// A delta-seconds value: digits only; too large for u64 saturates.
fn delta_seconds(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> ureq::http::HeaderMap {
        let mut map = ureq::http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                ureq::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                ureq::http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn freshness_reads_max_age_age_and_no_cache() {
        let secs = |pairs: &[(&str, &str)]| freshness(&headers(pairs)).map(|d| d.as_secs());
        assert_eq!(secs(&[]), None);
        assert_eq!(secs(&[("cache-control", "public, max-age=300")]), Some(300));
        assert_eq!(secs(&[("cache-control", "Max-Age=\"60\"")]), Some(60));
        assert_eq!(
            secs(&[("cache-control", "max-age=300"), ("age", "100")]),
            Some(200)
        );
        assert_eq!(
            secs(&[("cache-control", "max-age=300"), ("age", "900")]),
            Some(0)
        );
        assert_eq!(
            secs(&[
                ("cache-control", "max-age=300"),
                ("cache-control", "max-age=30")
            ]),
            Some(30)
        );
        assert_eq!(secs(&[("cache-control", "max-age=300, no-cache")]), Some(0));
        assert_eq!(secs(&[("cache-control", "no-store")]), Some(0));
        assert_eq!(secs(&[("cache-control", "max-age=-5")]), None);
        assert_eq!(secs(&[("cache-control", "max-age=1e3")]), None);
        assert_eq!(
            secs(&[("cache-control", "max-age=99999999999999999999999")]),
            Some(u64::MAX)
        );
        assert_eq!(secs(&[("cache-control", "s-maxage=5")]), None);
    }
}
