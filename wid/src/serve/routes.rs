//! The answer to each route: the key sets, the discovery document,
//! `/health` and `/metrics`.

use std::sync::PoisonError;

use hyper::StatusCode;
use serde_json::json;

use super::metrics::open_connections;
use super::respond::Response;
use super::server::{Server, Source, gauges};
use crate::output::utc;

/// The answer for `path` (the method and client certificate were checked
/// by the caller).
pub(super) fn route(server: &Server, path: &str) -> Response {
    let now = server.now();
    if let Some(k) = &server.kubernetes {
        if path == k.jwks_path {
            return kubernetes_jwks(server, now);
        }
        if path == k.discovery_path {
            let (docs, _) = server.docs(now);
            return discovery(&docs, &docs.kubernetes_discovery, "--kubernetes-issuer URL");
        }
    }
    match path {
        "/.well-known/jwks.json" => {
            let (docs, _) = server.docs(now);
            Response::document(docs.jwks.clone(), docs.jwks_etag.clone(), docs.timing.0)
        }
        "/wit/jwks.json" => {
            let (docs, _) = server.docs(now);
            Response::document(
                docs.wit_jwks.clone(),
                docs.wit_jwks_etag.clone(),
                docs.timing.0,
            )
        }
        "/kubernetes/jwks.json" => kubernetes_jwks(server, now),
        "/spiffe/bundle.json" => {
            let (docs, _) = server.docs(now);
            // The JWKS's lifetime, but never past the refresh hint the
            // bundle itself gives: a cache must not hold it longer than
            // its readers are told to.
            Response::document(
                docs.spiffe_bundle.clone(),
                docs.spiffe_bundle_etag.clone(),
                docs.timing
                    .0
                    .min(server.spiffe_refresh_hint.as_secs().max(1)),
            )
        }
        "/.well-known/openid-configuration" => {
            let (docs, _) = server.docs(now);
            discovery(&docs, &docs.discovery, "--issuer URL")
        }
        "/health" => {
            let (keyring, error, _) = server.current();
            // A server with nothing in its JWKS lets no relying party verify
            // anything: not healthy, whatever else holds.
            // A cluster issuer's keys count when this server publishes them.
            let published = keyring.jwks().keys.len()
                + server.kubernetes.as_ref().map_or(0, |_| {
                    workload_identity::service_account_jwks(&keyring).keys.len()
                });
            let error = error.or_else(|| {
                (published == 0)
                    .then(|| "no key is published: relying parties can verify nothing".to_string())
            });
            let loaded_at = server
                .loaded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .loaded_at;
            let mut body = json!({
                "status": if error.is_some() { "degraded" } else { "ok" },
                "keys": keyring.len(),
                "published": published,
                "algorithms": keyring.algorithms().iter().map(|a| a.name()).collect::<Vec<_>>(),
                "loaded_at": utc(loaded_at),
            });
            // The detail (the keystore's path, its mode; the prefix, the
            // members and etcd's errors) went to stderr; unauthenticated
            // clients get none, only whether the keys are current.
            let mut stale = match &server.source {
                Source::File { .. } => "reload failed: serving the last good keys",
                Source::Etcd(r) => match r.live() {
                    Some(live) => {
                        let stats = live.stats();
                        body["etcd"] = json!({
                            "revision": stats.revision,
                            "cut_off": stats.cut_off,
                            "rotator_elected": server.rotator_elected(),
                            "snapshot": false,
                        });
                        "cut off from etcd: serving the keys last seen"
                    }
                    None => {
                        body["etcd"] = json!({
                            "revision": 0,
                            "cut_off": true,
                            "rotator_elected": null,
                            "snapshot": true,
                        });
                        "etcd has not answered since the start: serving the local snapshot of the last keyring applied"
                    }
                },
            };
            if published == 0 {
                stale = "no key is published (an empty keystore or etcd prefix): make one with `wid keyring init` or `wid keyring rotate`";
            }
            body["reload_error"] = json!(error.as_ref().map(|_| stale));
            Response::json(
                if error.is_some() {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                },
                body.to_string(),
                None,
            )
        }
        "/metrics" => {
            let (docs, error) = server.docs(now);
            let text = server.metrics.render(&gauges(
                server,
                (&docs, error.is_none()),
                open_connections(),
                now,
            ));
            Response::text(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        _ => Response::json(
            StatusCode::NOT_FOUND,
            json!({"error": "not found"}).to_string(),
            None,
        ),
    }
}

/// The cluster issuer's key set: the kubernetes keys kube-apiserver would
/// publish (never a bearer or WIT key).
fn kubernetes_jwks(server: &Server, now: i64) -> Response {
    let (docs, _) = server.docs(now);
    Response::document(
        docs.kubernetes_jwks.clone(),
        docs.kubernetes_jwks_etag.clone(),
        docs.timing.0,
    )
}

/// A discovery document of `docs` (`doc`: the issuer's or the cluster
/// issuer's), or why there is none (`flag` names how to ask for one).
fn discovery(
    docs: &super::server::Docs,
    doc: &Option<Result<(hyper::body::Bytes, hyper::header::HeaderValue), String>>,
    flag: &str,
) -> Response {
    match doc {
        None => Response::json(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no issuer configured: start wid serve with {flag}") })
                .to_string(),
            None,
        ),
        Some(Ok((body, tag))) => Response::document(body.clone(), tag.clone(), docs.timing.0),
        Some(Err(e)) => Response::json(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": e }).to_string(),
            None,
        ),
    }
}
