/*
 * wid_request.h: encode an IssueRequest (and a NodeIdentityRequest) as
 * msgpack from C, without Go.
 *
 * wid_issue() takes the request as msgpack, the way Nomad's Go code sends it
 * (hashicorp/go-msgpack, MsgpackHandle{RawToString: true}). A C caller that
 * has the fields in hand can build the same bytes with this header-only
 * encoder: a map of the keys the library reads, strings in the old-spec raw
 * forms Go writes (fixstr, str16, str32: never str8), integers as int64.
 * Unknown keys are ignored by the library, so a Go encoder's extra fields are
 * fine either way. The table of keys is in bindings/c/README.md.
 *
 *     const char *aud[] = {"vault.io"};
 *     wid_request_fields f = {0};
 *     uint8_t buf[1024];
 *     size_t n;
 *     f.region = "global";
 *     f.alloc_id = "5f8c7d2e-...";  f.alloc_namespace = "default";
 *     f.job_id = "web";             f.task_group = "frontend";
 *     f.task = "server";
 *     f.identity_name = "vault_default";
 *     f.audience = aud;  f.audience_count = 1;
 *     f.ttl_ns = WID_TTL_SECONDS(3600);   // nanoseconds! 0 means no exp
 *     n = wid_encode_issue_request(&f, buf, sizeof buf);   // 0: did not fit
 *     rc = wid_issue(kr, buf, n, now, &token);
 *
 * For a workload identity token (wid_issue_wit), also set the proof_key_*
 * fields to the members of the workload key's public JWK
 * (wid_workload_key_public_jwk): "alg", "crv", "kty", "x" and "y".
 *
 * For extra claims and SPIFFE path templates (wid_issuer_builder_*), the
 * request may also carry the identity's ExtraClaims (the optional claims it
 * asks for by name), the job's Meta and NodePool, and the Node:
 *
 *     const char *extra[] = {"dc"};
 *     const char *meta_keys[] = {"owner"}, *meta_values[] = {"team-a"};
 *     f.extra_claims = extra;          f.extra_claims_count = 1;
 *     f.job_meta_keys = meta_keys;     f.job_meta_values = meta_values;
 *     f.job_meta_count = 1;            f.job_node_pool = "gpu";
 *     f.node_id = "9d1e6a44-...";      f.node_datacenter = "dc1";
 *
 * Fields left NULL (or counts 0) are not written: a request that sets none
 * of them encodes exactly as before.
 *
 * A client node's own identity (wid_issue_node, wid_issuer_issue_node) takes
 * a NodeIdentityRequest, built the same way with wid_node_request_fields:
 *
 *     wid_node_request_fields n = {0};
 *     n.region = "global";
 *     n.node_id = "da86421c-...";   n.node_name = "client-1";
 *     n.node_datacenter = "dc1";    n.node_pool = "default";
 *     n.node_status = "ready";      // n.node_class: NULL for none
 *     // audience 0: Nomad's "nomadproject.io"; ttl_ns 0: Nomad's 24 h
 *     len = wid_encode_node_identity_request(&n, buf, sizeof buf);
 *     rc = wid_issue_node(kr, WID_ALG_EDDSA, buf, len, NULL, 0, now, &token);
 */
#ifndef WID_REQUEST_H
#define WID_REQUEST_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A TTL is a Go time.Duration: int64 NANOSECONDS. 3600 is 3.6 microseconds,
   and a positive TTL under one second is refused (WID_RESULT_INVALID_ARGUMENT). */
#define WID_TTL_SECONDS(s) ((int64_t)(s) * (int64_t)1000000000)

typedef struct wid_request_fields {
    const char *region;          /* Region (required) */
    const char *alloc_id;        /* Allocation.ID (required) */
    const char *alloc_namespace; /* Allocation.Namespace (required) */
    const char *job_id;          /* Allocation.JobID (required) */
    const char *parent_job_id;   /* Allocation.Job.ParentID, for child jobs (NULL: none) */
    const char *task_group;      /* Allocation.TaskGroup (required) */
    const char *task;            /* Task: exactly one of task and service (NULL: none) */
    const char *service;         /* Service */
    const char *identity_name;   /* Identity.Name (required, ^[a-zA-Z0-9-_]{1,128}$) */
    const char *const *audience; /* Identity.Audience (may be empty) */
    size_t audience_count;
    int64_t ttl_ns;              /* Identity.TTL, nanoseconds (0: no exp) */
    /* ProofKey: the workload's public key, for wid_issue_wit(). NULL
       proof_key_kty: no ProofKey, and the request encodes exactly as before.
       The members of wid_workload_key_public_jwk()'s JSON, by name: */
    const char *proof_key_alg;   /* ProofKey.Alg: "EdDSA" or "ES256" */
    const char *proof_key_crv;   /* ProofKey.Crv: "Ed25519" or "P-256" */
    const char *proof_key_kty;   /* ProofKey.Kty: "OKP" or "EC" */
    const char *proof_key_x;     /* ProofKey.X (base64url) */
    const char *proof_key_y;     /* ProofKey.Y (base64url; NULL or "" for Ed25519) */
    /* Identity.ExtraClaims: the names of the optional extra claims this
       identity asks for (0: none, and the key is not written). */
    const char *const *extra_claims;
    size_t extra_claims_count;
    /* Allocation.Job.Meta: job_meta_count pairs, job_meta_keys[i] ->
       job_meta_values[i] (0: none). */
    const char *const *job_meta_keys;
    const char *const *job_meta_values;
    size_t job_meta_count;
    const char *job_node_pool;   /* Allocation.Job.NodePool (NULL: none) */
    /* Node: the client node the allocation runs on, written when any of
       these is non-NULL (a NULL one is then ""); all NULL: no Node. */
    const char *node_datacenter; /* Node.Datacenter */
    const char *node_id;         /* Node.ID */
    const char *node_name;       /* Node.Name */
    const char *node_class;      /* Node.NodeClass */
    const char *node_pool;       /* Node.NodePool */
    /* Vault: the task's vault block, written when any of these is non-NULL
       (a NULL one is then ""); all NULL: no Vault. A task identity named
       vault_<cluster> carries vault_role and vault_namespace from it. */
    const char *vault_cluster;   /* Vault.Cluster */
    const char *vault_namespace; /* Vault.Namespace */
    const char *vault_role;      /* Vault.Role */
    /* Consul.Namespace: the task's (else the group's) consul namespace,
       written when non-NULL; an identity named consul* carries it as
       consul_namespace. NULL: no Consul. */
    const char *consul_namespace;
} wid_request_fields;

typedef struct wid_mp_out {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
} wid_mp_out;

static inline void wid_mp_put(wid_mp_out *o, const void *p, size_t n) {
    if (o->overflow || n > o->cap - o->len) {
        o->overflow = 1;
        return;
    }
    memcpy(o->buf + o->len, p, n);
    o->len += n;
}

static inline void wid_mp_byte(wid_mp_out *o, uint8_t b) { wid_mp_put(o, &b, 1); }

static inline void wid_mp_be(wid_mp_out *o, uint64_t v, int bytes) {
    uint8_t b[8];
    int i;
    for (i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
    wid_mp_put(o, b, (size_t)bytes);
}

/* Strings as Go's RawToString handle writes them: fixstr, str16 or str32. */
static inline void wid_mp_str(wid_mp_out *o, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n < 32) {
        wid_mp_byte(o, (uint8_t)(0xa0 | n));
    } else if (n <= 0xffff) {
        wid_mp_byte(o, 0xda);
        wid_mp_be(o, n, 2);
    } else {
        wid_mp_byte(o, 0xdb);
        wid_mp_be(o, n, 4);
    }
    wid_mp_put(o, s ? s : "", n);
}

static inline void wid_mp_map(wid_mp_out *o, uint8_t n) { wid_mp_byte(o, (uint8_t)(0x80 | n)); }

/* A map of any size up to 65535 entries: fixmap or map16. */
static inline void wid_mp_map_n(wid_mp_out *o, size_t n) {
    if (n < 16) {
        wid_mp_map(o, (uint8_t)n);
    } else {
        wid_mp_byte(o, 0xde);
        wid_mp_be(o, n, 2);
    }
}

static inline void wid_mp_array(wid_mp_out *o, size_t n) {
    if (n < 16) {
        wid_mp_byte(o, (uint8_t)(0x90 | n));
    } else {
        wid_mp_byte(o, 0xdc);
        wid_mp_be(o, n, 2);
    }
}

static inline void wid_mp_int64(wid_mp_out *o, int64_t v) {
    wid_mp_byte(o, 0xd3);
    wid_mp_be(o, (uint64_t)v, 8);
}

/* Encodes `f` into `buf`; returns the number of bytes, or 0 when `buf` is too
   small (or more than 65535 audiences, extra claims or meta entries are
   given). Validation (required fields, the identity name, the TTL) is the
   library's, in wid_issue(). The Job map is written when a parent job ID,
   job meta or a job node pool is given. */
static inline size_t wid_encode_issue_request(const wid_request_fields *f, uint8_t *buf, size_t cap) {
    wid_mp_out o;
    size_t i;
    int has_parent = f->parent_job_id != NULL && f->parent_job_id[0] != '\0';
    int has_meta = f->job_meta_count > 0;
    int has_node_pool = f->job_node_pool != NULL;
    int has_job = has_parent || has_meta || has_node_pool;
    int has_proof_key = f->proof_key_kty != NULL;
    int has_extra = f->extra_claims_count > 0;
    int has_node = f->node_datacenter != NULL || f->node_id != NULL || f->node_name != NULL ||
                   f->node_class != NULL || f->node_pool != NULL;
    int has_vault = f->vault_cluster != NULL || f->vault_namespace != NULL || f->vault_role != NULL;
    int has_consul = f->consul_namespace != NULL;
    o.buf = buf;
    o.cap = cap;
    o.len = 0;
    o.overflow = f->audience_count > 0xffff || f->extra_claims_count > 0xffff ||
                 f->job_meta_count > 0xffff;

    wid_mp_map(&o, (uint8_t)(5 + has_proof_key + has_node + has_vault + has_consul));
    wid_mp_str(&o, "Allocation");
    wid_mp_map(&o, (uint8_t)(has_job ? 5 : 4));
    wid_mp_str(&o, "ID");
    wid_mp_str(&o, f->alloc_id);
    if (has_job) {
        wid_mp_str(&o, "Job");
        wid_mp_map(&o, (uint8_t)(1 + has_meta + has_node_pool + has_parent));
        wid_mp_str(&o, "ID");
        wid_mp_str(&o, f->job_id);
        if (has_meta) {
            wid_mp_str(&o, "Meta");
            wid_mp_map_n(&o, f->job_meta_count);
            for (i = 0; i < f->job_meta_count; i++) {
                wid_mp_str(&o, f->job_meta_keys[i]);
                wid_mp_str(&o, f->job_meta_values[i]);
            }
        }
        if (has_node_pool) {
            wid_mp_str(&o, "NodePool");
            wid_mp_str(&o, f->job_node_pool);
        }
        if (has_parent) {
            wid_mp_str(&o, "ParentID");
            wid_mp_str(&o, f->parent_job_id);
        }
    }
    wid_mp_str(&o, "JobID");
    wid_mp_str(&o, f->job_id);
    wid_mp_str(&o, "Namespace");
    wid_mp_str(&o, f->alloc_namespace);
    wid_mp_str(&o, "TaskGroup");
    wid_mp_str(&o, f->task_group);

    if (has_consul) {
        wid_mp_str(&o, "Consul");
        wid_mp_map(&o, 1);
        wid_mp_str(&o, "Namespace");
        wid_mp_str(&o, f->consul_namespace);
    }

    wid_mp_str(&o, "Identity");
    wid_mp_map(&o, (uint8_t)(3 + has_extra));
    wid_mp_str(&o, "Audience");
    wid_mp_array(&o, f->audience_count);
    for (i = 0; i < f->audience_count; i++) wid_mp_str(&o, f->audience[i]);
    if (has_extra) {
        wid_mp_str(&o, "ExtraClaims");
        wid_mp_array(&o, f->extra_claims_count);
        for (i = 0; i < f->extra_claims_count; i++) wid_mp_str(&o, f->extra_claims[i]);
    }
    wid_mp_str(&o, "Name");
    wid_mp_str(&o, f->identity_name);
    wid_mp_str(&o, "TTL");
    wid_mp_int64(&o, f->ttl_ns);

    if (has_node) {
        wid_mp_str(&o, "Node");
        wid_mp_map(&o, 5);
        wid_mp_str(&o, "Datacenter");
        wid_mp_str(&o, f->node_datacenter);
        wid_mp_str(&o, "ID");
        wid_mp_str(&o, f->node_id);
        wid_mp_str(&o, "Name");
        wid_mp_str(&o, f->node_name);
        wid_mp_str(&o, "NodeClass");
        wid_mp_str(&o, f->node_class);
        wid_mp_str(&o, "NodePool");
        wid_mp_str(&o, f->node_pool);
    }

    if (has_proof_key) {
        wid_mp_str(&o, "ProofKey");
        wid_mp_map(&o, 5);
        wid_mp_str(&o, "Alg");
        wid_mp_str(&o, f->proof_key_alg);
        wid_mp_str(&o, "Crv");
        wid_mp_str(&o, f->proof_key_crv);
        wid_mp_str(&o, "Kty");
        wid_mp_str(&o, f->proof_key_kty);
        wid_mp_str(&o, "X");
        wid_mp_str(&o, f->proof_key_x);
        wid_mp_str(&o, "Y");
        wid_mp_str(&o, f->proof_key_y);
    }

    wid_mp_str(&o, "Region");
    wid_mp_str(&o, f->region);
    wid_mp_str(&o, "Service");
    wid_mp_str(&o, f->service);
    wid_mp_str(&o, "Task");
    wid_mp_str(&o, f->task);

    if (has_vault) {
        wid_mp_str(&o, "Vault");
        wid_mp_map(&o, 3);
        wid_mp_str(&o, "Cluster");
        wid_mp_str(&o, f->vault_cluster);
        wid_mp_str(&o, "Namespace");
        wid_mp_str(&o, f->vault_namespace);
        wid_mp_str(&o, "Role");
        wid_mp_str(&o, f->vault_role);
    }
    return o.overflow ? 0 : o.len;
}

/* A NodeIdentityRequest (Nomad 1.11's node identities): the node whose own
   identity wid_issue_node / wid_issuer_issue_node sign. */
typedef struct wid_node_request_fields {
    const char *region;          /* Region (required) */
    const char *node_datacenter; /* Node.Datacenter (required) */
    const char *node_id;         /* Node.ID (required) */
    const char *node_name;       /* Node.Name (NULL: "") */
    const char *node_class;      /* Node.NodeClass (NULL or "": none, no nomad_node_class claim) */
    const char *node_pool;       /* Node.NodePool (required) */
    const char *node_status;     /* Node.Status: "ready", "initializing", "down", ... (NULL: "") */
    const char *const *audience; /* Audience (0: Nomad's "nomadproject.io") */
    size_t audience_count;
    int64_t ttl_ns;              /* TTL, nanoseconds (0: Nomad's 24 h; a node identity always expires) */
} wid_node_request_fields;

/* Encodes `f` into `buf` as Go's go-msgpack writes a NodeIdentityRequest
   (keys sorted by name: Audience, Node{Datacenter, ID, Name, NodeClass,
   NodePool, Status}, Region, TTL); returns the number of bytes, or 0 when
   `buf` is too small (or more than 65535 audiences are given). Validation
   (required fields, ':' in Region, Node.ID or Node.NodePool, empty
   audiences, the TTL) is the library's, in wid_issue_node(). */
static inline size_t wid_encode_node_identity_request(const wid_node_request_fields *f, uint8_t *buf,
                                                      size_t cap) {
    wid_mp_out o;
    size_t i;
    o.buf = buf;
    o.cap = cap;
    o.len = 0;
    o.overflow = f->audience_count > 0xffff;

    wid_mp_map(&o, 4);
    wid_mp_str(&o, "Audience");
    wid_mp_array(&o, f->audience_count);
    for (i = 0; i < f->audience_count && !o.overflow; i++) wid_mp_str(&o, f->audience[i]);
    wid_mp_str(&o, "Node");
    wid_mp_map(&o, 6);
    wid_mp_str(&o, "Datacenter");
    wid_mp_str(&o, f->node_datacenter);
    wid_mp_str(&o, "ID");
    wid_mp_str(&o, f->node_id);
    wid_mp_str(&o, "Name");
    wid_mp_str(&o, f->node_name);
    wid_mp_str(&o, "NodeClass");
    wid_mp_str(&o, f->node_class);
    wid_mp_str(&o, "NodePool");
    wid_mp_str(&o, f->node_pool);
    wid_mp_str(&o, "Status");
    wid_mp_str(&o, f->node_status);
    wid_mp_str(&o, "Region");
    wid_mp_str(&o, f->region);
    wid_mp_str(&o, "TTL");
    wid_mp_int64(&o, f->ttl_ns);
    return o.overflow ? 0 : o.len;
}

#endif /* WID_REQUEST_H */
