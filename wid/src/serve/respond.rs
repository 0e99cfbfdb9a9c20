//! What `wid serve` answers: a status, a body and the headers that vary
//! (type, `Cache-Control`, `ETag`, `Allow`), and the HTTP rules every route
//! shares: GET and HEAD only, a conditional GET (`If-None-Match`) answered
//! `304 Not Modified`, HEAD with the GET's headers and no body.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode};
use sha2::{Digest, Sha256};

/// An answer before the request's method and conditions are applied.
pub(super) struct Response {
    pub(super) status: StatusCode,
    content_type: &'static str,
    /// `max-age` seconds; `None`: `no-store`.
    max_age: Option<u64>,
    body: Bytes,
    /// A strong validator of `body` (documents only).
    etag: Option<HeaderValue>,
    /// Extra headers (405's `Allow`).
    allow: bool,
}

impl Response {
    /// A JSON answer, cacheable for `max_age` seconds when given.
    pub(super) fn json(
        status: StatusCode,
        body: impl Into<Bytes>,
        max_age: Option<u64>,
    ) -> Response {
        Response {
            status,
            content_type: "application/json",
            max_age,
            body: body.into(),
            etag: None,
            allow: false,
        }
    }

    /// A document relying parties cache and revalidate: JSON with its ETag.
    pub(super) fn document(body: Bytes, etag: HeaderValue, max_age: u64) -> Response {
        Response {
            etag: Some(etag),
            ..Response::json(StatusCode::OK, body, Some(max_age))
        }
    }

    /// Plain text (Prometheus's exposition format, errors).
    pub(super) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            max_age: None,
            body: body.into(),
            etag: None,
            allow: false,
        }
    }

    /// 405 for anything but GET and HEAD.
    pub(super) fn method_not_allowed() -> Response {
        Response {
            allow: true,
            ..Response::json(
                StatusCode::METHOD_NOT_ALLOWED,
                r#"{"error":"GET or HEAD only"}"#,
                None,
            )
        }
    }

    /// The answer to `method` with `if_none_match` (the request's header).
    pub(super) fn into_http(
        self,
        method: &Method,
        if_none_match: Option<&HeaderValue>,
    ) -> hyper::Response<Full<Bytes>> {
        let not_modified = self.status == StatusCode::OK
            && matches!((&self.etag, if_none_match), (Some(tag), Some(asked)) if matches_etag(asked, tag));
        let status = if not_modified {
            StatusCode::NOT_MODIFIED
        } else {
            self.status
        };
        let mut b = hyper::Response::builder()
            .status(status)
            .header(
                header::CACHE_CONTROL,
                match self.max_age {
                    Some(s) => HeaderValue::from_str(&format!("max-age={s}"))
                        .unwrap_or(HeaderValue::from_static("no-store")),
                    None => HeaderValue::from_static("no-store"),
                },
            )
            .header("X-Content-Type-Options", "nosniff");
        if let Some(tag) = &self.etag {
            b = b.header(header::ETAG, tag.clone());
        }
        if self.allow {
            b = b.header(header::ALLOW, "GET, HEAD");
        }
        let body = if not_modified {
            Bytes::new()
        } else {
            b = b
                .header(header::CONTENT_TYPE, self.content_type)
                .header(header::CONTENT_LENGTH, self.body.len());
            if method == Method::HEAD {
                Bytes::new()
            } else {
                self.body
            }
        };
        b.body(Full::new(body))
            // Every header above is a valid value: the builder cannot fail.
            .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
    }
}

/// A strong ETag for `body`: the first 128 bits of its SHA-256, in hex.
pub(super) fn etag_of(body: &[u8]) -> HeaderValue {
    let digest = Sha256::digest(body);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    // Hex digits and quotes only: always a valid header value.
    HeaderValue::from_str(&format!("\"{hex}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

/// Whether an `If-None-Match` value names `tag` (or is `*`): a list of
/// entity tags, compared weakly (RFC 9110: `W/"x"` matches `"x"`).
fn matches_etag(asked: &HeaderValue, tag: &HeaderValue) -> bool {
    let (Ok(asked), Ok(tag)) = (asked.to_str(), tag.to_str()) else {
        return false;
    };
    asked.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == tag
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_lists_and_weak_tags() {
        let tag = etag_of(b"{}");
        let t = tag.to_str().unwrap().to_string();
        for asked in [
            t.clone(),
            format!("W/{t}"),
            format!("\"other\", {t}"),
            "*".to_string(),
        ] {
            assert!(
                matches_etag(&HeaderValue::from_str(&asked).unwrap(), &tag),
                "{asked}"
            );
        }
        for asked in ["\"other\"", "", "W/\"x\""] {
            assert!(
                !matches_etag(&HeaderValue::from_str(asked).unwrap(), &tag),
                "{asked}"
            );
        }
    }

    #[test]
    fn head_keeps_the_length_and_304_drops_the_body() {
        let body = Bytes::from_static(b"{\"keys\":[]}");
        let tag = etag_of(&body);
        let r = Response::document(body.clone(), tag.clone(), 60).into_http(&Method::HEAD, None);
        assert_eq!(r.headers()[header::CONTENT_LENGTH], body.len().to_string());
        assert_eq!(r.headers()[header::ETAG], tag);
        let r = Response::document(body, tag.clone(), 60).into_http(&Method::GET, Some(&tag));
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(r.headers()[header::CACHE_CONTROL], "max-age=60");
        assert!(r.headers().get(header::CONTENT_LENGTH).is_none());
    }
}
