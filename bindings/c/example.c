/*
 * example.c: the workload-identity C ABI end to end.
 *
 *   1. create a keyring and insert a key with known material;
 *   2. issue a token for an IssueRequest: msgpack, as Nomad's Go code sends
 *      it; here built in C with the encoder in wid_request.h (bytes straight
 *      off the Go wire, as in sample_request.h, work the same);
 *   3. print the token and the JWKS a relying party would fetch;
 *   4. build a verifier for audience "vault.io" with wid_verifier_builder
 *      (one setter per option), looking allocations up in a tiny in-memory
 *      table; verify the token and print the verified claims;
 *   5. mark the allocation terminal, show the token being rejected, and ask
 *      the verifier why (wid_explain) and what it has done (stats).
 *
 * Build (from the repository root, after
 * `cargo build --release --locked -p workload-identity-ffi`, the C library's
 * crate; cargo names the archive after it):
 *
 *   gcc -std=c11 -Wall -Wextra -pedantic -Iinclude bindings/c/example.c \
 *       target/release/libworkload_identity_ffi.a -lpthread -ldl -lm -o example
 *
 * or, installed (scripts/install.sh), with
 * $(pkg-config --cflags --libs workload_identity); see docs/c.md.
 *
 * Conventions worth knowing (see include/workload_identity.h):
 *   - string inputs are (pointer, length), not NUL-terminated;
 *   - every function returns a wid_result; outputs are written only on success;
 *   - on failure, wid_last_error_message() gives a per-thread detail message;
 *   - wid_bytes outputs are NUL-terminated (len excludes the NUL) and must be
 *     released with wid_bytes_free(); handles with wid_keyring_free(),
 *     wid_verifier_builder_free() and wid_verifier_free().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload_identity.h"
#include "wid_request.h"

/* The fixed "current time" used throughout, so the output is reproducible. */
#define NOW ((int64_t)1700000000)

/* ---- A tiny allocation table standing in for the scheduler's state store. */

struct alloc_entry {
    const char *id;
    uint32_t state; /* WID_ALLOC_LIVE or WID_ALLOC_TERMINAL */
};

struct alloc_table {
    struct alloc_entry *entries;
    size_t count;
};

/*
 * The lookup callback (wid_alloc_lookup_fn). The verifier calls it with the
 * allocation ID from a token whose signature and claims already checked out.
 * `alloc_id` is NOT NUL-terminated. A real store would read a replica for
 * WID_CONSISTENCY_STALE and the leader for WID_CONSISTENCY_CONSISTENT (the
 * verifier only asks for the latter when the stale read said "missing"); this
 * table is always up to date, so it ignores `consistency`.
 *
 * It may be called from several threads at once; this example is
 * single-threaded, so the table needs no lock.
 */
static wid_result lookup_alloc(void *userdata, const uint8_t *alloc_id, size_t alloc_id_len,
                               uint32_t consistency, uint32_t *out_state) {
    const struct alloc_table *table = userdata;
    size_t i;
    (void)consistency;
    for (i = 0; i < table->count; i++) {
        const char *id = table->entries[i].id;
        if (strlen(id) == alloc_id_len && memcmp(id, alloc_id, alloc_id_len) == 0) {
            *out_state = table->entries[i].state;
            return WID_RESULT_OK;
        }
    }
    *out_state = WID_ALLOC_MISSING;
    return WID_RESULT_OK;
}

/* Prints a failed call's result name and detail message, then exits. */
static void die(const char *what, wid_result rc) {
    char msg[512];
    wid_last_error_message(msg, sizeof msg);
    fprintf(stderr, "%s failed: %s (%u): %s\n", what, wid_result_name(rc), (unsigned)rc, msg);
    exit(1);
}

int main(void) {
    wid_keyring *kr = NULL;
    wid_verifier_builder *builder = NULL;
    wid_verifier *verifier = NULL;
    wid_bytes explanation = {NULL, 0};
    wid_bytes stats = {NULL, 0};
    wid_bytes token = {NULL, 0};
    wid_bytes jwks = {NULL, 0};
    wid_bytes claims = {NULL, 0};
    uint8_t material[32];
    const char *key_id = "example-key";
    const char *audience = "vault.io";
    struct alloc_entry entries[] = {
        {"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc", WID_ALLOC_LIVE},
    };
    struct alloc_table table = {entries, sizeof entries / sizeof entries[0]};
    char msg[512];
    wid_result rc;
    size_t i;
    const char *audiences[] = {"vault.io", "consul.io"};
    wid_request_fields req;
    uint8_t request[1024];
    size_t request_len;

    /* Check that the header we compiled against matches the library we run. */
    if (wid_abi_version() != WID_ABI_VERSION) {
        fprintf(stderr, "ABI mismatch: header %u, library %u\n", (unsigned)WID_ABI_VERSION,
                (unsigned)wid_abi_version());
        return 1;
    }
    printf("workload-identity %s (C ABI v%u)\n\n", wid_version(), (unsigned)wid_abi_version());

    /* 1. A keyring with one active key. The material would normally come from
     *    a secret store; bytes 0..31 keep the example deterministic. HKDF v1
     *    derives the Ed25519 signing key from it. */
    rc = wid_keyring_new(&kr);
    if (rc != WID_RESULT_OK) die("wid_keyring_new", rc);
    for (i = 0; i < sizeof material; i++) material[i] = (uint8_t)i;
    rc = wid_keyring_insert(kr, key_id, strlen(key_id), material, sizeof material,
                            WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW);
    if (rc != WID_RESULT_OK) die("wid_keyring_insert", rc);

    /* 2. Issue: the request is msgpack, as Nomad's Go code encodes it. The TTL
     *    is a Go time.Duration, so NANOSECONDS: WID_TTL_SECONDS(3600) is an
     *    hour; a bare 3600 would be 3.6 us and is refused. TTL 0 means a token
     *    without exp. */
    memset(&req, 0, sizeof req);
    req.region = "global";
    req.alloc_id = entries[0].id;
    req.alloc_namespace = "default";
    req.job_id = "web";
    req.task_group = "frontend";
    req.task = "server";
    req.identity_name = "vault_default";
    req.audience = audiences;
    req.audience_count = 2;
    req.ttl_ns = WID_TTL_SECONDS(3600);
    request_len = wid_encode_issue_request(&req, request, sizeof request);
    if (request_len == 0) {
        fprintf(stderr, "the request does not fit in %zu bytes\n", sizeof request);
        return 1;
    }
    rc = wid_issue(kr, request, request_len, NOW, &token);
    if (rc != WID_RESULT_OK) die("wid_issue", rc);
    /* wid_bytes data is NUL-terminated, so text can be printed directly. */
    printf("token (%zu bytes):\n  %s\n\n", token.len, (const char *)token.data);

    /* 3. The JWKS to serve at /.well-known/jwks.json. */
    rc = wid_keyring_jwks(kr, &jwks);
    if (rc != WID_RESULT_OK) die("wid_keyring_jwks", rc);
    printf("JWKS:\n  %s\n\n", (const char *)jwks.data);

    /* 4. Verify as a relying party for audience "vault.io" (required, given
     *    to wid_verifier_builder_new with the lookup). Every other option has
     *    a setter, checked at once: a bad value is refused and leaves the
     *    builder as it was. The builder and the verifiers it builds keep their
     *    own reference to the keyring; `table` must outlive them. */
    rc = wid_verifier_builder_new(kr, lookup_alloc, &table, audience, strlen(audience), &builder);
    if (rc != WID_RESULT_OK) die("wid_verifier_builder_new", rc);
    rc = wid_verifier_builder_set_leeway_secs(builder, 30); /* clock skew allowed (default 60) */
    if (rc != WID_RESULT_OK) die("wid_verifier_builder_set_leeway_secs", rc);
    rc = wid_verifier_builder_set_require_exp(builder, 1); /* no token without exp */
    if (rc != WID_RESULT_OK) die("wid_verifier_builder_set_require_exp", rc);
    rc = wid_verifier_builder_set_cache_entries(builder, 1024); /* skip re-checking signatures */
    if (rc != WID_RESULT_OK) die("wid_verifier_builder_set_cache_entries", rc);
    rc = wid_verifier_builder_set_leeway_secs(builder, -5); /* refused; builder unchanged */
    wid_last_error_message(msg, sizeof msg);
    printf("a negative leeway is refused: %s: %s\n\n", wid_result_name(rc), msg);
    rc = wid_verifier_builder_build(builder, &verifier);
    if (rc != WID_RESULT_OK) die("wid_verifier_builder_build", rc);
    /* The builder could now be changed and built again; here it is done. */
    wid_verifier_builder_free(builder);
    rc = wid_verify(verifier, (const char *)token.data, token.len, NOW, &claims);
    if (rc != WID_RESULT_OK) die("wid_verify", rc);
    printf("verified; claims:\n  %s\n\n", (const char *)claims.data);

    /* 5. The allocation stops: its token must be rejected at once, even though
     *    it has not expired. */
    entries[0].state = WID_ALLOC_TERMINAL;
    rc = wid_verify(verifier, (const char *)token.data, token.len, NOW, NULL);
    if (rc == WID_RESULT_OK) {
        fprintf(stderr, "a terminal allocation's token was accepted\n");
        return 1;
    }
    wid_last_error_message(msg, sizeof msg);
    printf("after the allocation stopped: rejected: %s (%u): %s\n", wid_result_name(rc),
           (unsigned)rc, msg);

    /* Why, step by step (the JSON `wid inspect --json` prints): the steps
     * run, the failed one last, and the verdict's code. */
    if (wid_explain(verifier, (const char *)token.data, token.len, NOW, &explanation) ==
        WID_RESULT_OK)
        printf("\nexplained:\n  %s\n", (const char *)explanation.data);
    if (wid_verifier_stats(verifier, &stats) == WID_RESULT_OK)
        printf("\nverifier stats:\n  %s\n", (const char *)stats.data);

    /* Release everything: bytes, then handles (each is NULL-safe). */
    wid_bytes_free(&stats);
    wid_bytes_free(&explanation);
    wid_bytes_free(&claims);
    wid_bytes_free(&jwks);
    wid_bytes_free(&token);
    wid_verifier_free(verifier);
    wid_keyring_free(kr);
    return rc == WID_RESULT_ALLOCATION_TERMINAL ? 0 : 1;
}
