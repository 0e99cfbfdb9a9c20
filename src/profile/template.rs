//! Templates over an issue request: `${job.id}`, `${job.meta.owner}`, ...
//!
//! The variable names are Nomad's (its `extra_claims` interpolation, 1.8.3 and
//! 2.0.3) where Nomad has one; ours fill the gaps (`${job.parent_id}`,
//! `${service.name}`, `${workload.name}`, `${identity.name}`, `${node.name}`).
//! Unlike Nomad, which leaves an unknown `${...}` as it is and writes an empty
//! string for a field it does not have, a template here is refused when it is
//! parsed if it names an unknown variable, and rendering it fails, naming the
//! field, when the request lacks a field it reads. A field that is empty counts
//! as missing: Go sends zero values, not absent fields. The one exception is
//! `${vault.*}`, empty as in Nomad when the identity has no Vault block: each
//! of its fields is optional in a job (an empty role means the auth method's
//! default role), and a claim of every namespace (`"*"`, Nomad's
//! `vault.default_identity.extra_claims`) that names one must not refuse
//! every identity without a Vault block.

use crate::model::IssueRequest;

/// One variable a template may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Var {
    JobRegion,
    JobNamespace,
    JobId,
    JobParentId,
    JobNodePool,
    JobMeta(String),
    GroupName,
    AllocId,
    TaskName,
    ServiceName,
    WorkloadName,
    IdentityName,
    NodeId,
    NodeName,
    NodeDatacenter,
    NodePool,
    NodeClass,
    VaultCluster,
    VaultNamespace,
    VaultRole,
}

/// Every fixed variable, with its name; `${job.meta.<key>}` is the one family.
const FIXED: [(&str, Var); 19] = [
    ("job.region", Var::JobRegion),
    ("job.namespace", Var::JobNamespace),
    ("job.id", Var::JobId),
    ("job.parent_id", Var::JobParentId),
    ("job.node_pool", Var::JobNodePool),
    ("group.name", Var::GroupName),
    ("alloc.id", Var::AllocId),
    ("task.name", Var::TaskName),
    ("service.name", Var::ServiceName),
    ("workload.name", Var::WorkloadName),
    ("identity.name", Var::IdentityName),
    ("node.id", Var::NodeId),
    ("node.name", Var::NodeName),
    ("node.datacenter", Var::NodeDatacenter),
    ("node.pool", Var::NodePool),
    ("node.class", Var::NodeClass),
    ("vault.cluster", Var::VaultCluster),
    ("vault.namespace", Var::VaultNamespace),
    ("vault.role", Var::VaultRole),
];

/// The names other templating schemes use for our variables, for a hint.
const ALIASES: [(&str, &str); 8] = [
    ("region", "job.region"),
    ("namespace", "job.namespace"),
    ("job", "job.id"),
    ("group", "group.name"),
    ("task", "task.name"),
    ("service", "service.name"),
    ("identity", "identity.name"),
    ("alloc", "alloc.id"),
];

/// The variables a template may use, for messages and docs.
pub(crate) const VARIABLES: &str = "${job.region}, ${job.namespace}, ${job.id}, ${job.parent_id}, ${job.node_pool}, ${job.meta.<key>}, ${group.name}, ${alloc.id}, ${task.name}, ${service.name}, ${workload.name}, ${identity.name}, ${node.id}, ${node.name}, ${node.datacenter}, ${node.pool}, ${node.class}, ${vault.cluster}, ${vault.namespace}, ${vault.role}";

impl Var {
    fn parse(name: &str) -> Result<Var, String> {
        if let Some((_, v)) = FIXED.iter().find(|(n, _)| *n == name) {
            return Ok(v.clone());
        }
        if let Some(key) = name.strip_prefix("job.meta.") {
            if key.is_empty() {
                return Err("${job.meta.} names no key; write ${job.meta.<key>}".into());
            }
            return Ok(Var::JobMeta(key.to_string()));
        }
        let hint = ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map(|(_, ours)| format!(" (did you mean ${{{ours}}}?)"))
            .unwrap_or_default();
        Err(format!(
            "${{{}}} is not a variable{hint}; the variables are {VARIABLES}",
            crate::error::truncate_for_message(name)
        ))
    }

    /// The variable as written, `${...}`.
    pub(crate) fn name(&self) -> String {
        match self {
            Var::JobMeta(key) => format!("${{job.meta.{key}}}"),
            other => FIXED
                .iter()
                .find(|(_, v)| v == other)
                .map(|(n, _)| format!("${{{n}}}"))
                // FIXED lists every variant but JobMeta, handled above.
                .unwrap_or_default(),
        }
    }

    /// The request field the variable reads in `req`, by codec names.
    pub(crate) fn field(&self, req: &IssueRequest) -> String {
        match self {
            Var::JobRegion => "Region".into(),
            Var::JobNamespace => "Allocation.Namespace".into(),
            Var::JobId => match &req.allocation.job {
                Some(job) if !job.parent_id.is_empty() => "Allocation.Job.ParentID".into(),
                _ => "Allocation.JobID".into(),
            },
            Var::JobParentId => "Allocation.Job.ParentID".into(),
            Var::JobNodePool => "Allocation.Job.NodePool".into(),
            Var::JobMeta(key) => format!(
                "Allocation.Job.Meta[{:?}]",
                crate::error::truncate_for_message(key)
            ),
            Var::GroupName => "Allocation.TaskGroup".into(),
            Var::AllocId => "Allocation.ID".into(),
            Var::TaskName => "Task".into(),
            Var::ServiceName => "Service".into(),
            Var::WorkloadName if req.task.is_empty() && !req.service.is_empty() => "Service".into(),
            Var::WorkloadName => "Task".into(),
            Var::IdentityName => "Identity.Name".into(),
            Var::NodeId => "Node.ID".into(),
            Var::NodeName => "Node.Name".into(),
            Var::NodeDatacenter => "Node.Datacenter".into(),
            Var::NodePool => "Node.NodePool".into(),
            Var::NodeClass => "Node.NodeClass".into(),
            Var::VaultCluster => "Vault.Cluster".into(),
            Var::VaultNamespace => "Vault.Namespace".into(),
            Var::VaultRole => "Vault.Role".into(),
        }
    }

    /// The value in `req`; `None` when the field is absent or empty (but
    /// `${vault.*}` is never missing: empty, as Nomad renders it, when the
    /// identity has no Vault block or the block leaves the field empty).
    pub(crate) fn resolve<'a>(&self, req: &'a IssueRequest) -> Option<&'a str> {
        let a = &req.allocation;
        let job = a.job.as_ref();
        let node = req.node.as_ref();
        let vault = req.vault_for_claims();
        let v: &str = match self {
            // As Nomad: the Vault block a Vault identity's claims carry.
            Var::VaultCluster => return Some(vault.map_or("", |v| v.cluster.as_str())),
            Var::VaultNamespace => return Some(vault.map_or("", |v| v.namespace.as_str())),
            Var::VaultRole => return Some(vault.map_or("", |v| v.role.as_str())),
            Var::JobRegion => &req.region,
            Var::JobNamespace => &a.namespace,
            // As Nomad: the parent job's ID for a child job.
            Var::JobId => a.identity_job_id(),
            Var::JobParentId => &job?.parent_id,
            Var::JobNodePool => &job?.node_pool,
            Var::JobMeta(key) => job?.meta.get(key)?,
            Var::GroupName => &a.task_group,
            Var::AllocId => &a.id,
            Var::TaskName => &req.task,
            Var::ServiceName => &req.service,
            Var::WorkloadName => req.workload().ok()?.name(),
            Var::IdentityName => &req.identity.name,
            Var::NodeId => &node?.id,
            Var::NodeName => &node?.name,
            Var::NodeDatacenter => &node?.datacenter,
            Var::NodePool => &node?.node_pool,
            Var::NodeClass => &node?.node_class,
        };
        (!v.is_empty()).then_some(v)
    }
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    Var(Var),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    source: String,
    parts: Vec<Part>,
}

/// Why a template could not be rendered for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// The variable, `${...}`.
    pub(crate) var: String,
    /// The request field it reads.
    pub(crate) field: String,
}

impl Template {
    /// Parses `source`; an unknown variable or an unclosed `${` is an error.
    pub(crate) fn parse(source: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(at) = rest.find("${") {
            if at > 0 {
                parts.push(Part::Literal(rest[..at].to_string()));
            }
            let after = &rest[at + 2..];
            let end = after.find('}').ok_or_else(|| {
                format!(
                    "has a \"${{\" without its closing \"}}\" in {:?}",
                    crate::error::truncate_for_message(source)
                )
            })?;
            parts.push(Part::Var(Var::parse(&after[..end])?));
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(Template {
            source: source.to_string(),
            parts,
        })
    }

    /// The template as written.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// Its pieces.
    pub(crate) fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The request fields the template reads, by codec names.
    pub(crate) fn fields(&self, req: &IssueRequest) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for part in &self.parts {
            if let Part::Var(v) = part {
                let f = v.field(req);
                if !out.contains(&f) {
                    out.push(f);
                }
            }
        }
        out
    }

    /// The template with every variable replaced by its value in `req`.
    pub(crate) fn render(&self, req: &IssueRequest) -> Result<String, Missing> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Var(v) => out.push_str(v.resolve(req).ok_or_else(|| Missing {
                    var: v.name(),
                    field: v.field(req),
                })?),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> IssueRequest {
        let mut r = IssueRequest {
            region: "global".into(),
            task: "server".into(),
            ..IssueRequest::default()
        };
        r.allocation.id = "a1".into();
        r.allocation.namespace = "default".into();
        r.allocation.job_id = "web/dispatch-1".into();
        r.allocation.task_group = "frontend".into();
        r.allocation.job = Some(crate::model::Job {
            id: "web/dispatch-1".into(),
            parent_id: "web".into(),
            meta: [("customer", "acme")].into_iter().collect(),
            ..crate::model::Job::default()
        });
        r.identity.name = "vault_default".into();
        r
    }

    #[test]
    fn renders_nomads_names_and_ours() {
        let t = Template::parse("${job.meta.customer}+${job.id}@${job.region}/${identity.name}")
            .unwrap();
        assert_eq!(t.render(&req()).unwrap(), "acme+web@global/vault_default");
        let t = Template::parse("${workload.name}:${task.name}:${alloc.id}").unwrap();
        assert_eq!(t.render(&req()).unwrap(), "server:server:a1");
        assert_eq!(
            Template::parse("plain $ text")
                .unwrap()
                .render(&req())
                .unwrap(),
            "plain $ text"
        );
    }

    #[test]
    fn vault_variables_are_the_vault_identitys_block_or_empty() {
        let t = Template::parse("${vault.cluster}/${vault.namespace}/${vault.role}").unwrap();
        let mut r = req();
        // No block: empty, as Nomad renders it (never a missing field).
        assert_eq!(t.render(&r).unwrap(), "//");
        r.vault = Some(crate::model::Vault {
            cluster: "eu".into(),
            namespace: "ns1/ns2".into(),
            role: String::new(),
        });
        assert_eq!(t.render(&r).unwrap(), "eu/ns1/ns2/");
        assert_eq!(
            t.fields(&r),
            ["Vault.Cluster", "Vault.Namespace", "Vault.Role"]
        );
        // Not a Vault identity: Nomad has no Vault block for it.
        r.identity.name = "default".into();
        assert_eq!(t.render(&r).unwrap(), "//");
    }

    #[test]
    fn a_missing_field_is_named() {
        for (src, var, field) in [
            (
                "${node.datacenter}",
                "${node.datacenter}",
                "Node.Datacenter",
            ),
            (
                "x${job.meta.team}",
                "${job.meta.team}",
                "Allocation.Job.Meta[\"team\"]",
            ),
            ("${service.name}", "${service.name}", "Service"),
            (
                "${job.node_pool}",
                "${job.node_pool}",
                "Allocation.Job.NodePool",
            ),
        ] {
            let m = Template::parse(src).unwrap().render(&req()).unwrap_err();
            assert_eq!((m.var.as_str(), m.field.as_str()), (var, field), "{src}");
        }
    }

    #[test]
    fn unknown_variables_and_unclosed_braces_are_refused() {
        let e = Template::parse("${group}").unwrap_err();
        assert!(e.contains("did you mean ${group.name}?"), "{e}");
        assert!(Template::parse("${job.meta.}").is_err());
        assert!(Template::parse("${nope").unwrap_err().contains("closing"));
        assert!(Template::parse("${JOB.ID}").is_err());
    }
}
