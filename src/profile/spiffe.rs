//! SPIFFE IDs for identities: `spiffe://<trust domain>/<path>`.

use super::template::{Part, Template};
use crate::error::{Error, Result, truncate_for_message};
use crate::model::IssueRequest;

/// The default SPIFFE ID path: the six parts of Nomad's `sub`, one segment
/// each, as in the `wimse://` identifier of a WIT.
pub const DEFAULT_SPIFFE_PATH: &str =
    "/${job.region}/${job.namespace}/${job.id}/${group.name}/${workload.name}/${identity.name}";

/// The longest SPIFFE ID, in bytes (the SPIFFE ID specification).
pub const MAX_SPIFFE_ID_BYTES: usize = 2048;

/// The longest trust domain, in bytes (the SPIFFE ID specification).
const MAX_TRUST_DOMAIN_BYTES: usize = 255;

/// Makes an issuer's tokens SPIFFE JWT-SVIDs: `sub` becomes
/// `spiffe://<trust domain>/<path>`, the path rendered from a template over
/// the request ([`DEFAULT_SPIFFE_PATH`] unless set). See
/// [`Issuer::spiffe`](crate::Issuer::spiffe) for the rules enforced at issue.
///
/// ```
/// use workload_identity::profile::SpiffeProfile;
///
/// let p = SpiffeProfile::new("prod.example.org")?.path("/ns/${job.namespace}/job/${job.id}")?;
/// assert_eq!(p.trust_domain(), "prod.example.org");
/// assert!(SpiffeProfile::new("Prod.Example.org").is_err()); // lower-case only
/// assert!(p.clone().path("/ns/../x").is_err()); // no "." or ".." segments
/// # Ok::<(), workload_identity::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpiffeProfile {
    trust_domain: String,
    path: Template,
}

fn segment_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_'
}

/// Why `td` cannot be a SPIFFE trust domain, if it cannot.
pub(crate) fn trust_domain_problem(td: &str) -> Option<String> {
    if td.is_empty() || td.len() > MAX_TRUST_DOMAIN_BYTES {
        return Some(format!(
            "is {} bytes; expected 1 to {MAX_TRUST_DOMAIN_BYTES}",
            td.len()
        ));
    }
    td.chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_')))
        .map(|c| {
            format!("contains {c:?}; a SPIFFE trust domain has lower-case letters, digits, '.', '-' and '_' only")
        })
}

/// Why `segment` cannot be a SPIFFE ID path segment, if it cannot.
fn segment_problem(segment: &str) -> Option<String> {
    if segment.is_empty() {
        return Some("is empty".into());
    }
    if segment == "." || segment == ".." {
        return Some(format!(
            "is {segment:?}, which a SPIFFE ID path may not contain"
        ));
    }
    segment
        .chars()
        .find(|c| !(c.is_ascii() && segment_char(*c as u8)))
        .map(|c| format!("contains {c:?}; a SPIFFE ID path segment has letters, digits, '.', '-' and '_' only"))
}

/// Why `id` is not a SPIFFE ID (`spiffe://<trust domain>/<path>`, path
/// optional), if it is not.
pub fn spiffe_id_problem(id: &str) -> Option<String> {
    if id.len() > MAX_SPIFFE_ID_BYTES {
        return Some(format!(
            "is {} bytes; a SPIFFE ID is at most {MAX_SPIFFE_ID_BYTES}",
            id.len()
        ));
    }
    let Some(rest) = id.strip_prefix("spiffe://") else {
        return Some("does not start with \"spiffe://\"".into());
    };
    let (td, path) = rest
        .split_once('/')
        .map_or((rest, None), |(t, p)| (t, Some(p)));
    if let Some(p) = trust_domain_problem(td) {
        return Some(format!("its trust domain {p}"));
    }
    for seg in path.into_iter().flat_map(|p| p.split('/')) {
        if let Some(p) = segment_problem(seg) {
            return Some(format!(
                "its path segment {:?} {p}",
                truncate_for_message(seg)
            ));
        }
    }
    None
}

impl SpiffeProfile {
    /// A profile for `trust_domain` (lower-case letters, digits, `.`, `-`,
    /// `_`; 1 to 255 bytes) with the default path.
    pub fn new(trust_domain: &str) -> Result<SpiffeProfile> {
        if let Some(p) = trust_domain_problem(trust_domain) {
            return Err(Error::invalid(
                "SpiffeProfile",
                "trust_domain",
                format!("{:?} {p}", truncate_for_message(trust_domain)),
            ));
        }
        Ok(SpiffeProfile {
            trust_domain: trust_domain.to_string(),
            // The default is a valid template (tested).
            path: Template::parse(DEFAULT_SPIFFE_PATH)
                .map_err(|e| Error::invalid("SpiffeProfile", "path", e))?,
        })
    }

    /// The path template: `/` then segments separated by `/`, each made of
    /// literal segment characters (`[A-Za-z0-9._-]`) and variables (listed in
    /// [`profile`](crate::profile)). Refused when it does not
    /// start with `/`, ends with `/`, has an empty, `.` or `..` segment, a
    /// character a SPIFFE ID cannot hold, or an unknown variable.
    pub fn path(mut self, template: &str) -> Result<SpiffeProfile> {
        let bad = |why: String| {
            Error::invalid(
                "SpiffeProfile",
                "path",
                format!("{:?} {why}", truncate_for_message(template)),
            )
        };
        let t = Template::parse(template).map_err(bad)?;
        let Some(body) = template.strip_prefix('/') else {
            return Err(bad("does not start with '/'".into()));
        };
        if body.is_empty() {
            return Err(bad(
                "has no segment: a workload's SPIFFE ID needs a path".into()
            ));
        }
        // Check the literal text: split the template on '/', with each
        // variable standing in as one valid character.
        let mut shape = String::new();
        for part in t.parts() {
            match part {
                Part::Literal(s) => shape.push_str(s),
                Part::Var(_) => shape.push('v'),
            }
        }
        for seg in shape[1..].split('/') {
            if let Some(p) = segment_problem(seg) {
                return Err(bad(format!("has a segment that {p}")));
            }
        }
        self.path = t;
        Ok(self)
    }

    /// The trust domain.
    pub fn trust_domain(&self) -> &str {
        &self.trust_domain
    }

    /// The path template as written.
    pub fn path_template(&self) -> &str {
        self.path.source()
    }

    /// The SPIFFE ID for `req`. A variable whose value is missing, or holds a
    /// character a path segment cannot (`/` included), is refused naming the
    /// variable and the request field; nothing is escaped.
    pub fn id_for(&self, req: &IssueRequest) -> Result<String> {
        let refuse = |v: &super::template::Var, why: String| {
            Error::invalid(
                "IssueRequest",
                v.field(req),
                format!(
                    "{why} ({} in the SPIFFE ID path {:?})",
                    v.name(),
                    self.path.source()
                ),
            )
        };
        let mut id = format!("spiffe://{}", self.trust_domain);
        // The segment being built and the variables in it: a value that
        // makes a whole segment "." or ".." is named.
        let mut segment = String::new();
        let mut vars: Vec<&super::template::Var> = Vec::new();
        let mut longest: Option<(&super::template::Var, usize)> = None;
        let close = |segment: &mut String, vars: &mut Vec<&super::template::Var>| {
            let bad = segment == "." || segment == "..";
            let named = vars.first().copied();
            let seg = std::mem::take(segment);
            vars.clear();
            match (bad, named) {
                (true, Some(v)) => Err(refuse(
                    v,
                    format!("makes the path segment {seg:?}, which a SPIFFE ID may not contain"),
                )),
                _ => Ok(()),
            }
        };
        for part in self.path.parts() {
            match part {
                Part::Literal(text) => {
                    for c in text.chars() {
                        if c == '/' {
                            close(&mut segment, &mut vars)?;
                        } else {
                            segment.push(c);
                        }
                        id.push(c);
                    }
                }
                Part::Var(v) => {
                    // An empty value is refused here even where a
                    // template renders it (`${vault.*}`): it would leave
                    // an empty path segment.
                    let Some(value) = v.resolve(req).filter(|v| !v.is_empty()) else {
                        return Err(refuse(v, "is missing or empty".into()));
                    };
                    if let Some(c) = value
                        .chars()
                        .find(|c| !(c.is_ascii() && segment_char(*c as u8)))
                    {
                        return Err(refuse(
                            v,
                            format!(
                                "is {:?}, which cannot be part of a SPIFFE ID: it contains {c:?}, and a path segment has letters, digits, '.', '-' and '_' only",
                                truncate_for_message(value)
                            ),
                        ));
                    }
                    if longest.is_none_or(|(_, n)| value.len() > n) {
                        longest = Some((v, value.len()));
                    }
                    segment.push_str(value);
                    vars.push(v);
                    id.push_str(value);
                }
            }
        }
        close(&mut segment, &mut vars)?;
        if id.len() > MAX_SPIFFE_ID_BYTES {
            let why = format!(
                "makes the SPIFFE ID {} bytes long, over the {MAX_SPIFFE_ID_BYTES} a SPIFFE ID may have",
                id.len()
            );
            return Err(match longest {
                Some((v, _)) => refuse(v, why),
                None => Error::invalid("SpiffeProfile", "path", why),
            });
        }
        // Everything was checked above; this is the specification's own test.
        if let Some(p) = spiffe_id_problem(&id) {
            return Err(Error::invalid(
                "IssueRequest",
                "Identity",
                format!(
                    "gives the SPIFFE ID {:?}, which {p}",
                    truncate_for_message(&id)
                ),
            ));
        }
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> IssueRequest {
        let mut r = IssueRequest {
            region: "global".into(),
            service: "web-api".into(),
            ..IssueRequest::default()
        };
        r.allocation.id = "a1".into();
        r.allocation.namespace = "default".into();
        r.allocation.job_id = "web".into();
        r.allocation.task_group = "frontend".into();
        r.identity.name = "consul-service_web-api".into();
        r
    }

    #[test]
    fn the_default_path_is_the_six_parts() {
        let p = SpiffeProfile::new("example.org").unwrap();
        assert_eq!(
            p.id_for(&req()).unwrap(),
            "spiffe://example.org/global/default/web/frontend/web-api/consul-service_web-api"
        );
        assert_eq!(spiffe_id_problem(&p.id_for(&req()).unwrap()), None);
    }

    #[test]
    fn values_that_cannot_be_represented_are_refused_by_name() {
        let p = SpiffeProfile::new("example.org").unwrap();
        for (job, why) in [
            ("web/dispatch", "contains '/'"),
            ("wéb", "contains 'é'"),
            ("a b", "contains ' '"),
        ] {
            let mut r = req();
            r.allocation.job_id = job.into();
            let e = p.id_for(&r).unwrap_err().to_string();
            assert!(e.contains("Allocation.JobID") && e.contains(why), "{e}");
            assert!(e.contains("${job.id}"), "{e}");
        }
        let mut r = req();
        r.allocation.job_id = "..".into();
        let e = p.id_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("\"..\"") && e.contains("Allocation.JobID"),
            "{e}"
        );
        assert!(e.contains("${job.id}"), "{e}");
        // A service's name is named as the Service field.
        let mut r = req();
        r.service = "web api".into();
        let e = p.id_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("Service") && e.contains("${workload.name}"),
            "{e}"
        );
        // "." inside a longer segment is fine.
        let mut r = req();
        r.allocation.job_id = "..web".into();
        assert!(p.id_for(&r).unwrap().contains("/..web/"));
        // ${vault.role}: its value in a Vault identity's path, and refused
        // by name where it would be empty (never an empty segment).
        let vp = SpiffeProfile::new("example.org")
            .unwrap()
            .path("/vault/${vault.role}/${task.name}")
            .unwrap();
        let mut r = req();
        r.service.clear();
        r.task = "server".into();
        r.identity.name = "vault_default".into();
        let e = vp.id_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("Vault.Role") && e.contains("missing or empty"),
            "{e}"
        );
        r.vault = Some(crate::model::Vault {
            role: "web".into(),
            ..Default::default()
        });
        assert_eq!(
            vp.id_for(&r).unwrap(),
            "spiffe://example.org/vault/web/server"
        );
        // An over-long ID names the longest value.
        let mut r = req();
        r.allocation.task_group = "g".repeat(MAX_SPIFFE_ID_BYTES);
        let e = p.id_for(&r).unwrap_err().to_string();
        assert!(
            e.contains("Allocation.TaskGroup") && e.contains("over the 2048"),
            "{e}"
        );
    }

    #[test]
    fn path_templates_are_checked_when_set() {
        let p = SpiffeProfile::new("example.org").unwrap();
        for bad in [
            "", "ns/x", "/", "/a//b", "/a/", "/./x", "/a/../b", "/a b", "/${nope}", "/é",
        ] {
            assert!(p.clone().path(bad).is_err(), "{bad:?}");
        }
        let p = p.path("/ns/${job.namespace}/sa-${identity.name}").unwrap();
        assert_eq!(
            p.id_for(&req()).unwrap(),
            "spiffe://example.org/ns/default/sa-consul-service_web-api"
        );
    }

    #[test]
    fn spiffe_ids_follow_the_specification() {
        for ok in ["spiffe://example.org", "spiffe://a_b.c-d/x/Y.z-1_2"] {
            assert_eq!(spiffe_id_problem(ok), None, "{ok}");
        }
        for bad in [
            "global:default:web:frontend:server:vault_default",
            "spiffe://Example.org/x",
            "spiffe://example.org/",
            "spiffe://example.org//x",
            "spiffe://example.org/./x",
            "spiffe://example.org/a%2Fb",
            "spiffe://",
            "SPIFFE://example.org/x",
        ] {
            assert!(spiffe_id_problem(bad).is_some(), "{bad}");
        }
        let long = format!("spiffe://example.org/{}", "a".repeat(MAX_SPIFFE_ID_BYTES));
        assert!(spiffe_id_problem(&long).unwrap().contains("at most 2048"));
        for bad in ["", "Upper.case", "a b", "a/b", &"x".repeat(256)] {
            assert!(trust_domain_problem(bad).is_some(), "{bad}");
        }
    }
}
