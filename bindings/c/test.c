/*
 * test.c: exercises every exported function of the workload-identity C ABI
 * (ffi/abi/symbols.txt), success and error paths, from C.
 *
 * Each check reports file:line, the expected and the actual result names and
 * the library's last error message; failures are counted and the program
 * exits 1 if any check failed. The last line is a summary:
 *
 *   c tests: N checks, M failed
 *
 * Run it through scripts/c-tests.sh, which also runs it under valgrind.
 *
 * Not tested on purpose:
 *   - use after free of a handle (wid_keyring_free / wid_verifier_free then
 *     use): undefined behaviour by contract, not reliably detectable;
 *   - lengths larger than the buffer but *within* a function's cap (the
 *     library may legitimately read that far); a token length above the
 *     verifier's max_token_bytes is never read (test_overlong_tokens_unread).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "workload_identity.h"
#include "sample_request.h"
#include "wid_request.h"

/* ------------------------------------------------------------------------ */
/* Assertions                                                               */
/* ------------------------------------------------------------------------ */

static unsigned long g_checks;
static unsigned long g_failed;

static const char *last_error(void) {
    static char buf[1024];
    buf[0] = '\0';
    wid_last_error_message(buf, sizeof buf);
    return buf;
}

/* `got` is evaluated before this runs, so the last error is the call's own. */
static void check_rc(wid_result got, wid_result want, const char *expr, const char *file,
                     int line) {
    g_checks++;
    if (got != want) {
        g_failed++;
        fprintf(stderr, "%s:%d: FAIL %s\n    expected %s (%u), got %s (%u); last error: \"%s\"\n",
                file, line, expr, wid_result_name(want), (unsigned)want, wid_result_name(got),
                (unsigned)got, last_error());
    }
}

/* Like check_rc, for the few cases where either of two codes is correct. */
static void check_rc2(wid_result got, wid_result want1, wid_result want2, const char *expr,
                      const char *file, int line) {
    g_checks++;
    if (got != want1 && got != want2) {
        g_failed++;
        fprintf(stderr,
                "%s:%d: FAIL %s\n    expected %s or %s, got %s (%u); last error: \"%s\"\n", file,
                line, expr, wid_result_name(want1), wid_result_name(want2), wid_result_name(got),
                (unsigned)got, last_error());
    }
}

static void check_true(int ok, const char *expr, const char *file, int line) {
    g_checks++;
    if (!ok) {
        g_failed++;
        fprintf(stderr, "%s:%d: FAIL %s; last error: \"%s\"\n", file, line, expr, last_error());
    }
}

#define CHECK_RC(expr, want) check_rc((expr), (want), #expr, __FILE__, __LINE__)
#define CHECK_RC2(expr, want1, want2) check_rc2((expr), (want1), (want2), #expr, __FILE__, __LINE__)
#define CHECK_OK(expr) CHECK_RC((expr), WID_RESULT_OK)
#define CHECK(cond) check_true(!!(cond), #cond, __FILE__, __LINE__)

/* A (pointer, length) pair for a C string literal or variable. */
#define S(s) (s), strlen(s)

/* ------------------------------------------------------------------------ */
/* Fixtures                                                                 */
/* ------------------------------------------------------------------------ */

#define NOW ((int64_t)1700000000)
#define TTL ((int64_t)3600) /* the sample request's identity TTL */
#define ALLOC_ID "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
#define AUD "vault.io"
#define BAD_UTF8 "\xff\xfe\x80"

/* Sentinels: outputs must keep them when a call fails. */
#define SENTINEL_PTR ((uint8_t *)(uintptr_t)0x1)
#define SENTINEL_PTR_C ((const char *)(uintptr_t)0x1)
#define SENTINEL_LEN ((size_t)12345)
#define SENTINEL_KR ((wid_keyring *)(uintptr_t)0x10)
#define SENTINEL_V ((wid_verifier *)(uintptr_t)0x20)
#define SENTINEL_COUNT ((size_t)777)

static wid_bytes sentinel_bytes(void) {
    wid_bytes b;
    b.data = SENTINEL_PTR;
    b.len = SENTINEL_LEN;
    return b;
}

static int is_sentinel(const wid_bytes *b) {
    return b->data == SENTINEL_PTR && b->len == SENTINEL_LEN;
}

static int bytes_contain(const wid_bytes *b, const char *needle) {
    return b->data != NULL && strstr((const char *)b->data, needle) != NULL;
}

static int bytes_eq(const wid_bytes *b, const char *s) {
    return b->data != NULL && b->len == strlen(s) && memcmp(b->data, s, b->len) == 0;
}

static void fill_material(uint8_t m[32], uint8_t start) {
    size_t i;
    for (i = 0; i < 32; i++) m[i] = (uint8_t)(start + i);
}

/* A keyring holding one active key `kid` with material start..start+31. */
static wid_keyring *keyring_with_key(const char *kid, uint8_t start) {
    wid_keyring *kr = NULL;
    uint8_t m[32];
    fill_material(m, start);
    CHECK_OK(wid_keyring_new(&kr));
    CHECK(kr != NULL);
    CHECK_OK(wid_keyring_insert(kr, S(kid), m, sizeof m, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_ACTIVE, NOW));
    return kr;
}

static wid_bytes issue(const wid_keyring *kr, int64_t now) {
    wid_bytes t = {NULL, 0};
    CHECK_OK(wid_issue(kr, wid_sample_request, wid_sample_request_len, now, &t));
    return t;
}

/* A malloc'd copy of a token with one base64url character of the payload
 * changed: the JSON changes, so the signature no longer matches. */
static char *tampered_copy(const wid_bytes *t) {
    char *s = malloc(t->len + 1);
    char *dot;
    if (s == NULL) abort();
    memcpy(s, t->data, t->len + 1);
    dot = strchr(s, '.');
    if (dot != NULL && (size_t)(dot - s) + 20 < t->len) {
        dot[20] = dot[20] == 'A' ? 'B' : 'A';
    }
    return s;
}

/* ---- The allocation lookup used by most tests. */

struct lookup_ctx {
    const char *alloc_id;      /* the allocation this table knows */
    uint32_t stale_state;      /* reported for WID_CONSISTENCY_STALE */
    uint32_t consistent_state; /* reported for WID_CONSISTENCY_CONSISTENT */
    wid_result rc;             /* returned by the callback */
    int write_state;           /* 0: return without writing *out_state */
    uint32_t seen[8];          /* the consistencies asked for, in order */
    size_t nseen;
    int wrong_id;              /* called with another allocation ID */
};

static void ctx_init(struct lookup_ctx *c, uint32_t stale, uint32_t consistent) {
    memset(c, 0, sizeof *c);
    c->alloc_id = ALLOC_ID;
    c->stale_state = stale;
    c->consistent_state = consistent;
    c->rc = WID_RESULT_OK;
    c->write_state = 1;
}

static wid_result lookup(void *userdata, const uint8_t *alloc_id, size_t alloc_id_len,
                         uint32_t consistency, uint32_t *out_state) {
    struct lookup_ctx *c = userdata;
    int known = strlen(c->alloc_id) == alloc_id_len &&
                memcmp(c->alloc_id, alloc_id, alloc_id_len) == 0;
    if (c->nseen < sizeof c->seen / sizeof c->seen[0]) c->seen[c->nseen++] = consistency;
    if (!known) c->wrong_id = 1;
    if (c->rc != WID_RESULT_OK) return c->rc;
    if (c->write_state) {
        if (!known)
            *out_state = WID_ALLOC_MISSING;
        else
            *out_state =
                consistency == WID_CONSISTENCY_STALE ? c->stale_state : c->consistent_state;
    }
    return WID_RESULT_OK;
}

/* A verifier for AUD over `kr` that never waits for unknown keys. */
static wid_verifier *verifier_for(const wid_keyring *kr, struct lookup_ctx *ctx) {
    wid_verifier *v = NULL;
    wid_verifier_options o;
    memset(&o, 0, sizeof o);
    o.leeway_secs = 60;
    o.key_wait_ms = -1;
    CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, ctx, &v));
    CHECK(v != NULL);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Tests                                                                    */
/* ------------------------------------------------------------------------ */

static void test_versions_and_names(void) {
    char want[64];
    struct {
        wid_result code;
        const char *name;
    } names[] = {
        {WID_RESULT_OK, "WID_RESULT_OK"},
        {WID_RESULT_NULL_ARGUMENT, "WID_RESULT_NULL_ARGUMENT"},
        {WID_RESULT_INVALID_ARGUMENT, "WID_RESULT_INVALID_ARGUMENT"},
        {WID_RESULT_DECODE_ERROR, "WID_RESULT_DECODE_ERROR"},
        {WID_RESULT_IO_ERROR, "WID_RESULT_IO_ERROR"},
        {WID_RESULT_PANIC, "WID_RESULT_PANIC"},
        {WID_RESULT_MALFORMED_TOKEN, "WID_RESULT_MALFORMED_TOKEN"},
        {WID_RESULT_UNSUPPORTED_ALGORITHM, "WID_RESULT_UNSUPPORTED_ALGORITHM"},
        {WID_RESULT_UNKNOWN_KEY, "WID_RESULT_UNKNOWN_KEY"},
        {WID_RESULT_BAD_SIGNATURE, "WID_RESULT_BAD_SIGNATURE"},
        {WID_RESULT_EXPIRED, "WID_RESULT_EXPIRED"},
        {WID_RESULT_NOT_YET_VALID, "WID_RESULT_NOT_YET_VALID"},
        {WID_RESULT_AUDIENCE_MISMATCH, "WID_RESULT_AUDIENCE_MISMATCH"},
        {WID_RESULT_ISSUER_MISMATCH, "WID_RESULT_ISSUER_MISMATCH"},
        {WID_RESULT_ALLOCATION_NOT_FOUND, "WID_RESULT_ALLOCATION_NOT_FOUND"},
        {WID_RESULT_ALLOCATION_TERMINAL, "WID_RESULT_ALLOCATION_TERMINAL"},
        {WID_RESULT_STORE_UNAVAILABLE, "WID_RESULT_STORE_UNAVAILABLE"},
        {WID_RESULT_NO_ACTIVE_KEY, "WID_RESULT_NO_ACTIVE_KEY"},
        {WID_RESULT_DUPLICATE_KEY, "WID_RESULT_DUPLICATE_KEY"},
        {WID_RESULT_KEYRING_CONFLICT, "WID_RESULT_KEYRING_CONFLICT"},
        {WID_RESULT_KEYRING_UNAVAILABLE, "WID_RESULT_KEYRING_UNAVAILABLE"},
        {32, "WID_RESULT_KEYRING_CONFLICT"},
        {33, "WID_RESULT_KEYRING_UNAVAILABLE"},
        {WID_RESULT_TOKEN_EXCHANGE_FAILED, "WID_RESULT_TOKEN_EXCHANGE_FAILED"},
        {WID_RESULT_PROOF_REQUIRED, "WID_RESULT_PROOF_REQUIRED"},
        {WID_RESULT_PROOF_INVALID, "WID_RESULT_PROOF_INVALID"},
        {WID_RESULT_PROOF_REPLAYED, "WID_RESULT_PROOF_REPLAYED"},
        {50, "WID_RESULT_PROOF_REQUIRED"},
        {51, "WID_RESULT_PROOF_INVALID"},
        {52, "WID_RESULT_PROOF_REPLAYED"},
        /* Unknown codes, including gaps between the defined ones. */
        {6, "WID_RESULT_UNKNOWN"},
        {9, "WID_RESULT_UNKNOWN"},
        {18, "WID_RESULT_TOKEN_KIND_REFUSED"},
        {23, "WID_RESULT_NODE_NOT_FOUND"},
        {24, "WID_RESULT_NODE_DOWN"},
        {19, "WID_RESULT_UNKNOWN"},
        {25, "WID_RESULT_UNKNOWN"},
        {39, "WID_RESULT_UNKNOWN"},
        {41, "WID_RESULT_UNKNOWN"},
        {49, "WID_RESULT_UNKNOWN"},
        {53, "WID_RESULT_UNKNOWN"},
        {34, "WID_RESULT_UNKNOWN"},
        {1000, "WID_RESULT_UNKNOWN"},
        {UINT32_MAX, "WID_RESULT_UNKNOWN"},
    };
    size_t i;

    CHECK(wid_abi_version() == WID_ABI_VERSION);
    snprintf(want, sizeof want, "%d.%d.%d", WID_VERSION_MAJOR, WID_VERSION_MINOR,
             WID_VERSION_PATCH);
    CHECK(wid_version() != NULL);
    CHECK(strcmp(wid_version(), want) == 0);
    /* The same static string every time. */
    CHECK(wid_version() == wid_version());

    for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *got = wid_result_name(names[i].code);
        g_checks++;
        if (got == NULL || strcmp(got, names[i].name) != 0) {
            g_failed++;
            fprintf(stderr, "%s:%d: FAIL wid_result_name(%u) = \"%s\", expected \"%s\"\n",
                    __FILE__, __LINE__, (unsigned)names[i].code, got ? got : "(null)",
                    names[i].name);
        }
    }
}

static void test_last_error_message(void) {
    wid_keyring *kr = NULL;
    char buf[4];
    char big[512];
    size_t n, full;

    /* After a failure: a non-empty message. */
    CHECK_RC(wid_keyring_new(NULL), WID_RESULT_NULL_ARGUMENT);
    full = wid_last_error_message(NULL, 0);
    CHECK(full > 0);
    /* A non-NULL buffer of length 0: nothing is written, the length returned. */
    memset(buf, 'x', sizeof buf);
    CHECK(wid_last_error_message(buf, 0) == full);
    CHECK(buf[0] == 'x');
    /* A 4-byte buffer: 3 bytes and a NUL, still the full length returned. */
    n = wid_last_error_message(buf, sizeof buf);
    CHECK(n == full);
    CHECK(buf[3] == '\0');
    CHECK(strlen(buf) == 3);
    /* A large buffer: the whole message, and reading does not clear it. */
    n = wid_last_error_message(big, sizeof big);
    CHECK(n == full);
    CHECK(strlen(big) == full);
    CHECK(strncmp(big, buf, 3) == 0);
    CHECK(wid_last_error_message(NULL, 0) == full);

    /* After a success: empty, and a buffer gets just the NUL. */
    CHECK_OK(wid_keyring_new(&kr));
    CHECK(wid_last_error_message(NULL, 0) == 0);
    memset(buf, 'x', sizeof buf);
    CHECK(wid_last_error_message(buf, sizeof buf) == 0);
    CHECK(buf[0] == '\0');

    /* The message is per thread: see test_threads(). */
    wid_keyring_free(kr);
}

static void test_frees_are_null_safe(void) {
    wid_keyring *kr = NULL;
    wid_bytes b = {NULL, 0};
    wid_bytes id = {NULL, 0};

    wid_keyring_free(NULL);
    wid_verifier_free(NULL);
    wid_workload_key_free(NULL);
    wid_issuer_builder_free(NULL);
    wid_issuer_free(NULL);
    wid_verifier_builder_free(NULL);
    wid_remote_jwks_builder_free(NULL);
    wid_remote_jwks_free(NULL);
    wid_node_identity_manager_free(NULL);
    wid_bytes_free(NULL);
    wid_bytes_free(&b); /* an empty value */
    CHECK(b.data == NULL && b.len == 0);

    CHECK_OK(wid_keyring_new(&kr));
    CHECK_OK(wid_keyring_rotate(kr, NOW, &id));
    CHECK(id.data != NULL && id.len > 0);
    CHECK(id.data[id.len] == '\0'); /* NUL-terminated, not counted */
    wid_bytes_free(&id);
    CHECK(id.data == NULL && id.len == 0); /* reset */
    wid_bytes_free(&id);                   /* double free of a reset value */
    CHECK(id.data == NULL && id.len == 0);
    /* The header's rule for reusing an output: free it (which empties it)
     * before passing it again. Run under valgrind, nothing leaks. */
    for (int i = 0; i < 3; i++) {
        CHECK(id.data == NULL && id.len == 0);
        CHECK_OK(wid_keyring_rotate(kr, NOW + i, &id));
        CHECK(id.len > 0);
        wid_bytes_free(&id);
    }
    wid_keyring_free(kr);
}

static void test_null_arguments(void) {
    wid_keyring *kr = keyring_with_key("null-tests", 0);
    wid_keyring *kr_out = SENTINEL_KR;
    wid_verifier *v = NULL;
    wid_verifier *v_out = SENTINEL_V;
    wid_verifier_options o;
    struct lookup_ctx ctx;
    wid_bytes out = sentinel_bytes();
    wid_bytes token = issue(kr, NOW);
    wid_bytes jwks = {NULL, 0};
    uint8_t m[32];
    size_t count = SENTINEL_COUNT;
    const char *toks[1];
    size_t lens[1];
    wid_result res[1];

    fill_material(m, 100);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    memset(&o, 0, sizeof o);
    o.key_wait_ms = -1;

    /* wid_keyring_new */
    CHECK_RC(wid_keyring_new(NULL), WID_RESULT_NULL_ARGUMENT);

    /* wid_keyring_insert */
    CHECK_RC(wid_keyring_insert(NULL, S("k1"), m, 32, 1, 2, NOW), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, NULL, 2, m, 32, 1, 2, NOW), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k1"), NULL, 32, 1, 2, NOW), WID_RESULT_NULL_ARGUMENT);
    /* (NULL, 0) is an empty input: an empty key ID / material is invalid. */
    CHECK_RC(wid_keyring_insert(kr, NULL, 0, m, 32, 1, 2, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k1"), NULL, 0, 1, 2, NOW), WID_RESULT_INVALID_ARGUMENT);

    /* wid_keyring_rotate */
    CHECK_RC(wid_keyring_rotate(NULL, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    /* out_key_id only reports: it may be NULL (on a keyring of its own). */
    {
        wid_keyring *kr_null_out = NULL;
        size_t promoted = SENTINEL_COUNT;
        CHECK_OK(wid_keyring_new(&kr_null_out));
        CHECK_OK(wid_keyring_rotate(kr_null_out, NOW, NULL));
        CHECK_OK(wid_keyring_prepublish(kr_null_out, NOW, NOW + 10, NULL));
        CHECK_OK(wid_keyring_promote_due(kr_null_out, NOW + 10, &promoted));
        CHECK(promoted == 1);
        wid_keyring_free(kr_null_out);
    }

    /* wid_keyring_prepublish */
    CHECK_RC(wid_keyring_prepublish(NULL, NOW, NOW + 10, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* wid_keyring_promote_due: out_count may be NULL. */
    CHECK_RC(wid_keyring_promote_due(NULL, NOW, &count), WID_RESULT_NULL_ARGUMENT);
    CHECK(count == SENTINEL_COUNT);
    CHECK_OK(wid_keyring_promote_due(kr, NOW, NULL));

    /* wid_keyring_deprecate */
    CHECK_RC(wid_keyring_deprecate(NULL, S("k1"), NOW), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_deprecate(kr, NULL, 2, NOW), WID_RESULT_NULL_ARGUMENT);

    /* wid_keyring_jwks */
    CHECK_RC(wid_keyring_jwks(NULL, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_keyring_jwks(kr, NULL), WID_RESULT_NULL_ARGUMENT);

    /* wid_keyring_import_jwks: out_imported may be NULL. */
    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK_RC(wid_keyring_import_jwks(NULL, (const char *)jwks.data, jwks.len, &count),
             WID_RESULT_NULL_ARGUMENT);
    CHECK(count == SENTINEL_COUNT);
    CHECK_RC(wid_keyring_import_jwks(kr, NULL, 5, &count), WID_RESULT_NULL_ARGUMENT);
    CHECK(count == SENTINEL_COUNT);
    /* Importing a keyring's own JWKS into it: nothing new, NULL count allowed. */
    CHECK_OK(wid_keyring_import_jwks(kr, (const char *)jwks.data, jwks.len, NULL));
    CHECK_OK(wid_keyring_import_jwks(kr, (const char *)jwks.data, jwks.len, &count));
    CHECK(count == 0);
    /* (NULL, 0): empty JSON, not a JWKS. */
    count = SENTINEL_COUNT;
    CHECK_RC(wid_keyring_import_jwks(kr, NULL, 0, &count), WID_RESULT_DECODE_ERROR);
    CHECK(count == SENTINEL_COUNT);

    /* wid_keyring_save / wid_keyring_load */
    CHECK_RC(wid_keyring_save(NULL, S("/tmp/x")), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_save(kr, NULL, 5), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_save(kr, NULL, 0), WID_RESULT_INVALID_ARGUMENT); /* empty path */
    CHECK_RC(wid_keyring_load(NULL, 5, &kr_out), WID_RESULT_NULL_ARGUMENT);
    CHECK(kr_out == SENTINEL_KR);
    CHECK_RC(wid_keyring_load(S("/tmp/x"), NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_load(NULL, 0, &kr_out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(kr_out == SENTINEL_KR);

    /* wid_issue */
    CHECK_RC(wid_issue(NULL, wid_sample_request, wid_sample_request_len, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_issue(kr, NULL, 10, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_issue(kr, NULL, 0, NOW, &out), WID_RESULT_DECODE_ERROR); /* empty msgpack */
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_issue(kr, wid_sample_request, wid_sample_request_len, NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);

    /* wid_issue_with_issuer: (NULL, 0) issuer means none. */
    CHECK_RC(wid_issue_with_issuer(NULL, wid_sample_request, wid_sample_request_len,
                                   S("https://nomad"), NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_with_issuer(kr, NULL, 10, S("https://nomad"), NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, NULL, 5,
                                   NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len,
                                   S("https://nomad"), NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    {
        wid_bytes t = {NULL, 0};
        CHECK_OK(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, NULL, 0,
                                       NOW, &t));
        CHECK(t.data != NULL && t.len > 0);
        wid_bytes_free(&t);
    }

    /* wid_verifier_new */
    CHECK_RC(wid_verifier_new(NULL, S(AUD), 60, lookup, &ctx, &v_out), WID_RESULT_NULL_ARGUMENT);
    CHECK(v_out == SENTINEL_V);
    CHECK_RC(wid_verifier_new(kr, NULL, 8, 60, lookup, &ctx, &v_out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new(kr, NULL, 0, 60, lookup, &ctx, &v_out),
             WID_RESULT_INVALID_ARGUMENT); /* empty audience */
    CHECK_RC(wid_verifier_new(kr, S(AUD), 60, NULL, &ctx, &v_out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new(kr, S(AUD), 60, lookup, &ctx, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new(kr, S(AUD), -1, lookup, &ctx, &v_out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(v_out == SENTINEL_V);
    /* userdata is passed through untouched: NULL is fine. */
    CHECK_OK(wid_verifier_new(kr, S(AUD), 0, lookup, NULL, &v));
    wid_verifier_free(v);
    v = NULL;

    /* wid_verifier_new_with_options: options may be NULL (defaults). */
    CHECK_RC(wid_verifier_new_with_options(NULL, S(AUD), &o, lookup, &ctx, &v_out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new_with_options(kr, NULL, 8, &o, lookup, &ctx, &v_out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, NULL, &ctx, &v_out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, NULL),
             WID_RESULT_NULL_ARGUMENT);
    o.issuer = NULL;
    o.issuer_len = 4;
    CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v_out),
             WID_RESULT_NULL_ARGUMENT);
    o.issuer_len = 0;
    o.key_wait_ms = -2;
    CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v_out),
             WID_RESULT_INVALID_ARGUMENT);
    o.key_wait_ms = -1;
    o.leeway_secs = -5;
    CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v_out),
             WID_RESULT_INVALID_ARGUMENT);
    o.leeway_secs = 0;
    CHECK(v_out == SENTINEL_V);
    CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), NULL, lookup, &ctx, &v));
    CHECK(v != NULL);

    /* wid_verify: out_claims_json may be NULL. */
    CHECK_RC(wid_verify(NULL, (const char *)token.data, token.len, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_verify(v, NULL, 5, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_verify(v, NULL, 0, NOW, &out), WID_RESULT_MALFORMED_TOKEN); /* empty token */
    CHECK(is_sentinel(&out));
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));

    /* wid_verify_batch: NULL arrays are fine only for count 0. */
    toks[0] = (const char *)token.data;
    lens[0] = token.len;
    res[0] = 999;
    CHECK_RC(wid_verify_batch(NULL, toks, lens, 1, NOW, res), WID_RESULT_NULL_ARGUMENT);
    CHECK(res[0] == 999);
    CHECK_RC(wid_verify_batch(v, NULL, lens, 1, NOW, res), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_batch(v, toks, NULL, 1, NOW, res), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_batch(v, toks, lens, 1, NOW, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(res[0] == 999);
    CHECK_OK(wid_verify_batch(v, NULL, NULL, 0, NOW, NULL));
    CHECK_RC(wid_verify_batch(NULL, NULL, NULL, 0, NOW, NULL), WID_RESULT_NULL_ARGUMENT);
    /* A NULL token inside the array is that token's NULL_ARGUMENT. */
    toks[0] = NULL;
    lens[0] = 5;
    CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW, res));
    CHECK_RC(res[0], WID_RESULT_NULL_ARGUMENT);
    lens[0] = 0;
    CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW, res));
    CHECK_RC(res[0], WID_RESULT_MALFORMED_TOKEN);

    CHECK(kr_out == SENTINEL_KR && v_out == SENTINEL_V);
    wid_bytes_free(&jwks);
    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

static void test_keyring_argument_checks(void) {
    wid_keyring *kr = NULL;
    wid_keyring *other = NULL;
    uint8_t m[64];
    wid_bytes out = sentinel_bytes();
    wid_bytes id = {NULL, 0};
    char long_id[130];

    memset(m, 7, sizeof m);
    memset(long_id, 'a', sizeof long_id);
    CHECK_OK(wid_keyring_new(&kr));

    /* Empty keyring: nothing can be issued, the JWKS is empty. */
    CHECK_RC(wid_issue(kr, wid_sample_request, wid_sample_request_len, NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK(is_sentinel(&out));
    CHECK_OK(wid_keyring_jwks(kr, &id));
    CHECK(bytes_eq(&id, "{\"keys\":[]}"));
    wid_bytes_free(&id);

    /* Material must be exactly 32 bytes. */
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 31, 1, 1, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 33, 1, 1, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 64, 1, 1, NOW), WID_RESULT_INVALID_ARGUMENT);
    /* Derivation and state must be known values. */
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 32, 0, 1, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 32, 3, 1, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 32, 1, 0, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("k"), m, 32, 1, 5, NOW), WID_RESULT_INVALID_ARGUMENT);
    /* Key IDs: UTF-8, 1 to 128 characters from a restricted set. */
    CHECK_RC(wid_keyring_insert(kr, S(BAD_UTF8), m, 32, 1, 1, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, S("has space"), m, 32, 1, 1, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(kr, long_id, 129, m, 32, 1, 1, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_keyring_insert(kr, long_id, 128, m, 32, 1, 2, NOW));
    /* Nothing above was inserted except the 128-character inactive key. */
    CHECK_RC(wid_issue(kr, wid_sample_request, wid_sample_request_len, NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);

    /* One active key; a duplicate ID; a second active key. */
    CHECK_OK(wid_keyring_insert(kr, S("first"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_ACTIVE, NOW));
    CHECK_RC(wid_keyring_insert(kr, S("first"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_INACTIVE, NOW),
             WID_RESULT_DUPLICATE_KEY);
    m[0] = 8;
    CHECK_RC(wid_keyring_insert(kr, S("second"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    /* Other states and the raw-seed derivation are accepted. */
    CHECK_OK(wid_keyring_insert(kr, S("second"), m, 32, WID_KEY_DERIVATION_NOMAD_RAW_SEED,
                                WID_KEY_STATE_INACTIVE, NOW));
    m[0] = 9;
    CHECK_OK(wid_keyring_insert(kr, S("third"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_PREPUBLISHED, NOW));
    m[0] = 10;
    CHECK_OK(wid_keyring_insert(kr, S("fourth"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                WID_KEY_STATE_DEPRECATED, NOW));
    CHECK_OK(wid_keyring_jwks(kr, &id));
    CHECK(bytes_contain(&id, "\"kid\":\"first\""));
    CHECK(bytes_contain(&id, "\"kid\":\"second\""));
    CHECK(bytes_contain(&id, "\"kid\":\"third\""));
    CHECK(!bytes_contain(&id, "\"kid\":\"fourth\"")); /* deprecated keys leave the JWKS */
    wid_bytes_free(&id);
    /* Now issuing works. */
    CHECK_OK(wid_issue(kr, wid_sample_request, wid_sample_request_len, NOW, &id));
    wid_bytes_free(&id);

    /* Deprecate: the active key cannot be, invalid UTF-8 and unknown IDs fail. */
    CHECK_RC(wid_keyring_deprecate(kr, S("first"), NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_deprecate(kr, S(BAD_UTF8), NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_deprecate(kr, S("no-such-key"), NOW), WID_RESULT_UNKNOWN_KEY);
    CHECK_OK(wid_keyring_deprecate(kr, S("second"), NOW));

    /* Prepublish in the past is refused, and the output is left alone. */
    out = sentinel_bytes();
    CHECK_RC(wid_keyring_prepublish(kr, NOW, NOW - 1, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* Import: invalid UTF-8, not JSON, a conflicting key under a known kid. */
    {
        size_t count = SENTINEL_COUNT;
        wid_bytes jwks = {NULL, 0};
        CHECK_RC(wid_keyring_import_jwks(kr, S(BAD_UTF8), &count), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_import_jwks(kr, S("not json"), &count), WID_RESULT_DECODE_ERROR);
        CHECK(count == SENTINEL_COUNT);
        /* A different keyring whose key is also called "first". */
        other = keyring_with_key("first", 200);
        CHECK_OK(wid_keyring_jwks(other, &jwks));
        CHECK_RC(wid_keyring_import_jwks(kr, (const char *)jwks.data, jwks.len, &count),
                 WID_RESULT_DUPLICATE_KEY);
        CHECK(count == SENTINEL_COUNT);
        wid_bytes_free(&jwks);
        wid_keyring_free(other);
    }

    /* A misbehaving caller's output from before is not touched by failures. */
    CHECK(out.data == SENTINEL_PTR);
    wid_keyring_free(kr);
}

static void test_huge_lengths(void) {
    /* The library checks each length against its cap before reading, so a
     * wrong, huge length with a small valid buffer must fail cleanly. */
    static const size_t huge[] = {
        SIZE_MAX,
        SIZE_MAX / 2,
#if SIZE_MAX > 0xFFFFFFFFu
        (size_t)1 << 40,
#endif
        (size_t)1 << 30,
    };
    wid_keyring *kr = keyring_with_key("huge", 1);
    wid_keyring *kr_out = SENTINEL_KR;
    wid_verifier *v_out = SENTINEL_V;
    wid_verifier *v;
    struct lookup_ctx ctx;
    wid_bytes token = issue(kr, NOW);
    wid_bytes out = sentinel_bytes();
    wid_verifier_options o;
    uint8_t m[32];
    size_t count = SENTINEL_COUNT;
    size_t i;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    fill_material(m, 50);
    for (i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = huge[i];
        const char *toks[1];
        size_t lens[1];
        wid_result res[1];

        CHECK_RC(wid_keyring_insert(kr, "kid", n, m, 32, 1, 2, NOW), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_insert(kr, S("kid"), m, n, 1, 2, NOW), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_deprecate(kr, "kid", n, NOW), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_import_jwks(kr, "{}", n, &count), WID_RESULT_INVALID_ARGUMENT);
        CHECK(count == SENTINEL_COUNT);
        CHECK_RC(wid_keyring_save(kr, "/tmp/x", n), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_load("/tmp/x", n, &kr_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(kr_out == SENTINEL_KR);
        CHECK_RC(wid_issue(kr, wid_sample_request, n, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, "iss", n,
                                       NOW, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        CHECK_RC(wid_verifier_new(kr, AUD, n, 60, lookup, &ctx, &v_out),
                 WID_RESULT_INVALID_ARGUMENT);
        memset(&o, 0, sizeof o);
        o.issuer = "iss";
        o.issuer_len = n;
        CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v_out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(v_out == SENTINEL_V);
        /* Tokens: too long to be a token at all. */
        CHECK_RC(wid_verify(v, (const char *)token.data, n, NOW, &out),
                 WID_RESULT_MALFORMED_TOKEN);
        CHECK(is_sentinel(&out));
        toks[0] = (const char *)token.data;
        lens[0] = n;
        CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW, res));
        CHECK_RC(res[0], WID_RESULT_MALFORMED_TOKEN);
        /* A huge count is refused before the arrays are read. */
        CHECK_RC(wid_verify_batch(v, toks, lens, n, NOW, res), WID_RESULT_INVALID_ARGUMENT);
    }
    /* Above the batch limit (65536 tokens) by one. */
    {
        const char *toks[1] = {(const char *)token.data};
        size_t lens[1] = {token.len};
        wid_result res[1];
        CHECK_RC(wid_verify_batch(v, toks, lens, ((size_t)1 << 16) + 1, NOW, res),
                 WID_RESULT_INVALID_ARGUMENT);
    }
    /* A token longer than max_token_bytes (8192) but under the 1 MiB input cap,
     * in a buffer that really is that long: rejected by length. */
    {
        size_t n = 9000;
        char *big = malloc(n);
        if (big == NULL) abort();
        memset(big, 'A', n);
        memcpy(big, token.data, token.len);
        CHECK_RC(wid_verify(v, big, n, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
        free(big);
    }
    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* Returns a malloc'd copy of the sample request with Service set to "web"
 * (the sample has Task "server" and Service ""): valid msgpack, but a request
 * naming both a task and a service is invalid. */
static uint8_t *request_with_task_and_service(size_t *len_out) {
    static const uint8_t pattern[] = {0xa7, 'S', 'e', 'r', 'v', 'i', 'c', 'e', 0xa0};
    static const uint8_t replacement[] = {0xa7, 'S', 'e', 'r', 'v', 'i', 'c', 'e',
                                          0xa3, 'w',  'e', 'b'};
    size_t i, at = (size_t)-1;
    uint8_t *out;
    for (i = 0; i + sizeof pattern <= wid_sample_request_len; i++) {
        if (memcmp(wid_sample_request + i, pattern, sizeof pattern) == 0) {
            at = i;
            break;
        }
    }
    if (at == (size_t)-1) return NULL;
    *len_out = wid_sample_request_len - sizeof pattern + sizeof replacement;
    out = malloc(*len_out);
    if (out == NULL) abort();
    memcpy(out, wid_sample_request, at);
    memcpy(out + at, replacement, sizeof replacement);
    memcpy(out + at + sizeof replacement, wid_sample_request + at + sizeof pattern,
           wid_sample_request_len - at - sizeof pattern);
    return out;
}

static void test_issue_decoding(void) {
    wid_keyring *kr = keyring_with_key("decode", 2);
    wid_bytes out = sentinel_bytes();
    size_t n, bad = 0;
    uint8_t garbage[64];
    uint8_t *both;
    size_t both_len = 0;

    /* Every strict prefix of the request fails to decode (and never succeeds
     * or crashes). Each prefix is copied into an exact-size heap buffer so a
     * read past its end is visible to valgrind. */
    for (n = 0; n < wid_sample_request_len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        wid_result rc;
        if (p == NULL) abort();
        memcpy(p, wid_sample_request, n);
        rc = wid_issue(kr, n ? p : NULL, n, NOW, &out);
        if (rc != WID_RESULT_DECODE_ERROR || !is_sentinel(&out)) {
            if (bad++ < 5)
                fprintf(stderr, "  prefix %zu/%zu: %s: %s\n", n, wid_sample_request_len,
                        wid_result_name(rc), last_error());
        }
        free(p);
    }
    g_checks++;
    if (bad != 0) {
        g_failed++;
        fprintf(stderr, "%s:%d: FAIL %zu of %zu request prefixes did not give DECODE_ERROR\n",
                __FILE__, __LINE__, bad, wid_sample_request_len);
    }

    /* Garbage. */
    memset(garbage, 0xc1, sizeof garbage); /* 0xc1 is never used in msgpack */
    CHECK_RC(wid_issue(kr, garbage, sizeof garbage, NOW, &out), WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issue(kr, (const uint8_t *)"hello world", 11, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    /* A single msgpack nil / an empty map: not an IssueRequest. */
    CHECK_RC(wid_issue(kr, (const uint8_t *)"\xc0", 1, NOW, &out), WID_RESULT_DECODE_ERROR);
    CHECK(is_sentinel(&out));
    /* Trailing bytes after a complete request. */
    {
        uint8_t *p = malloc(wid_sample_request_len + 1);
        if (p == NULL) abort();
        memcpy(p, wid_sample_request, wid_sample_request_len);
        p[wid_sample_request_len] = 0xc0;
        CHECK_RC(wid_issue(kr, p, wid_sample_request_len + 1, NOW, &out),
                 WID_RESULT_DECODE_ERROR);
        free(p);
    }

    /* Well-formed msgpack, invalid request: both Task and Service. */
    both = request_with_task_and_service(&both_len);
    CHECK(both != NULL);
    if (both != NULL) {
        CHECK_RC(wid_issue(kr, both, both_len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        free(both);
    }

    /* The issuer must be UTF-8. */
    CHECK_RC(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, S(BAD_UTF8),
                                   NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    wid_keyring_free(kr);
}

/* The C encoder in wid_request.h produces a request the library reads as the
 * Go sample: the same claims come out. And a TTL written as seconds (3600,
 * i.e. 3.6 us) is refused instead of issuing a token without exp. */
static void test_request_encoder_and_ttl(void) {
    wid_keyring *kr = keyring_with_key("encoder", 3);
    const char *aud[] = {"vault.io", "consul.io"};
    wid_request_fields f;
    uint8_t buf[1024];
    uint8_t tiny[16];
    size_t n;
    wid_bytes from_c = {NULL, 0}, from_go = {NULL, 0}, out = sentinel_bytes();

    memset(&f, 0, sizeof f);
    f.region = "global";
    f.alloc_id = ALLOC_ID;
    f.alloc_namespace = "default";
    f.job_id = "web/dispatch-1700000000-abcd1234";
    f.parent_job_id = "web";
    f.task_group = "frontend";
    f.task = "server";
    f.identity_name = "vault_default";
    f.audience = aud;
    f.audience_count = 2;
    f.ttl_ns = WID_TTL_SECONDS(3600);
    n = wid_encode_issue_request(&f, buf, sizeof buf);
    CHECK(n > 0);
    CHECK(wid_encode_issue_request(&f, tiny, sizeof tiny) == 0);
    CHECK_OK(wid_issue(kr, buf, n, NOW, &from_c));
    CHECK_OK(wid_issue(kr, wid_sample_request, wid_sample_request_len, NOW, &from_go));
    /* Same header and the same claims but the random jti: compare the
       decoded-by-the-library claims instead of the bytes. */
    {
        wid_verifier *v = NULL;
        struct lookup_ctx ctx;
        wid_bytes c1 = {NULL, 0}, c2 = {NULL, 0};
        const char *keys[] = {"\"sub\":\"global:default:web:frontend:server:vault_default\"",
                              "\"nomad_job_id\":\"web\"", "\"aud\":[\"vault.io\",\"consul.io\"]",
                              "\"exp\":1700003600"};
        size_t i;
        ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
        v = verifier_for(kr, &ctx);
        CHECK_OK(wid_verify(v, (const char *)from_c.data, from_c.len, NOW, &c1));
        CHECK_OK(wid_verify(v, (const char *)from_go.data, from_go.len, NOW, &c2));
        for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            CHECK(c1.data != NULL && strstr((const char *)c1.data, keys[i]) != NULL);
            CHECK(c2.data != NULL && strstr((const char *)c2.data, keys[i]) != NULL);
        }
        wid_bytes_free(&c1);
        wid_bytes_free(&c2);
        wid_verifier_free(v);
    }

    /* Seconds where nanoseconds belong: refused, naming the unit. */
    f.ttl_ns = 3600;
    n = wid_encode_issue_request(&f, buf, sizeof buf);
    CHECK_RC(wid_issue(kr, buf, n, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK(strstr(last_error(), "nanoseconds") != NULL);
    /* TTL 0: a token without exp. */
    f.ttl_ns = 0;
    n = wid_encode_issue_request(&f, buf, sizeof buf);
    CHECK_OK(wid_issue(kr, buf, n, NOW, &out));
    wid_bytes_free(&out);

    /* The Vault and Consul blocks (Nomad 2.x's claims for the logins): the
       vault_default identity carries vault_namespace and vault_role, in
       Nomad's order after nomad_task; not consul_namespace (no consul*
       name). */
    f.ttl_ns = WID_TTL_SECONDS(3600);
    f.vault_role = "nomad-web";
    f.vault_namespace = "engineering/web";
    f.consul_namespace = "web-team";
    n = wid_encode_issue_request(&f, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_OK(wid_issue(kr, buf, n, NOW, &out));
    {
        wid_verifier *v = NULL;
        struct lookup_ctx ctx;
        wid_bytes c = {NULL, 0};
        ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
        v = verifier_for(kr, &ctx);
        CHECK_OK(wid_verify(v, (const char *)out.data, out.len, NOW, &c));
        CHECK(c.data != NULL &&
              strstr((const char *)c.data,
                     "\"nomad_task\":\"server\",\"vault_namespace\":\"engineering/web\","
                     "\"vault_role\":\"nomad-web\",\"sub\"") != NULL);
        CHECK(c.data != NULL && strstr((const char *)c.data, "consul_namespace") == NULL);
        wid_bytes_free(&c);
        wid_verifier_free(v);
    }
    wid_bytes_free(&out);

    wid_bytes_free(&from_c);
    wid_bytes_free(&from_go);
    wid_keyring_free(kr);
}

static void test_verify_flows(void) {
    wid_keyring *kr = keyring_with_key("flows", 3);
    wid_keyring *foreign_kr = keyring_with_key("foreign", 4);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_verifier *v_other_aud = NULL;
    wid_verifier *v_exact = NULL;
    wid_bytes token = issue(kr, NOW);
    wid_bytes foreign = issue(foreign_kr, NOW);
    wid_bytes claims = sentinel_bytes();
    char *tampered = tampered_copy(&token);
    const char *tok = (const char *)token.data;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);

    /* A valid token. */
    CHECK_OK(wid_verify(v, tok, token.len, NOW, &claims));
    CHECK(claims.data != NULL && claims.data[claims.len] == '\0');
    CHECK(bytes_contain(&claims, "\"nomad_allocation_id\":\"" ALLOC_ID "\""));
    CHECK(bytes_contain(&claims, "\"aud\":[\"vault.io\",\"consul.io\"]"));
    CHECK(!bytes_contain(&claims, "\"iss\""));
    CHECK(ctx.nseen == 1 && ctx.seen[0] == WID_CONSISTENCY_STALE);
    CHECK(!ctx.wrong_id);
    wid_bytes_free(&claims);
    CHECK(wid_last_error_message(NULL, 0) == 0);

    /* Outputs are written only on success. */
    claims = sentinel_bytes();
    CHECK_RC(wid_verify(v, tok, token.len, NOW + TTL + 61, &claims), WID_RESULT_EXPIRED);
    CHECK(is_sentinel(&claims));

    /* Time: just inside and just outside the 60 s leeway. */
    CHECK_OK(wid_verify(v, tok, token.len, NOW + TTL + 59, NULL));
    CHECK_RC(wid_verify(v, tok, token.len, NOW + TTL + 60, NULL), WID_RESULT_EXPIRED);
    CHECK_RC(wid_verify(v, tok, token.len, NOW - 61, NULL), WID_RESULT_NOT_YET_VALID);
    CHECK_OK(wid_verify(v, tok, token.len, NOW - 60, NULL));

    /* wid_verifier_new's leeway is exact: 0 means none. */
    CHECK_OK(wid_verifier_new(kr, S(AUD), 0, lookup, &ctx, &v_exact));
    CHECK_OK(wid_verify(v_exact, tok, token.len, NOW + TTL - 1, NULL));
    CHECK_RC(wid_verify(v_exact, tok, token.len, NOW + TTL, NULL), WID_RESULT_EXPIRED);
    CHECK_RC(wid_verify(v_exact, tok, token.len, NOW - 1, NULL), WID_RESULT_NOT_YET_VALID);
    wid_verifier_free(v_exact);
    /* In the options struct 0 is the 60 s default and -1 means none. */
    {
        wid_verifier_options none_o;
        wid_verifier *v_none = NULL;
        memset(&none_o, 0, sizeof none_o);
        none_o.leeway_secs = -1;
        CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &none_o, lookup, &ctx, &v_none));
        CHECK_OK(wid_verify(v_none, tok, token.len, NOW + TTL - 1, NULL));
        CHECK_RC(wid_verify(v_none, tok, token.len, NOW + TTL, NULL), WID_RESULT_EXPIRED);
        CHECK_RC(wid_verify(v_none, tok, token.len, NOW - 1, NULL), WID_RESULT_NOT_YET_VALID);
        wid_verifier_free(v_none);
    }

    /* Audience: consul.io is in the token, nomad.io is not; UTF-8 required. */
    CHECK_RC(wid_verifier_new(kr, S(BAD_UTF8), 60, lookup, &ctx, &v_other_aud),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_verifier_new(kr, S("consul.io"), 60, lookup, &ctx, &v_other_aud));
    CHECK_OK(wid_verify(v_other_aud, tok, token.len, NOW, NULL));
    wid_verifier_free(v_other_aud);
    v_other_aud = NULL;
    CHECK_OK(wid_verifier_new(kr, S("nomad.io"), 60, lookup, &ctx, &v_other_aud));
    CHECK_RC(wid_verify(v_other_aud, tok, token.len, NOW, NULL), WID_RESULT_AUDIENCE_MISMATCH);
    wid_verifier_free(v_other_aud);

    /* Tampered payload. */
    CHECK_RC2(wid_verify(v, tampered, token.len, NOW, NULL), WID_RESULT_BAD_SIGNATURE,
              WID_RESULT_MALFORMED_TOKEN);
    /* Truncated token, garbage, invalid UTF-8. */
    CHECK_RC(wid_verify(v, tok, token.len - 1, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(wid_verify(v, S("a.b.c"), NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(wid_verify(v, S("not a token"), NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(wid_verify(v, S(BAD_UTF8), NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    {
        /* The valid token with one byte replaced by an invalid UTF-8 byte. */
        char *bad = malloc(token.len);
        if (bad == NULL) abort();
        memcpy(bad, tok, token.len);
        bad[token.len / 2] = (char)0xff;
        CHECK_RC(wid_verify(v, bad, token.len, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
        free(bad);
    }

    /* A key this keyring does not know (no wait: key_wait_ms = -1). */
    CHECK_RC(wid_verify(v, (const char *)foreign.data, foreign.len, NOW, NULL),
             WID_RESULT_UNKNOWN_KEY);

    /* Allocation states. */
    ctx_init(&ctx, WID_ALLOC_TERMINAL, WID_ALLOC_LIVE);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_ALLOCATION_TERMINAL);
    CHECK(ctx.nseen == 1 && ctx.seen[0] == WID_CONSISTENCY_STALE);

    ctx_init(&ctx, WID_ALLOC_MISSING, WID_ALLOC_MISSING);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_ALLOCATION_NOT_FOUND);
    CHECK(ctx.nseen == 2);

    /* Replica lag: missing on the stale read, live on the consistent one. */
    ctx_init(&ctx, WID_ALLOC_MISSING, WID_ALLOC_LIVE);
    CHECK_OK(wid_verify(v, tok, token.len, NOW, NULL));
    CHECK(ctx.nseen == 2);
    CHECK(ctx.seen[0] == WID_CONSISTENCY_STALE);
    CHECK(ctx.seen[1] == WID_CONSISTENCY_CONSISTENT);

    /* Stale missing, consistent terminal. */
    ctx_init(&ctx, WID_ALLOC_MISSING, WID_ALLOC_TERMINAL);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_ALLOCATION_TERMINAL);

    /* The table knows another allocation only. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    ctx.alloc_id = "00000000-0000-0000-0000-000000000000";
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_ALLOCATION_NOT_FOUND);

    /* The store fails: closed. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    ctx.rc = WID_RESULT_IO_ERROR;
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);
    CHECK(strstr(last_error(), "WID_RESULT_IO_ERROR") != NULL);
    ctx.rc = 12345; /* not even a known code */
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);
    /* The consistent read fails after a stale "missing". */
    ctx_init(&ctx, WID_ALLOC_MISSING, 7);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);
    /* An out-of-range state. */
    ctx_init(&ctx, 7, WID_ALLOC_LIVE);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);
    ctx_init(&ctx, UINT32_MAX, WID_ALLOC_LIVE);
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);
    /* OK without writing the state. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    ctx.write_state = 0;
    CHECK_RC(wid_verify(v, tok, token.len, NOW, NULL), WID_RESULT_STORE_UNAVAILABLE);

    /* Back to normal: the verifier keeps no bad state. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    CHECK_OK(wid_verify(v, tok, token.len, NOW, NULL));

    /* A verifier with a cache: hits still consult the allocation. */
    {
        wid_verifier *vc = NULL;
        wid_verifier_options o;
        memset(&o, 0, sizeof o);
        o.key_wait_ms = -1;
        o.cache_entries = 16;
        CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &vc));
        CHECK_OK(wid_verify(vc, tok, token.len, NOW, NULL));
        CHECK_OK(wid_verify(vc, tok, token.len, NOW, NULL));
        ctx_init(&ctx, WID_ALLOC_TERMINAL, WID_ALLOC_TERMINAL);
        CHECK_RC(wid_verify(vc, tok, token.len, NOW, NULL), WID_RESULT_ALLOCATION_TERMINAL);
        ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
        CHECK_RC(wid_verify(vc, tok, token.len, NOW + TTL + 61, NULL), WID_RESULT_EXPIRED);
        wid_verifier_free(vc);
    }

    /* max_token_bytes and require_exp options. */
    {
        wid_verifier *vm = NULL;
        wid_verifier_options o;
        memset(&o, 0, sizeof o);
        o.key_wait_ms = -1;
        o.max_token_bytes = token.len - 1;
        o.require_exp = 1;
        CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &vm));
        CHECK_RC(wid_verify(vm, tok, token.len, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
        wid_verifier_free(vm);
        vm = NULL;
        o.max_token_bytes = token.len;
        CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &vm));
        CHECK_OK(wid_verify(vm, tok, token.len, NOW, NULL));
        wid_verifier_free(vm);
    }

    free(tampered);
    wid_bytes_free(&foreign);
    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(foreign_kr);
    wid_keyring_free(kr);
}

static void test_rotation_seen_by_verifier(void) {
    wid_keyring *kr = keyring_with_key("rot-0", 5);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_bytes old_token = issue(kr, NOW);
    wid_bytes new_id = sentinel_bytes();
    wid_bytes new_token;
    wid_bytes pre_id = {NULL, 0};
    wid_bytes jwks = {NULL, 0};
    wid_bytes pre_token;
    size_t count = SENTINEL_COUNT;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    CHECK_OK(wid_verify(v, (const char *)old_token.data, old_token.len, NOW, NULL));

    /* Rotate after the verifier was made: it sees the new key. */
    CHECK_OK(wid_keyring_rotate(kr, NOW + 10, &new_id));
    CHECK(!is_sentinel(&new_id) && new_id.len == 36); /* a UUID */
    CHECK(new_id.data[new_id.len] == '\0');
    new_token = issue(kr, NOW + 10);
    CHECK_OK(wid_verify(v, (const char *)new_token.data, new_token.len, NOW + 10, NULL));
    /* The old token's key is inactive: it still verifies. */
    CHECK_OK(wid_verify(v, (const char *)old_token.data, old_token.len, NOW + 10, NULL));

    /* A key inserted after the verifier was made is seen too. */
    {
        wid_keyring *k2 = keyring_with_key("late-key", 6);
        wid_bytes t2 = issue(k2, NOW);
        uint8_t m[32];
        CHECK_RC(wid_verify(v, (const char *)t2.data, t2.len, NOW, NULL), WID_RESULT_UNKNOWN_KEY);
        fill_material(m, 6);
        CHECK_OK(wid_keyring_insert(kr, S("late-key"), m, 32, WID_KEY_DERIVATION_HKDF_V1,
                                    WID_KEY_STATE_INACTIVE, NOW));
        CHECK_OK(wid_verify(v, (const char *)t2.data, t2.len, NOW, NULL));
        wid_bytes_free(&t2);
        wid_keyring_free(k2);
    }

    /* Prepublish: in the JWKS at once, active only when due. */
    CHECK_OK(wid_keyring_prepublish(kr, NOW + 20, NOW + 100, &pre_id));
    CHECK(pre_id.data != NULL && pre_id.len > 0);
    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK(bytes_contain(&jwks, (const char *)pre_id.data));
    wid_bytes_free(&jwks);
    CHECK_OK(wid_keyring_promote_due(kr, NOW + 99, &count));
    CHECK(count == 0);
    count = SENTINEL_COUNT;
    CHECK_OK(wid_keyring_promote_due(kr, NOW + 100, &count));
    CHECK(count == 1);
    CHECK_OK(wid_keyring_promote_due(kr, NOW + 101, &count));
    CHECK(count == 0);
    pre_token = issue(kr, NOW + 100);
    CHECK_OK(wid_verify(v, (const char *)pre_token.data, pre_token.len, NOW + 100, NULL));
    /* The newly active key cannot be deprecated; the previous ones can. */
    CHECK_RC(wid_keyring_deprecate(kr, (const char *)pre_id.data, pre_id.len, NOW + 100),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_keyring_deprecate(kr, S("rot-0"), NOW + 100));
    CHECK_RC(wid_verify(v, (const char *)old_token.data, old_token.len, NOW + 100, NULL),
             WID_RESULT_UNKNOWN_KEY);
    /* Deprecated keys leave the JWKS. */
    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK(!bytes_contain(&jwks, "\"kid\":\"rot-0\""));
    CHECK(bytes_contain(&jwks, (const char *)new_id.data));
    wid_bytes_free(&jwks);
    /* Deprecating is idempotent. */
    CHECK_OK(wid_keyring_deprecate(kr, S("rot-0"), NOW + 101));
    CHECK_OK(wid_verify(v, (const char *)new_token.data, new_token.len, NOW + 100, NULL));

    wid_bytes_free(&pre_token);
    wid_bytes_free(&pre_id);
    wid_bytes_free(&new_token);
    wid_bytes_free(&new_id);
    wid_bytes_free(&old_token);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

static void test_jwks_import(void) {
    wid_keyring *kr = keyring_with_key("jwks-a", 7);
    wid_keyring *imported = NULL;
    wid_verifier *v;
    struct lookup_ctx ctx;
    wid_bytes jwks = {NULL, 0};
    wid_bytes id = {NULL, 0};
    wid_bytes token;
    wid_bytes out = sentinel_bytes();
    size_t count = SENTINEL_COUNT;

    CHECK_OK(wid_keyring_rotate(kr, NOW, &id)); /* two verifying keys */
    token = issue(kr, NOW);
    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK(jwks.data != NULL && jwks.data[jwks.len] == '\0');
    CHECK(bytes_contain(&jwks, "\"kty\":\"OKP\""));
    CHECK(bytes_contain(&jwks, "\"crv\":\"Ed25519\""));
    CHECK(bytes_contain(&jwks, "\"kid\":\"jwks-a\""));
    CHECK(!bytes_contain(&jwks, "\"d\"")); /* never the private part */

    CHECK_OK(wid_keyring_new(&imported));
    CHECK_OK(wid_keyring_import_jwks(imported, (const char *)jwks.data, jwks.len, &count));
    CHECK(count == 2);
    /* Again: nothing new. */
    CHECK_OK(wid_keyring_import_jwks(imported, (const char *)jwks.data, jwks.len, &count));
    CHECK(count == 0);
    /* Keys of an unknown type (a symmetric key) are skipped, not an error. */
    count = SENTINEL_COUNT;
    CHECK_OK(wid_keyring_import_jwks(imported, S("{\"keys\":[{\"kty\":\"oct\",\"kid\":\"r\"}]}"),
                                     &count));
    CHECK(count == 0);
    /* An RSA key without its exponent refuses the whole set. */
    count = SENTINEL_COUNT;
    CHECK_RC(wid_keyring_import_jwks(imported, S("{\"keys\":[{\"kty\":\"RSA\",\"kid\":\"r\"}]}"),
                                     &count),
             WID_RESULT_DECODE_ERROR);
    CHECK(count == SENTINEL_COUNT);

    /* Verify-only keys: the imported keyring verifies but cannot sign. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(imported, &ctx);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
    CHECK_RC(wid_issue(imported, wid_sample_request, wid_sample_request_len, NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK(is_sentinel(&out));

    wid_bytes_free(&token);
    wid_bytes_free(&id);
    wid_bytes_free(&jwks);
    wid_verifier_free(v);
    wid_keyring_free(imported);
    wid_keyring_free(kr);
}

static void test_save_load(void) {
    char dir[] = "/tmp/wid-c-test-XXXXXX";
    char path[256], missing[256], garbage[256], nodir[256];
    wid_keyring *kr = keyring_with_key("persist", 8);
    wid_keyring *loaded = SENTINEL_KR;
    wid_verifier *v;
    struct lookup_ctx ctx;
    wid_bytes token = issue(kr, NOW);
    wid_bytes token2;
    FILE *f;

    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        g_checks++;
        g_failed++;
        wid_bytes_free(&token);
        wid_keyring_free(kr);
        return;
    }
    snprintf(path, sizeof path, "%s/keyring.bin", dir);
    snprintf(missing, sizeof missing, "%s/missing.bin", dir);
    snprintf(garbage, sizeof garbage, "%s/garbage.bin", dir);
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/keyring.bin", dir);

    CHECK_OK(wid_keyring_save(kr, S(path)));
    CHECK_OK(wid_keyring_save(kr, S(path))); /* replacing works */
    CHECK_OK(wid_keyring_load(S(path), &loaded));
    CHECK(loaded != SENTINEL_KR && loaded != NULL);
    if (loaded == SENTINEL_KR) loaded = NULL;

    /* The loaded keyring verifies the original's token, and can sign. */
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(loaded, &ctx);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
    token2 = issue(loaded, NOW);
    CHECK_OK(wid_verify(v, (const char *)token2.data, token2.len, NOW, NULL));

    /* Errors. */
    {
        wid_keyring *out = SENTINEL_KR;
        CHECK_RC(wid_keyring_load(S(missing), &out), WID_RESULT_IO_ERROR);
        CHECK(out == SENTINEL_KR);
        f = fopen(garbage, "wb");
        CHECK(f != NULL);
        if (f != NULL) {
            fputs("this is not a workload-identity keystore\n", f);
            fclose(f);
        }
        /* A keystore others can read is refused before it is read, naming
           its mode; at 0600 the same file is read and found not a keystore. */
        CHECK(chmod(garbage, 0644) == 0);
        CHECK_RC(wid_keyring_load(S(garbage), &out), WID_RESULT_IO_ERROR);
        CHECK(strstr(last_error(), "mode 0644") != NULL);
        CHECK(chmod(garbage, 0600) == 0);
        CHECK_RC(wid_keyring_load(S(garbage), &out), WID_RESULT_DECODE_ERROR);
        CHECK(out == SENTINEL_KR);
        /* An empty file. */
        f = fopen(garbage, "wb");
        if (f != NULL) fclose(f);
        CHECK_RC(wid_keyring_load(S(garbage), &out), WID_RESULT_DECODE_ERROR);
        CHECK_RC(wid_keyring_load(S(BAD_UTF8), &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(out == SENTINEL_KR);
        /* A path with a NUL byte inside its length. */
        CHECK_RC(wid_keyring_load("/tmp\0x", 6, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(out == SENTINEL_KR);
        CHECK_RC(wid_keyring_save(kr, S(BAD_UTF8)), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_save(kr, "/tmp\0x", 6), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_save(kr, S(nodir)), WID_RESULT_IO_ERROR);
    }

    /* Clean up; rmdir succeeding shows the save left no temporary files. */
    CHECK(unlink(path) == 0);
    CHECK(unlink(garbage) == 0);
    CHECK(rmdir(dir) == 0);

    wid_bytes_free(&token2);
    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(loaded);
    wid_keyring_free(kr);
}

/* Wrapped keystores: a KEK file wraps every key (keystore version 3); the
 * keystore loads only with that KEK; rewrap moves it between KEKs and to
 * plaintext; failures leave outputs and files alone. */
static void test_wrapped_keystores(void) {
    char dir[] = "/tmp/wid-c-wrap-XXXXXX";
    char path[256], kek_a[256], kek_b[256], open_kek[256];
    unsigned char bytes[32];
    wid_keyring *kr = keyring_with_key("wrapped", 12);
    wid_keyring *loaded = SENTINEL_KR;
    wid_key_wrapper *a = NULL, *b = NULL;
    wid_key_wrapper *w_out = (wid_key_wrapper *)(uintptr_t)0x20;
    size_t keys = 0;
    FILE *f;

    if (mkdtemp(dir) == NULL) {
        g_checks++;
        g_failed++;
        wid_keyring_free(kr);
        return;
    }
    snprintf(path, sizeof path, "%s/keystore", dir);
    snprintf(kek_a, sizeof kek_a, "%s/kek-a", dir);
    snprintf(kek_b, sizeof kek_b, "%s/kek-b", dir);
    snprintf(open_kek, sizeof open_kek, "%s/kek-open", dir);
    for (int i = 0; i < 3; i++) {
        const char *p = i == 0 ? kek_a : i == 1 ? kek_b : open_kek;
        memset(bytes, 0x30 + i, sizeof bytes);
        f = fopen(p, "wb");
        CHECK(f != NULL);
        if (f != NULL) {
            CHECK(fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes);
            fclose(f);
        }
        CHECK(chmod(p, i == 2 ? 0644 : 0600) == 0);
    }

    CHECK_OK(wid_key_wrapper_kek_file(S(kek_a), &a));
    CHECK_OK(wid_key_wrapper_kek_file(S(kek_b), &b));
    CHECK_RC(wid_key_wrapper_kek_file(S(open_kek), &w_out), WID_RESULT_IO_ERROR);
    CHECK(strstr(last_error(), "mode 0644") != NULL);
    CHECK(w_out == (wid_key_wrapper *)(uintptr_t)0x20);
    CHECK_RC(wid_key_wrapper_kek_file(NULL, 4, &w_out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_key_wrapper_kek_file(S(kek_a), NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_key_wrapper_kek_file(S(BAD_UTF8), &w_out), WID_RESULT_INVALID_ARGUMENT);

    CHECK_OK(wid_keyring_save_wrapped(kr, S(path), a));
    CHECK_OK(wid_keyring_load_wrapped(S(path), a, &loaded));
    CHECK(loaded != SENTINEL_KR && loaded != NULL);
    if (loaded == SENTINEL_KR) loaded = NULL;
    wid_keyring_free(loaded);
    loaded = SENTINEL_KR;
    CHECK_RC(wid_keyring_load_wrapped(S(path), b, &loaded), WID_RESULT_KEY_CUSTODY_FAILED);
    CHECK(strstr(last_error(), "not by the given KEK") != NULL);
    CHECK_RC(wid_keyring_load(S(path), &loaded), WID_RESULT_KEY_CUSTODY_FAILED);
    CHECK(strstr(last_error(), "no KEK was given") != NULL);
    CHECK(loaded == SENTINEL_KR);
    CHECK(strcmp(wid_result_name(WID_RESULT_KEY_CUSTODY_FAILED), "WID_RESULT_KEY_CUSTODY_FAILED") == 0);

    CHECK_OK(wid_keystore_rewrap(S(path), a, b, &keys));
    CHECK(keys == 1);
    CHECK_OK(wid_keystore_rewrap(S(path), b, NULL, NULL));
    CHECK_OK(wid_keyring_load(S(path), &loaded));
    if (loaded == SENTINEL_KR) loaded = NULL;
    wid_keyring_free(loaded);
    loaded = SENTINEL_KR;
    CHECK_OK(wid_keystore_rewrap(S(path), NULL, a, NULL));
    CHECK_RC(wid_keystore_rewrap(S(path), b, NULL, NULL), WID_RESULT_KEY_CUSTODY_FAILED);
    CHECK_OK(wid_keyring_load_wrapped(S(path), a, &loaded));
    if (loaded == SENTINEL_KR) loaded = NULL;
    wid_keyring_free(loaded);

    /* NULLs and wrong handle types. */
    loaded = SENTINEL_KR;
    CHECK_RC(wid_keyring_save_wrapped(NULL, S(path), a), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_save_wrapped(kr, S(path), NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_save_wrapped(kr, NULL, 4, a), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_load_wrapped(S(path), NULL, &loaded), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_load_wrapped(S(path), a, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_save_wrapped(kr, S(path), (const wid_key_wrapper *)kr),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_save_wrapped((const wid_keyring *)a, S(path), a),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keystore_rewrap(NULL, 3, a, b, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(loaded == SENTINEL_KR);

    /* Transit: this library is built without it (its default), and says so;
     * a build with `--features transit` reaches the server instead. */
    CHECK_RC2(wid_key_wrapper_transit(S("https://127.0.0.1:1"), NULL, 0, S("kek"), S("t"), NULL,
                                      0, &w_out),
              WID_RESULT_INVALID_ARGUMENT, WID_RESULT_KEY_CUSTODY_FAILED);
    CHECK(w_out == (wid_key_wrapper *)(uintptr_t)0x20);
    CHECK_RC(wid_key_wrapper_transit(S("https://127.0.0.1:1"), NULL, 0, S("kek"), S("t"), NULL,
                                     0, NULL),
             WID_RESULT_NULL_ARGUMENT);

    wid_key_wrapper_free(a);
    wid_key_wrapper_free(b);
    wid_key_wrapper_free(NULL);
    CHECK(unlink(path) == 0);
    CHECK(unlink(kek_a) == 0);
    CHECK(unlink(kek_b) == 0);
    CHECK(unlink(open_kek) == 0);
    CHECK(rmdir(dir) == 0);
    wid_keyring_free(kr);
}

static void test_issuer(void) {
    wid_keyring *kr = keyring_with_key("issuer", 9);
    const char *iss = "https://nomad.example.com";
    wid_bytes with_iss = {NULL, 0};
    wid_bytes without_iss = issue(kr, NOW);
    wid_bytes claims = {NULL, 0};
    wid_verifier *v_iss = NULL;
    wid_verifier *v_any;
    wid_verifier_options o;
    struct lookup_ctx ctx;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    CHECK_OK(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, S(iss), NOW,
                                   &with_iss));

    v_any = verifier_for(kr, &ctx);
    CHECK_OK(wid_verify(v_any, (const char *)with_iss.data, with_iss.len, NOW, &claims));
    CHECK(bytes_contain(&claims, "\"iss\":\"https://nomad.example.com\""));
    wid_bytes_free(&claims);

    memset(&o, 0, sizeof o);
    o.key_wait_ms = -1;
    o.issuer = iss;
    o.issuer_len = strlen(iss);
    CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v_iss));
    CHECK_OK(wid_verify(v_iss, (const char *)with_iss.data, with_iss.len, NOW, NULL));
    /* No iss, or another iss: rejected with its own code. */
    CHECK_RC(wid_verify(v_iss, (const char *)without_iss.data, without_iss.len, NOW, NULL),
             WID_RESULT_ISSUER_MISMATCH);
    {
        wid_bytes other = {NULL, 0};
        CHECK_OK(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len,
                                       S("https://evil.example.com"), NOW, &other));
        CHECK_RC(wid_verify(v_iss, (const char *)other.data, other.len, NOW, NULL),
                 WID_RESULT_ISSUER_MISMATCH);
        wid_bytes_free(&other);
    }
    /* options.issuer must be UTF-8. */
    {
        wid_verifier *out = SENTINEL_V;
        o.issuer = BAD_UTF8;
        o.issuer_len = strlen(BAD_UTF8);
        CHECK_RC(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(out == SENTINEL_V);
    }

    wid_bytes_free(&without_iss);
    wid_bytes_free(&with_iss);
    wid_verifier_free(v_any);
    wid_verifier_free(v_iss);
    wid_keyring_free(kr);
}

static void test_batch(void) {
    wid_keyring *kr = keyring_with_key("batch", 10);
    wid_keyring *foreign_kr = keyring_with_key("batch-foreign", 11);
    wid_verifier *v;
    struct lookup_ctx ctx;
    wid_bytes good = issue(kr, NOW);
    wid_bytes foreign = issue(foreign_kr, NOW);
    char *tampered = tampered_copy(&good);
    const char *toks[4];
    size_t lens[4];
    wid_result res[4];

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);

    toks[0] = (const char *)good.data;
    lens[0] = good.len;
    toks[1] = tampered;
    lens[1] = good.len;
    toks[2] = (const char *)foreign.data;
    lens[2] = foreign.len;
    toks[3] = BAD_UTF8;
    lens[3] = strlen(BAD_UTF8);
    res[0] = res[1] = res[2] = res[3] = 999;
    CHECK_OK(wid_verify_batch(v, toks, lens, 3, NOW, res));
    CHECK_RC(res[0], WID_RESULT_OK);
    CHECK_RC2(res[1], WID_RESULT_BAD_SIGNATURE, WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(res[2], WID_RESULT_UNKNOWN_KEY);
    CHECK(res[3] == 999); /* only `count` results are written */

    /* Each result matches wid_verify's. */
    CHECK_OK(wid_verify_batch(v, toks, lens, 4, NOW, res));
    CHECK_RC(res[3], WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(res[1], wid_verify(v, toks[1], lens[1], NOW, NULL));
    CHECK_RC(res[2], wid_verify(v, toks[2], lens[2], NOW, NULL));
    /* Time applies to all. */
    CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW + TTL + 61, res));
    CHECK_RC(res[0], WID_RESULT_EXPIRED);
    /* The allocation applies to all. */
    ctx_init(&ctx, WID_ALLOC_TERMINAL, WID_ALLOC_TERMINAL);
    CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW, res));
    CHECK_RC(res[0], WID_RESULT_ALLOCATION_TERMINAL);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);

    /* count 0 with NULL arrays. */
    CHECK_OK(wid_verify_batch(v, NULL, NULL, 0, NOW, NULL));
    /* The same token many times. */
    {
        const char *many[16];
        size_t many_lens[16];
        wid_result many_res[16];
        size_t i, ok = 0;
        for (i = 0; i < 16; i++) {
            many[i] = (const char *)good.data;
            many_lens[i] = good.len;
            many_res[i] = 999;
        }
        CHECK_OK(wid_verify_batch(v, many, many_lens, 16, NOW, many_res));
        for (i = 0; i < 16; i++) ok += many_res[i] == WID_RESULT_OK;
        CHECK(ok == 16);
    }
    /* With a cache, batch takes the single-token path: same answers. */
    {
        wid_verifier *vc = NULL;
        wid_verifier_options o;
        memset(&o, 0, sizeof o);
        o.key_wait_ms = -1;
        o.cache_entries = 8;
        CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &vc));
        res[0] = res[1] = res[2] = res[3] = 999;
        CHECK_OK(wid_verify_batch(vc, toks, lens, 4, NOW, res));
        CHECK_RC(res[0], WID_RESULT_OK);
        CHECK_RC2(res[1], WID_RESULT_BAD_SIGNATURE, WID_RESULT_MALFORMED_TOKEN);
        CHECK_RC(res[2], WID_RESULT_UNKNOWN_KEY);
        CHECK_RC(res[3], WID_RESULT_MALFORMED_TOKEN);
        wid_verifier_free(vc);
    }

    free(tampered);
    wid_bytes_free(&foreign);
    wid_bytes_free(&good);
    wid_verifier_free(v);
    wid_keyring_free(foreign_kr);
    wid_keyring_free(kr);
}

static void test_wrong_handle_type(void) {
    /* A handle of the wrong type is detected. (Using a handle after it was
     * freed is undefined behaviour and deliberately NOT tested.) */
    wid_keyring *kr = keyring_with_key("handles", 12);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_bytes out = sentinel_bytes();
    wid_bytes token = issue(kr, NOW);
    const wid_keyring *v_as_kr;
    const wid_verifier *kr_as_v;
    uint8_t m[32];
    size_t count = SENTINEL_COUNT;
    wid_verifier *v_out = SENTINEL_V;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    v_as_kr = (const wid_keyring *)(const void *)v;
    kr_as_v = (const wid_verifier *)(const void *)kr;
    fill_material(m, 99);

    CHECK_RC(wid_keyring_jwks(v_as_kr, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_keyring_rotate(v_as_kr, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_prepublish(v_as_kr, NOW, NOW + 1, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert(v_as_kr, S("x"), m, 32, 1, 2, NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_promote_due(v_as_kr, NOW, &count), WID_RESULT_INVALID_ARGUMENT);
    CHECK(count == SENTINEL_COUNT);
    CHECK_RC(wid_keyring_deprecate(v_as_kr, S("x"), NOW), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_import_jwks(v_as_kr, S("{\"keys\":[]}"), &count),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_save(v_as_kr, S("/tmp/wid-c-test-never-written")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue(v_as_kr, wid_sample_request, wid_sample_request_len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_with_issuer(v_as_kr, wid_sample_request, wid_sample_request_len, S("i"),
                                   NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_new(v_as_kr, S(AUD), 60, lookup, &ctx, &v_out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_new_with_options(v_as_kr, S(AUD), NULL, lookup, &ctx, &v_out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(v_out == SENTINEL_V);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_verify(kr_as_v, (const char *)token.data, token.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    {
        const char *toks[1] = {(const char *)token.data};
        size_t lens[1] = {token.len};
        wid_result res[1] = {999};
        CHECK_RC(wid_verify_batch(kr_as_v, toks, lens, 1, NOW, res), WID_RESULT_INVALID_ARGUMENT);
        CHECK(res[0] == 999);
    }
    /* Freeing through the wrong function is ignored: both handles still work. */
    wid_keyring_free(v_as_kr);
    wid_verifier_free(kr_as_v);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
    CHECK_OK(wid_keyring_jwks(kr, &out));
    wid_bytes_free(&out);

    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

static void test_handle_lifetimes(void) {
    /* The verifier keeps its own reference to the keyring. */
    wid_keyring *kr = keyring_with_key("lifetime", 13);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_bytes token = issue(kr, NOW);

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    wid_keyring_free(kr);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
    wid_verifier_free(v);
    wid_bytes_free(&token);
}

/* ---- Threads. */

struct locked_table {
    pthread_mutex_t mu;
    unsigned long calls;
};

static wid_result lookup_locked(void *userdata, const uint8_t *alloc_id, size_t alloc_id_len,
                                uint32_t consistency, uint32_t *out_state) {
    struct locked_table *t = userdata;
    (void)consistency;
    pthread_mutex_lock(&t->mu);
    t->calls++;
    pthread_mutex_unlock(&t->mu);
    *out_state = alloc_id_len == strlen(ALLOC_ID) && memcmp(alloc_id, ALLOC_ID, alloc_id_len) == 0
                     ? WID_ALLOC_LIVE
                     : WID_ALLOC_MISSING;
    return WID_RESULT_OK;
}

#define THREADS 4
#define ITERATIONS 200

struct thread_arg {
    const wid_verifier *v;
    const wid_bytes *token;
    const wid_bytes *foreign;
    unsigned long ok;
    unsigned long bad;
    int message_per_thread; /* the last error is per thread */
};

static void *verify_thread(void *p) {
    struct thread_arg *a = p;
    int i;
    for (i = 0; i < ITERATIONS; i++) {
        wid_bytes claims = {NULL, 0};
        wid_result rc =
            wid_verify(a->v, (const char *)a->token->data, a->token->len, NOW, &claims);
        if (rc == WID_RESULT_OK && bytes_contain(&claims, ALLOC_ID))
            a->ok++;
        else
            a->bad++;
        wid_bytes_free(&claims);
    }
    /* A failure here leaves a message in this thread only. */
    if (wid_verify(a->v, (const char *)a->foreign->data, a->foreign->len, NOW, NULL) ==
        WID_RESULT_UNKNOWN_KEY)
        a->message_per_thread = wid_last_error_message(NULL, 0) > 0;
    return NULL;
}

static void test_threads(void) {
    wid_keyring *kr = keyring_with_key("threads", 14);
    wid_keyring *foreign_kr = keyring_with_key("threads-foreign", 15);
    wid_bytes token = issue(kr, NOW);
    wid_bytes foreign = issue(foreign_kr, NOW);
    struct locked_table table;
    struct thread_arg args[THREADS];
    pthread_t th[THREADS];
    wid_verifier *v = NULL;
    wid_verifier_options o;
    int i, started = 0;
    unsigned long ok = 0, bad = 0;
    int per_thread = 0;

    pthread_mutex_init(&table.mu, NULL);
    table.calls = 0;
    memset(&o, 0, sizeof o);
    o.key_wait_ms = -1;
    CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup_locked, &table, &v));

    /* This thread's last error is empty after a success... */
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
    for (i = 0; i < THREADS; i++) {
        args[i].v = v;
        args[i].token = &token;
        args[i].foreign = &foreign;
        args[i].ok = args[i].bad = 0;
        args[i].message_per_thread = 0;
        if (pthread_create(&th[i], NULL, verify_thread, &args[i]) == 0) started++;
    }
    CHECK(started == THREADS);
    for (i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (i = 0; i < started; i++) {
        ok += args[i].ok;
        bad += args[i].bad;
        per_thread += args[i].message_per_thread;
    }
    CHECK(ok == (unsigned long)THREADS * ITERATIONS);
    CHECK(bad == 0);
    CHECK(table.calls == (unsigned long)THREADS * ITERATIONS + 1);
    CHECK(per_thread == THREADS);
    /* ...and stays empty although the other threads failed calls. */
    CHECK(wid_last_error_message(NULL, 0) == 0);

    wid_verifier_free(v);
    pthread_mutex_destroy(&table.mu);
    wid_bytes_free(&foreign);
    wid_bytes_free(&token);
    wid_keyring_free(foreign_kr);
    wid_keyring_free(kr);
}

/*
 * Regression: a token length above max_token_bytes is rejected from the length
 * alone, before any byte is read — also with a cache (which hashes tokens) and
 * in wid_verify_batch (which checks UTF-8). Both once read the whole claimed
 * length past a short buffer; under valgrind any such read fails the run.
 */
static void test_overlong_tokens_unread(void) {
    wid_keyring *kr = keyring_with_key("overread", 16);
    wid_bytes token = issue(kr, NOW);
    struct lookup_ctx ctx;
    wid_verifier *v = NULL;
    wid_verifier_options o;
    size_t claimed = 100000; /* > 8192, < 1 MiB */
    char *buf = malloc(token.len);
    const char *toks[1];
    size_t lens[1];
    wid_result res[1];

    if (buf == NULL) abort();
    memcpy(buf, token.data, token.len);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    memset(&o, 0, sizeof o);
    o.key_wait_ms = -1;
    o.cache_entries = 16;
    CHECK_OK(wid_verifier_new_with_options(kr, S(AUD), &o, lookup, &ctx, &v));
    CHECK_RC(wid_verify(v, buf, claimed, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    wid_verifier_free(v);
    v = verifier_for(kr, &ctx);
    toks[0] = buf;
    lens[0] = claimed;
    CHECK_OK(wid_verify_batch(v, toks, lens, 1, NOW, res));
    CHECK_RC(res[0], WID_RESULT_MALFORMED_TOKEN);
    wid_verifier_free(v);
    free(buf);
    wid_bytes_free(&token);
    wid_keyring_free(kr);
}

/* ES256 and RS256 beside EdDSA: rotate, issue with wid_issue_alg, verify;
 * the argument checks; save and load keep every algorithm. */
static void test_algorithms(void) {
    wid_keyring *kr = NULL, *back = NULL;
    wid_verifier *v = NULL;
    struct lookup_ctx ctx;
    wid_bytes out = sentinel_bytes(), kid = {NULL, 0}, jwks = {NULL, 0};
    uint8_t m[32];
    const char *path = "target/c-test-algorithms.keystore";
    uint32_t algs[3] = {WID_ALG_EDDSA, WID_ALG_ES256, WID_ALG_RS256};
    const char *names[3] = {"EdDSA", "ES256", "RS256"};
    size_t i;

    fill_material(m, 40);
    CHECK_OK(wid_keyring_new(&kr));
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);

    /* No ES256 key yet: NO_ACTIVE_KEY, output untouched. */
    CHECK_RC(wid_issue_alg(kr, WID_ALG_ES256, wid_sample_request, wid_sample_request_len,
                           NULL, 0, NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK(is_sentinel(&out));
    /* Unknown algorithms. */
    CHECK_RC(wid_issue_alg(kr, 0, wid_sample_request, wid_sample_request_len, NULL, 0, NOW,
                           &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_rotate_alg(kr, 4, NOW, NULL), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert_alg(kr, 99, S("x"), m, sizeof m, WID_KEY_DERIVATION_HKDF_V1,
                                    WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    /* Forbidden pairings. */
    CHECK_RC(wid_keyring_insert_alg(kr, WID_ALG_RS256, S("x"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert_alg(kr, WID_ALG_ES256, S("x"), m, sizeof m,
                                    WID_KEY_DERIVATION_NOMAD_RAW_SEED, WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_insert_alg(kr, WID_ALG_RS256, NULL, 1, m, sizeof m,
                                    WID_KEY_DERIVATION_PKCS8, WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_NULL_ARGUMENT);

    /* An EdDSA and an ES256 key from material, an RS256 key generated. */
    CHECK_OK(wid_keyring_insert_alg(kr, WID_ALG_EDDSA, S("ed"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW));
    CHECK_OK(wid_keyring_insert_alg(kr, WID_ALG_ES256, S("es"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW));
    CHECK_RC(wid_keyring_insert_alg(kr, WID_ALG_ES256, S("es2"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW),
             WID_RESULT_INVALID_ARGUMENT); /* a second active ES256 key */
    CHECK_OK(wid_keyring_rotate_alg(kr, WID_ALG_RS256, NOW, &kid));
    CHECK(kid.len == 36);
    wid_bytes_free(&kid);

    for (i = 0; i < 3; i++) {
        wid_bytes token = {NULL, 0};
        char want[64];
        CHECK_OK(wid_issue_alg(kr, algs[i], wid_sample_request, wid_sample_request_len,
                               S("https://nomad.example.com"), NOW, &token));
        CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
        snprintf(want, sizeof want, "\"alg\":\"%s\"", names[i]);
        CHECK(bytes_contain(&token, ".")); /* a compact JWS */
        wid_bytes_free(&token);
        CHECK_OK(wid_keyring_jwks(kr, &jwks));
        CHECK(bytes_contain(&jwks, want));
        wid_bytes_free(&jwks);
    }
    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK(bytes_contain(&jwks, "\"kty\":\"EC\",\"crv\":\"P-256\""));
    CHECK(bytes_contain(&jwks, "\"e\":\"AQAB\""));
    wid_bytes_free(&jwks);

    /* A keystore keeps all three; the loaded keyring issues with each. */
    CHECK_OK(wid_keyring_save(kr, S(path)));
    CHECK_OK(wid_keyring_load(S(path), &back));
    for (i = 0; i < 3; i++) {
        wid_bytes token = {NULL, 0};
        CHECK_OK(wid_issue_alg(back, algs[i], wid_sample_request, wid_sample_request_len, NULL,
                               0, NOW, &token));
        CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, NULL));
        wid_bytes_free(&token);
    }
    remove(path);
    wid_keyring_free(back);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* ---- Proof of possession: workload keys, WITs and WPTs. */

#define TD "nomad.example.com"
#define WIT_ISS "https://nomad.example.com"
#define TARGET "https://vault.example.com/v1/auth/jwt/login"
#define SENTINEL_WK ((wid_workload_key *)(uintptr_t)0x30)

/* Member `name` of the flat JSON object `json` as wid_workload_key_public_jwk
 * writes it (compact, string values without escapes), copied into `buf`;
 * "" when absent or too long. */
static const char *jwk_member(const wid_bytes *json, const char *name, char *buf, size_t cap) {
    char key[16];
    const char *at, *end;
    buf[0] = '\0';
    if (json->data == NULL) return buf;
    snprintf(key, sizeof key, "\"%s\":\"", name);
    at = strstr((const char *)json->data, key);
    if (at == NULL) return buf;
    at += strlen(key);
    end = strchr(at, '"');
    if (end == NULL || (size_t)(end - at) >= cap) return buf;
    memcpy(buf, at, (size_t)(end - at));
    buf[end - at] = '\0';
    return buf;
}

/* A keyring with an active EdDSA key and an active ES256 key. */
static wid_keyring *keyring_for_wits(uint8_t start) {
    wid_keyring *kr = NULL;
    uint8_t m[32];
    fill_material(m, start);
    CHECK_OK(wid_keyring_new(&kr));
    /* WITs are signed only by WIT keys; bearer keys beside them. */
    CHECK_OK(wid_keyring_insert_purpose(kr, WID_KEY_PURPOSE_WIT, WID_ALG_EDDSA, S("wit-ed"), m,
                                        sizeof m, WID_KEY_DERIVATION_HKDF_V1,
                                        WID_KEY_STATE_ACTIVE, NOW));
    CHECK_OK(wid_keyring_insert_purpose(kr, WID_KEY_PURPOSE_WIT, WID_ALG_ES256, S("wit-es"), m,
                                        sizeof m, WID_KEY_DERIVATION_HKDF_V1,
                                        WID_KEY_STATE_ACTIVE, NOW));
    fill_material(m, (uint8_t)(start + 1));
    CHECK_OK(wid_keyring_insert_alg(kr, WID_ALG_EDDSA, S("bearer-ed"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW));
    CHECK_OK(wid_keyring_insert_alg(kr, WID_ALG_ES256, S("bearer-es"), m, sizeof m,
                                    WID_KEY_DERIVATION_HKDF_V1, WID_KEY_STATE_ACTIVE, NOW));
    return kr;
}


/* The sample task's request, encoded by wid_request.h, carrying the public
 * key of a workload key as its ProofKey (the members of its public JWK). */
struct proof_request {
    char alg[16], crv[16], kty[8], x[64], y[64];
    uint8_t buf[1024];
    size_t len;
};

static void proof_request_for(const wid_workload_key *key, struct proof_request *r) {
    const char *aud[] = {"vault.io", "consul.io"};
    wid_request_fields f;
    wid_bytes jwk = {NULL, 0};
    CHECK_OK(wid_workload_key_public_jwk(key, &jwk));
    CHECK(jwk.data != NULL && jwk.data[jwk.len] == '\0');
    CHECK(!bytes_contain(&jwk, "\"d\"")); /* never the private key */
    jwk_member(&jwk, "alg", r->alg, sizeof r->alg);
    jwk_member(&jwk, "crv", r->crv, sizeof r->crv);
    jwk_member(&jwk, "kty", r->kty, sizeof r->kty);
    jwk_member(&jwk, "x", r->x, sizeof r->x);
    jwk_member(&jwk, "y", r->y, sizeof r->y);
    CHECK(strlen(r->x) == 43); /* 32 bytes, base64url without padding */
    wid_bytes_free(&jwk);

    memset(&f, 0, sizeof f);
    f.region = "global";
    f.alloc_id = ALLOC_ID;
    f.alloc_namespace = "default";
    f.job_id = "web";
    f.task_group = "frontend";
    f.task = "server";
    f.identity_name = "vault_default";
    f.audience = aud;
    f.audience_count = 2;
    f.ttl_ns = WID_TTL_SECONDS(3600);
    f.proof_key_alg = r->alg;
    f.proof_key_crv = r->crv;
    f.proof_key_kty = r->kty;
    f.proof_key_x = r->x;
    f.proof_key_y = r->y;
    r->len = wid_encode_issue_request(&f, r->buf, sizeof r->buf);
    CHECK(r->len > 0);
}

static wid_bytes prove(const wid_workload_key *key, const wid_bytes *wit, const char *target,
                       const char *access_token, int64_t ttl, int64_t now) {
    wid_bytes wpt = {NULL, 0};
    CHECK_OK(wid_workload_key_prove(key, (const char *)wit->data, wit->len, S(target),
                                    access_token, access_token ? strlen(access_token) : 0, ttl,
                                    now, &wpt));
    return wpt;
}

static wid_result verify_proof(const wid_verifier *v, const wid_bytes *wit, const wid_bytes *wpt,
                               const char *target, const char *access_token,
                               wid_bytes *out_claims) {
    return wid_verify_proof(v, (const char *)wit->data, wit->len, (const char *)wpt->data,
                            wpt->len, S(target), access_token,
                            access_token ? strlen(access_token) : 0, NOW, out_claims);
}

/* Generate EdDSA and ES256 keys, issue WITs with both signers from a request
 * the C encoder built, prove, verify; a replay, a WIT used as a bearer
 * token, another target and a missing access token are refused. */
/* Key purposes: WIT keys only in the WIT key set, bearer keys only in the
 * JWKS; unknown purposes refused with the output untouched; a keyring with
 * bearer keys only signs no WIT until a WIT key is rotated in. */
static void test_key_purposes(void) {
    wid_keyring *kr = keyring_for_wits(90), *bearer_only = NULL;
    wid_workload_key *key = NULL;
    struct proof_request req;
    wid_bytes jwks = {NULL, 0}, wit_set = {NULL, 0}, wit = {NULL, 0}, kid = {NULL, 0};
    wid_bytes out = sentinel_bytes();

    CHECK_OK(wid_keyring_jwks(kr, &jwks));
    CHECK_OK(wid_keyring_jwks_purpose(kr, WID_KEY_PURPOSE_WIT, &wit_set));
    CHECK(bytes_contain(&jwks, "bearer-ed") && !bytes_contain(&jwks, "wit-"));
    CHECK(bytes_contain(&wit_set, "\"wit-es\"") && !bytes_contain(&wit_set, "bearer-"));
    CHECK_RC(wid_keyring_jwks_purpose(kr, 0, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_jwks_purpose(kr, 4, &out), WID_RESULT_INVALID_ARGUMENT);
    /* The kubernetes purpose: no EdDSA key; none held here, so an empty set. */
    CHECK_RC(wid_keyring_rotate_purpose(kr, WID_KEY_PURPOSE_KUBERNETES, WID_ALG_EDDSA, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_keyring_rotate_purpose(kr, 9, WID_ALG_EDDSA, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_jwks_purpose(NULL, WID_KEY_PURPOSE_WIT, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));

    CHECK_OK(wid_workload_key_generate(WID_ALG_ES256, &key));
    proof_request_for(key, &req);
    CHECK_OK(wid_keyring_new(&bearer_only));
    CHECK_OK(wid_keyring_rotate_alg(bearer_only, WID_ALG_ES256, NOW, NULL));
    CHECK_RC(wid_issue_wit(bearer_only, WID_ALG_ES256, req.buf, req.len, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK(is_sentinel(&out));
    CHECK_OK(wid_keyring_rotate_purpose(bearer_only, WID_KEY_PURPOSE_WIT, WID_ALG_ES256, NOW, &kid));
    CHECK_OK(wid_issue_wit(bearer_only, WID_ALG_ES256, req.buf, req.len, NULL, 0, S(TD), NOW, &wit));
    CHECK(wit.data != NULL && kid.data != NULL);

    wid_bytes_free(&jwks);
    wid_bytes_free(&wit_set);
    wid_bytes_free(&wit);
    wid_bytes_free(&kid);
    wid_workload_key_free(key);
    wid_keyring_free(bearer_only);
    wid_keyring_free(kr);
}

static void test_proof_round_trip(void) {
    wid_keyring *kr = keyring_for_wits(60);
    struct lookup_ctx ctx;
    wid_verifier *v;
    uint32_t key_algs[2] = {WID_ALG_EDDSA, WID_ALG_ES256};
    const char *key_alg_names[2] = {"EdDSA", "ES256"};
    uint32_t signers[2] = {WID_ALG_EDDSA, WID_ALG_ES256};
    size_t i, j;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    for (i = 0; i < 2; i++) {
        wid_workload_key *key = NULL;
        struct proof_request req;
        CHECK_OK(wid_workload_key_generate(key_algs[i], &key));
        CHECK(key != NULL);
        proof_request_for(key, &req);
        CHECK(strcmp(req.alg, key_alg_names[i]) == 0);
        CHECK(strcmp(req.kty, i == 0 ? "OKP" : "EC") == 0);
        CHECK(strcmp(req.crv, i == 0 ? "Ed25519" : "P-256") == 0);
        CHECK(strlen(req.y) == (i == 0 ? 0u : 43u));
        for (j = 0; j < 2; j++) {
            wid_bytes wit = {NULL, 0}, wpt, fresh, claims = sentinel_bytes();
            wid_bytes out = sentinel_bytes();
            char want_x[96];
            CHECK_OK(wid_issue_wit(kr, signers[j], req.buf, req.len, S(WIT_ISS), S(TD), NOW,
                                   &wit));
            CHECK(wit.data != NULL && wit.data[wit.len] == '\0');
            /* A proof for this request (query and fragment are not part of
             * the target), bound to its access token. */
            wpt = prove(key, &wit, TARGET "?role=web#frag", "at-1", 0, NOW);
            CHECK(wpt.data != NULL && wpt.len > 0);
            CHECK_OK(verify_proof(v, &wit, &wpt, TARGET, "at-1", &claims));
            CHECK(bytes_contain(&claims, "\"nomad_allocation_id\":\"" ALLOC_ID "\""));
            CHECK(bytes_contain(
                &claims,
                "\"sub\":\"wimse://" TD "/global/default/web/frontend/server/vault_default\""));
            CHECK(bytes_contain(&claims, "\"iss\":\"" WIT_ISS "\""));
            CHECK(bytes_contain(&claims, "\"exp\":1700003600"));
            CHECK(bytes_contain(&claims, "\"cnf\":{\"jwk\":"));
            snprintf(want_x, sizeof want_x, "\"x\":\"%s\"", req.x);
            CHECK(bytes_contain(&claims, want_x)); /* cnf.jwk is this key */
            wid_bytes_free(&claims);

            /* The same proof again: replayed; the output untouched. */
            claims = sentinel_bytes();
            CHECK_RC(verify_proof(v, &wit, &wpt, TARGET, "at-1", &claims),
                     WID_RESULT_PROOF_REPLAYED);
            CHECK(is_sentinel(&claims));
            /* A WIT is never a bearer token. */
            CHECK_RC(wid_verify(v, (const char *)wit.data, wit.len, NOW, &out),
                     WID_RESULT_PROOF_REQUIRED);
            CHECK(is_sentinel(&out));
            /* Another target; no or another access token. */
            fresh = prove(key, &wit, TARGET, "at-1", 0, NOW);
            CHECK_RC(verify_proof(v, &wit, &fresh, "https://vault.example.com/v1/other", "at-1",
                                  &claims),
                     WID_RESULT_PROOF_INVALID);
            CHECK_RC(verify_proof(v, &wit, &fresh, TARGET, NULL, &claims),
                     WID_RESULT_PROOF_INVALID);
            CHECK_RC(verify_proof(v, &wit, &fresh, TARGET, "at-2", &claims),
                     WID_RESULT_PROOF_INVALID);
            CHECK(is_sentinel(&claims));
            /* Refusals do not use a proof up; out_claims_json may be NULL. */
            CHECK_OK(verify_proof(v, &wit, &fresh, TARGET, "at-1", NULL));
            CHECK_RC(verify_proof(v, &wit, &fresh, TARGET, "at-1", NULL),
                     WID_RESULT_PROOF_REPLAYED);
            wid_bytes_free(&fresh);
            wid_bytes_free(&wpt);
            wid_bytes_free(&wit);
        }
        wid_workload_key_free(key);
    }
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* Argument checks of the proof functions: NULLs, bad values, outputs
 * untouched on failure, lengths past the caps never read, wrong handles. */
static void test_proof_arguments(void) {
    wid_keyring *kr = keyring_for_wits(70);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_workload_key *key = NULL, *key_out = SENTINEL_WK;
    struct proof_request req;
    wid_bytes out = sentinel_bytes(), wit = {NULL, 0}, wpt;
    const char *w;
    size_t wl;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);

    /* wid_workload_key_generate: EdDSA and ES256 only. */
    CHECK_RC(wid_workload_key_generate(WID_ALG_RS256, &key_out),
             WID_RESULT_UNSUPPORTED_ALGORITHM);
    CHECK_RC(wid_workload_key_generate(0, &key_out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_workload_key_generate(99, &key_out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_workload_key_generate(WID_ALG_EDDSA, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(key_out == SENTINEL_WK);
    CHECK_OK(wid_workload_key_generate(WID_ALG_EDDSA, &key));

    /* wid_workload_key_public_jwk */
    CHECK_RC(wid_workload_key_public_jwk(NULL, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_public_jwk(key, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* wid_issue_wit */
    proof_request_for(key, &req);
    CHECK_RC(wid_issue_wit(NULL, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, NULL, req.len, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 4, S(TD), NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, NULL, 5, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, S(TD), NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    /* A request without ProofKey (the Go sample): use wid_issue_alg. */
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, wid_sample_request, wid_sample_request_len, NULL,
                           0, S(TD), NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "ProofKey") != NULL);
    /* The trust domain is required, a lower-case DNS name. */
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, S("Nomad.Example"),
                           NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "trust_domain") != NULL);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, S(BAD_UTF8), S(TD), NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, 0, req.buf, req.len, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_RS256, req.buf, req.len, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK_RC(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len - 1, NULL, 0, S(TD), NOW, &out),
             WID_RESULT_DECODE_ERROR);
    CHECK(is_sentinel(&out));
    /* (NULL, 0) issuer: no iss. */
    CHECK_OK(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, NULL, 0, S(TD), NOW, &wit));
    w = (const char *)wit.data;
    wl = wit.len;

    /* wid_workload_key_prove */
    CHECK_RC(wid_workload_key_prove(NULL, w, wl, S(TARGET), NULL, 0, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_prove(key, NULL, wl, S(TARGET), NULL, 0, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_prove(key, w, wl, NULL, 5, NULL, 0, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_prove(key, w, wl, S(TARGET), NULL, 3, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_prove(key, w, wl, S(TARGET), NULL, 0, 0, NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_workload_key_prove(key, NULL, 0, S(TARGET), NULL, 0, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT); /* empty WIT */
    CHECK_RC(wid_workload_key_prove(key, w, wl, NULL, 0, NULL, 0, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT); /* empty target */
    CHECK_RC(wid_workload_key_prove(key, w, wl, S(TARGET), NULL, 0, -1, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT); /* negative ttl */
    CHECK_RC(wid_workload_key_prove(key, S(BAD_UTF8), S(TARGET), NULL, 0, 0, NOW, &out),
             WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(wid_workload_key_prove(key, w, wl, S(TARGET), S(BAD_UTF8), 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    /* ttl_secs sets exp; a 5 s proof is refused 66 s later (60 s leeway). */
    wpt = prove(key, &wit, TARGET, NULL, 5, NOW);
    CHECK_RC(wid_verify_proof(v, w, wl, (const char *)wpt.data, wpt.len, S(TARGET), NULL, 0,
                              NOW + 66, NULL),
             WID_RESULT_PROOF_INVALID);
    wid_bytes_free(&wpt);
    wpt = prove(key, &wit, TARGET, NULL, 0, NOW);

    /* wid_verify_proof */
    CHECK_RC(wid_verify_proof(NULL, w, wl, (const char *)wpt.data, wpt.len, S(TARGET), NULL, 0,
                              NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_proof(v, NULL, wl, (const char *)wpt.data, wpt.len, S(TARGET), NULL, 0,
                              NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_proof(v, w, wl, NULL, wpt.len, S(TARGET), NULL, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_proof(v, w, wl, (const char *)wpt.data, wpt.len, NULL, 9, NULL, 0, NOW,
                              &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_proof(v, w, wl, (const char *)wpt.data, wpt.len, S(TARGET), NULL, 2,
                              NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verify_proof(v, w, wl, NULL, 0, S(TARGET), NULL, 0, NOW, &out),
             WID_RESULT_PROOF_INVALID); /* empty WPT */
    CHECK_RC(wid_verify_proof(v, w, wl, S(BAD_UTF8), S(TARGET), NULL, 0, NOW, &out),
             WID_RESULT_PROOF_INVALID);
    CHECK_RC(wid_verify_proof(v, S(BAD_UTF8), (const char *)wpt.data, wpt.len, S(TARGET), NULL,
                              0, NOW, &out),
             WID_RESULT_MALFORMED_TOKEN);
    CHECK_RC(wid_verify_proof(v, w, wl, (const char *)wpt.data, wpt.len, NULL, 0, NULL, 0, NOW,
                              &out),
             WID_RESULT_INVALID_ARGUMENT); /* empty target */
    CHECK(is_sentinel(&out));

    /* Lengths past the caps are refused from the length alone: short heap
     * copies with long claimed lengths (valgrind sees any read past them). */
    {
        char *wit_copy = malloc(wl), *wpt_copy = malloc(wpt.len);
        if (wit_copy == NULL || wpt_copy == NULL) abort();
        memcpy(wit_copy, w, wl);
        memcpy(wpt_copy, wpt.data, wpt.len);
        CHECK_RC(wid_workload_key_prove(key, wit_copy, (size_t)2 << 20, S(TARGET), NULL, 0, 0,
                                        NOW, &out),
                 WID_RESULT_MALFORMED_TOKEN);
        CHECK_RC(wid_verify_proof(v, wit_copy, 100000, wpt_copy, wpt.len, S(TARGET), NULL, 0,
                                  NOW, &out),
                 WID_RESULT_MALFORMED_TOKEN);
        CHECK_RC(wid_verify_proof(v, wit_copy, wl, wpt_copy, 100000, S(TARGET), NULL, 0, NOW,
                                  &out),
                 WID_RESULT_PROOF_INVALID);
        CHECK(is_sentinel(&out));
        /* The proof is still unused: the exact copies verify. */
        CHECK_OK(wid_verify_proof(v, wit_copy, wl, wpt_copy, wpt.len, S(TARGET), NULL, 0, NOW,
                                  NULL));
        free(wit_copy);
        free(wpt_copy);
    }

    /* Handles of the wrong type are refused; freeing one with the wrong
     * _free is ignored (all three stay usable). */
    CHECK_RC(wid_workload_key_public_jwk((const wid_workload_key *)(const void *)kr, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_workload_key_prove((const wid_workload_key *)(const void *)v, w, wl, S(TARGET),
                                    NULL, 0, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_keyring_jwks((const wid_keyring *)(const void *)key, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verify_proof((const wid_verifier *)(const void *)key, w, wl,
                              (const char *)wpt.data, wpt.len, S(TARGET), NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    wid_workload_key_free((wid_workload_key *)(void *)kr);
    wid_keyring_free((const wid_keyring *)(const void *)key);
    wid_verifier_free((const wid_verifier *)(const void *)key);
    CHECK_OK(wid_workload_key_public_jwk(key, &out));
    wid_bytes_free(&out);
    CHECK_OK(wid_keyring_jwks(kr, &out));
    wid_bytes_free(&out);

    wid_workload_key_free(NULL);
    wid_bytes_free(&wpt);
    wid_bytes_free(&wit);
    wid_workload_key_free(key);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* ------------------------------------------------------------------------ */
/* Issuer builder: SPIFFE JWT-SVIDs, extra claims, WITs, SPIFFE bundles     */
/* ------------------------------------------------------------------------ */

#define SPIFFE_TD "example.org"
#define SENTINEL_IB ((wid_issuer_builder *)(uintptr_t)0x40)
#define SENTINEL_IS ((wid_issuer *)(uintptr_t)0x50)
/* The base64url of {"alg":"ES256" and {"alg":"EdDSA", a token's first bytes. */
#define ES256_HEADER_PREFIX "eyJhbGciOiJFUzI1NiI"
#define EDDSA_HEADER_PREFIX "eyJhbGciOiJFZERTQSI"

static const char *const g_two_auds[] = {"vault.io", "consul.io"};

/* Whether the k bytes at `needle` occur in the n bytes at `buf` (memmem is
 * not C11). */
static int mem_contains_n(const uint8_t *buf, size_t n, const char *needle, size_t k) {
    size_t i;
    for (i = 0; i + k <= n; i++) {
        if (memcmp(buf + i, needle, k) == 0) return 1;
    }
    return 0;
}

/* mem_contains_n for a NUL-free string; a literal with NULs uses ..._n. */
static int mem_contains(const uint8_t *buf, size_t n, const char *needle) {
    return mem_contains_n(buf, n, needle, strlen(needle));
}

/* The sample task's fields (job "web", task "server", identity
 * "vault_default", audiences vault.io and consul.io, TTL 1 h), without the
 * Nomad 2.0.3 fields. */
static void base_fields(wid_request_fields *f) {
    memset(f, 0, sizeof *f);
    f->region = "global";
    f->alloc_id = ALLOC_ID;
    f->alloc_namespace = "default";
    f->job_id = "web";
    f->task_group = "frontend";
    f->task = "server";
    f->identity_name = "vault_default";
    f->audience = g_two_auds;
    f->audience_count = 2;
    f->ttl_ns = WID_TTL_SECONDS(3600);
}

struct encoded {
    uint8_t buf[4096];
    size_t len;
};

static void encode(const wid_request_fields *f, struct encoded *e) {
    e->len = wid_encode_issue_request(f, e->buf, sizeof e->buf);
    CHECK(e->len > 0);
}

/* A builder over `kr` with `alg`, optionally a SPIFFE profile for SPIFFE_TD
 * (path NULL: the default). */
static wid_issuer_builder *builder_for(const wid_keyring *kr, wid_alg alg, int spiffe,
                                       const char *path) {
    wid_issuer_builder *b = NULL;
    CHECK_OK(wid_issuer_builder_new(kr, &b));
    CHECK(b != NULL);
    CHECK_OK(wid_issuer_builder_set_algorithm(b, alg));
    if (spiffe)
        CHECK_OK(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), path, path ? strlen(path) : 0));
    return b;
}

static wid_issuer *build(const wid_issuer_builder *b) {
    wid_issuer *iss = NULL;
    CHECK_OK(wid_issuer_builder_build(b, &iss));
    CHECK(iss != NULL);
    return iss;
}

/* Issues `e` with `iss` and verifies the token with `v`; returns the claims
 * JSON ({NULL, 0} when either step failed). */
static wid_bytes issue_and_verify(const wid_issuer *iss, const struct encoded *e,
                                  const wid_verifier *v, const char *header_prefix) {
    wid_bytes token = {NULL, 0}, claims = {NULL, 0};
    CHECK_OK(wid_issuer_issue(iss, e->buf, e->len, NOW, &token));
    if (token.data == NULL) return claims;
    CHECK(token.data[token.len] == '\0');
    if (header_prefix != NULL)
        CHECK(strncmp((const char *)token.data, header_prefix, strlen(header_prefix)) == 0);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, &claims));
    wid_bytes_free(&token);
    return claims;
}

/* NULLs, bad values (refused at once, naming the problem, the builder
 * unchanged), lengths past the caps never read, outputs untouched on
 * failure, wrong handle types. */
static void test_issuer_builder_arguments(void) {
    wid_keyring *kr = keyring_for_wits(80);
    wid_issuer_builder *b = SENTINEL_IB;
    wid_issuer *iss = SENTINEL_IS;
    wid_bytes out = sentinel_bytes();
    wid_request_fields f;
    struct encoded e;
    struct lookup_ctx ctx;
    wid_verifier *v;
    char *long_str;
    const char *policy_sub =
        "{\"namespaces\":{\"default\":{\"required_extra_claims\":{\"sub\":\"x\"}}}}";

    base_fields(&f);
    encode(&f, &e);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    long_str = malloc(5000);
    if (long_str == NULL) abort();
    memset(long_str, 'a', 5000);

    /* wid_issuer_builder_new */
    CHECK_RC(wid_issuer_builder_new(NULL, &b), WID_RESULT_NULL_ARGUMENT);
    CHECK(b == SENTINEL_IB);
    CHECK_RC(wid_issuer_builder_new(kr, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_OK(wid_issuer_builder_new(kr, &b));
    CHECK(b != NULL && b != SENTINEL_IB);

    /* A valid configuration first: every failure below must leave it. */
    CHECK_OK(wid_issuer_builder_set_algorithm(b, WID_ALG_ES256));
    CHECK_OK(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("/ns/${job.namespace}")));
    CHECK_OK(wid_issuer_builder_set_issuer(b, S(WIT_ISS)));

    /* wid_issuer_builder_set_issuer */
    CHECK_RC(wid_issuer_builder_set_issuer(NULL, S("x")), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_issuer(b, NULL, 3), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_issuer(b, S(BAD_UTF8)), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "UTF-8") != NULL);
    CHECK_RC(wid_issuer_builder_set_issuer(b, long_str, 5000), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_issuer(b, "x", SIZE_MAX), WID_RESULT_INVALID_ARGUMENT);

    /* wid_issuer_builder_set_algorithm */
    CHECK_RC(wid_issuer_builder_set_algorithm(NULL, WID_ALG_ES256), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_algorithm(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_algorithm(b, 99), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "WID_ALG_") != NULL);

    /* wid_issuer_builder_set_spiffe */
    CHECK_RC(wid_issuer_builder_set_spiffe(NULL, S(SPIFFE_TD), NULL, 0),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, NULL, 5, NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), NULL, 5), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, NULL, 0, NULL, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S("Bad.Domain"), NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Bad.Domain") != NULL);
    CHECK(strstr(last_error(), "lower-case") != NULL);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S("a b"), NULL, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, long_str, 256, NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(BAD_UTF8), NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("/a/../b")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "/a/../b") != NULL);
    CHECK(strstr(last_error(), "may not contain") != NULL);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("no-slash")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("/a//b")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("/x/${nope}")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "nope") != NULL);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), "/x", SIZE_MAX),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_spiffe(b, "x", SIZE_MAX, NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);

    /* wid_issuer_builder_set_wimse_trust_domain */
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(NULL, S(TD)), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(b, NULL, 4), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(b, NULL, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(b, S("Bad.Domain")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "trust_domain") != NULL);
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(b, S("a..b")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(b, "x", SIZE_MAX),
             WID_RESULT_INVALID_ARGUMENT);

    /* wid_issuer_builder_set_extra_claims_policy */
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(NULL, S("{\"namespaces\":{}}")),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, NULL, 5), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, S(policy_sub)),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "reserved") != NULL);
    CHECK(strstr(last_error(), "\"sub\"") != NULL);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, S("{\"namespaces\":")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "namespaces") != NULL);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, S("not json")),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, S("{\"namespace\":{}}")),
             WID_RESULT_INVALID_ARGUMENT); /* an unknown member */
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(
                 b, S("{\"namespaces\":{\"default\":{\"required_extra_claims\":"
                      "{\"a\":\"${job.nope}\"}}}}")),
             WID_RESULT_INVALID_ARGUMENT); /* an unknown variable */
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(
                 b, S("{\"namespaces\":{\"default\":{\"required_extra_claims\":"
                      "{\"a\":\"x\",\"a\":\"y\"}}}}")),
             WID_RESULT_INVALID_ARGUMENT); /* a duplicate key */
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, S(BAD_UTF8)),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_builder_set_extra_claims_policy(b, "{", SIZE_MAX),
             WID_RESULT_INVALID_ARGUMENT);

    /* wid_issuer_builder_build */
    CHECK_RC(wid_issuer_builder_build(NULL, &iss), WID_RESULT_NULL_ARGUMENT);
    CHECK(iss == SENTINEL_IS);
    CHECK_RC(wid_issuer_builder_build(b, NULL), WID_RESULT_NULL_ARGUMENT);

    /* Every failure left the builder as it was: ES256, the SPIFFE path, the
     * issuer, and no extra claims policy. */
    iss = build(b);
    {
        wid_bytes claims = issue_and_verify(iss, &e, v, ES256_HEADER_PREFIX);
        CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD "/ns/default\""));
        CHECK(bytes_contain(&claims, "\"iss\":\"" WIT_ISS "\""));
        CHECK(!bytes_contain(&claims, "extra_claims"));
        wid_bytes_free(&claims);
    }
    /* (NULL, 0) clears the issuer. */
    CHECK_OK(wid_issuer_builder_set_issuer(b, NULL, 0));
    {
        wid_issuer *no_iss = build(b);
        wid_bytes claims = issue_and_verify(no_iss, &e, v, ES256_HEADER_PREFIX);
        CHECK(claims.data != NULL && !bytes_contain(&claims, "\"iss\""));
        wid_bytes_free(&claims);
        wid_issuer_free(no_iss);
    }

    /* wid_issuer_issue */
    CHECK_RC(wid_issuer_issue(NULL, e.buf, e.len, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue(iss, NULL, 5, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue(iss, e.buf, e.len, NOW, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue(iss, e.buf, SIZE_MAX, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_issue(iss, NULL, 0, NOW, &out), WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issuer_issue(iss, e.buf, e.len - 1, NOW, &out), WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issuer_issue(iss, (const uint8_t *)"\xc0", 1, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    CHECK(is_sentinel(&out));

    /* wid_keyring_spiffe_bundle */
    CHECK_RC(wid_keyring_spiffe_bundle(NULL, 60, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_keyring_spiffe_bundle(kr, 60, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* Wrong handle types: detected, outputs untouched; frees through the
     * wrong function are ignored. */
    {
        wid_issuer *iss_out = SENTINEL_IS;
        wid_issuer_builder *b_out = SENTINEL_IB;
        wid_issuer_builder *iss_as_b = (wid_issuer_builder *)(void *)iss;
        wid_issuer_builder *kr_as_b = (wid_issuer_builder *)(void *)kr;
        const wid_issuer *b_as_iss = (const wid_issuer *)(const void *)b;
        const wid_issuer *kr_as_iss = (const wid_issuer *)(const void *)kr;
        const wid_keyring *iss_as_kr = (const wid_keyring *)(const void *)iss;
        const wid_keyring *b_as_kr = (const wid_keyring *)(const void *)b;
        const wid_keyring *v_as_kr = (const wid_keyring *)(const void *)v;

        CHECK_RC(wid_issuer_issue(b_as_iss, e.buf, e.len, NOW, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_issue(kr_as_iss, e.buf, e.len, NOW, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        CHECK_RC(wid_issuer_builder_build(iss_as_b, &iss_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_build(kr_as_b, &iss_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(iss_out == SENTINEL_IS);
        CHECK_RC(wid_issuer_builder_set_issuer(iss_as_b, S("x")), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_set_algorithm(iss_as_b, WID_ALG_ES256),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_set_spiffe(kr_as_b, S(SPIFFE_TD), NULL, 0),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_set_wimse_trust_domain(iss_as_b, S(TD)),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_set_extra_claims_policy(iss_as_b, S("{\"namespaces\":{}}")),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_new(iss_as_kr, &b_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_new(b_as_kr, &b_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_issuer_builder_new(v_as_kr, &b_out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(b_out == SENTINEL_IB);
        CHECK_RC(wid_keyring_spiffe_bundle(iss_as_kr, 60, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_keyring_spiffe_bundle(b_as_kr, 60, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        wid_issuer_free(b_as_iss);
        wid_issuer_free(kr_as_iss);
        wid_issuer_builder_free(iss_as_b);
        wid_issuer_builder_free(kr_as_b);
        wid_keyring_free(iss_as_kr);
        wid_keyring_free(b_as_kr);
        /* All three still work. */
        CHECK_OK(wid_issuer_builder_set_issuer(b, S(WIT_ISS)));
        CHECK_OK(wid_issuer_issue(iss, e.buf, e.len, NOW, &out));
        wid_bytes_free(&out);
        CHECK_OK(wid_keyring_spiffe_bundle(kr, 60, &out));
        wid_bytes_free(&out);
    }

    free(long_str);
    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* SPIFFE JWT-SVIDs through the builder: ES256 verifies with a spiffe:// sub;
 * EdDSA, no audience and no TTL are refused; the path template renders the
 * request (Node and Job fields too); the builder is not consumed; issuers
 * outlive the builder and the keyring handle and see rotations; the SPIFFE
 * bundle. */
static void test_spiffe_issuance(void) {
    wid_keyring *kr = keyring_for_wits(81);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_ES256, 1, NULL);
    wid_issuer *svid, *custom, *eddsa;
    wid_bytes claims, out = sentinel_bytes();
    wid_request_fields f;
    struct encoded e, e2;
    struct lookup_ctx ctx;
    wid_verifier *v;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    base_fields(&f);
    encode(&f, &e);
    CHECK_OK(wid_issuer_builder_set_issuer(b, S(WIT_ISS)));
    svid = build(b);

    /* An ES256 JWT-SVID, verified like any token (allocation bound). */
    claims = issue_and_verify(svid, &e, v, ES256_HEADER_PREFIX);
    CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD
                                 "/global/default/web/frontend/server/vault_default\""));
    CHECK(bytes_contain(&claims, "\"nomad_allocation_id\":\"" ALLOC_ID "\""));
    CHECK(bytes_contain(&claims, "\"aud\":[\"vault.io\",\"consul.io\"]"));
    CHECK(bytes_contain(&claims, "\"exp\":1700003600"));
    CHECK(bytes_contain(&claims, "\"iss\":\"" WIT_ISS "\""));
    wid_bytes_free(&claims);
    {
        /* A terminal allocation's SVID is refused like any other token. */
        struct lookup_ctx dead;
        wid_verifier *vd;
        wid_bytes t = {NULL, 0};
        ctx_init(&dead, WID_ALLOC_TERMINAL, WID_ALLOC_TERMINAL);
        vd = verifier_for(kr, &dead);
        CHECK_OK(wid_issuer_issue(svid, e.buf, e.len, NOW, &t));
        CHECK_RC(wid_verify(vd, (const char *)t.data, t.len, NOW, NULL),
                 WID_RESULT_ALLOCATION_TERMINAL);
        wid_bytes_free(&t);
        wid_verifier_free(vd);
    }

    /* JWT-SVID rules: aud and exp required. */
    f.audience_count = 0;
    encode(&f, &e2);
    CHECK_RC(wid_issuer_issue(svid, e2.buf, e2.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "audience") != NULL);
    base_fields(&f);
    f.ttl_ns = 0;
    encode(&f, &e2);
    CHECK_RC(wid_issuer_issue(svid, e2.buf, e2.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "TTL") != NULL);
    /* A job ID that cannot be a path segment: refused, naming the field. */
    base_fields(&f);
    f.job_id = "web/dispatch-1";
    encode(&f, &e2);
    CHECK_RC(wid_issuer_issue(svid, e2.buf, e2.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Allocation.JobID") != NULL);
    CHECK(is_sentinel(&out));

    /* EdDSA (the default algorithm) cannot sign a JWT-SVID. */
    {
        wid_issuer_builder *eb = builder_for(kr, WID_ALG_EDDSA, 1, NULL);
        eddsa = build(eb);
        wid_issuer_builder_free(eb);
        CHECK_RC(wid_issuer_issue(eddsa, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(strstr(last_error(), "ES256 or RS256") != NULL);
        CHECK(is_sentinel(&out));
        wid_issuer_free(eddsa);
    }
    /* Without SPIFFE the same EdDSA builder signs Nomad's sub. */
    {
        wid_issuer_builder *eb = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
        eddsa = build(eb);
        claims = issue_and_verify(eddsa, &e, v, EDDSA_HEADER_PREFIX);
        CHECK(bytes_contain(&claims,
                            "\"sub\":\"global:default:web:frontend:server:vault_default\""));
        wid_bytes_free(&claims);
        wid_issuer_free(eddsa);
        wid_issuer_builder_free(eb);
    }
    /* No active RS256 key. */
    {
        wid_issuer_builder *rb = builder_for(kr, WID_ALG_RS256, 1, NULL);
        wid_issuer *rs = build(rb);
        CHECK_RC(wid_issuer_issue(rs, e.buf, e.len, NOW, &out), WID_RESULT_NO_ACTIVE_KEY);
        CHECK(is_sentinel(&out));
        wid_issuer_free(rs);
        wid_issuer_builder_free(rb);
    }

    /* A path template over the Node and the Job (wid_request.h's new
     * fields); the first issuer keeps the default path: build does not
     * consume the builder, and changes do not reach built issuers. */
    CHECK_OK(wid_issuer_builder_set_spiffe(
        b, S(SPIFFE_TD), S("/pool/${node.pool}/${job.node_pool}/sa-${identity.name}")));
    custom = build(b);
    base_fields(&f);
    f.node_pool = "gpu";
    f.job_node_pool = "batch";
    encode(&f, &e2);
    claims = issue_and_verify(custom, &e2, v, ES256_HEADER_PREFIX);
    CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD "/pool/gpu/batch/sa-vault_default\""));
    wid_bytes_free(&claims);
    /* Without the Node, the template cannot be rendered. */
    CHECK_RC(wid_issuer_issue(custom, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Node.NodePool") != NULL);
    claims = issue_and_verify(svid, &e2, v, ES256_HEADER_PREFIX);
    CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD
                                 "/global/default/web/frontend/server/vault_default\""));
    wid_bytes_free(&claims);

    /* Issuers share the keyring: a rotation after build is used at once
     * (the new key signs, the verifier knows it), and an issuer outlives its
     * builder (and, below, the keyring handle). */
    CHECK_OK(wid_keyring_rotate_alg(kr, WID_ALG_ES256, NOW, NULL));
    wid_issuer_builder_free(b);
    claims = issue_and_verify(svid, &e, v, ES256_HEADER_PREFIX);
    CHECK(claims.data != NULL);
    wid_bytes_free(&claims);

    /* The SPIFFE bundle: JWT authorities only (no Ed25519 key), with
     * use jwt-svid and the refresh hint; 0 is the default, 300. */
    CHECK_OK(wid_keyring_spiffe_bundle(kr, 60, &out));
    CHECK(out.data != NULL && out.data[out.len] == '\0');
    CHECK(bytes_contain(&out, "\"use\":\"jwt-svid\""));
    CHECK(bytes_contain(&out, "\"spiffe_refresh_hint\":60"));
    CHECK(bytes_contain(&out, "\"kid\":\"bearer-es\"")); /* the rotated-out key still verifies */
    CHECK(!bytes_contain(&out, "\"wit-es\"")); /* a WIT key is never a JWT-SVID authority */
    CHECK(bytes_contain(&out, "\"kty\":\"EC\""));
    CHECK(!bytes_contain(&out, "\"OKP\""));
    CHECK(!bytes_contain(&out, "\"use\":\"sig\""));
    wid_bytes_free(&out);
    CHECK_OK(wid_keyring_spiffe_bundle(kr, 0, &out));
    CHECK(bytes_contain(&out, "\"spiffe_refresh_hint\":300"));
    wid_bytes_free(&out);
    {
        wid_keyring *ed_only = keyring_with_key("ed-only", 82);
        CHECK_OK(wid_keyring_spiffe_bundle(ed_only, 1, &out));
        CHECK(bytes_eq(&out, "{\"keys\":[],\"spiffe_refresh_hint\":1}"));
        wid_bytes_free(&out);
        wid_keyring_free(ed_only);
    }

    wid_keyring_free(kr);
    /* The keyring handle is gone; the issuer and the verifier hold it. */
    claims = issue_and_verify(svid, &e, v, ES256_HEADER_PREFIX);
    CHECK(claims.data != NULL);
    wid_bytes_free(&claims);

    wid_issuer_free(custom);
    wid_issuer_free(svid);
    wid_verifier_free(v);
}

/* Extra claims from a policy: required claims in every identity of the
 * namespace, optional ones when the identity names them (ExtraClaims from
 * wid_request.h), values rendered from Job.Meta, Job.NodePool and the Node;
 * the verified claims carry "extra_claims":{...}. */
static void test_extra_claims_issuance(void) {
    wid_keyring *kr = keyring_for_wits(83);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss, *plain;
    wid_bytes claims, out = sentinel_bytes();
    wid_request_fields f;
    struct encoded e;
    struct lookup_ctx ctx;
    wid_verifier *v;
    const char *policy =
        "{\"namespaces\":{\"default\":{"
        "\"required_extra_claims\":{\"unique_id\":\"${job.namespace}:${job.id}\","
        "\"owner\":\"${job.meta.owner}\"},"
        "\"optional_extra_claims\":{\"dc\":\"dc:${node.datacenter}\","
        "\"pool\":\"${job.node_pool}\"}}}}";
    const char *meta_keys[] = {"owner", "team"};
    const char *meta_values[] = {"team-a", "infra"};
    const char *want_dc[] = {"dc"};
    const char *want_both[] = {"pool", "dc"};
    const char *want_unknown[] = {"nope"};

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    CHECK_OK(wid_issuer_builder_set_extra_claims_policy(b, S(policy)));
    iss = build(b);

    base_fields(&f);
    f.job_meta_keys = meta_keys;
    f.job_meta_values = meta_values;
    f.job_meta_count = 2;
    f.job_node_pool = "gpu";
    f.node_datacenter = "dc1";
    f.node_id = "9d1e6a44-1111-2222-3333-444444444444";
    f.extra_claims = want_dc;
    f.extra_claims_count = 1;
    encode(&f, &e);
    claims = issue_and_verify(iss, &e, v, EDDSA_HEADER_PREFIX);
    CHECK(bytes_contain(&claims, "\"extra_claims\":{\"dc\":\"dc:dc1\",\"owner\":\"team-a\","
                                 "\"unique_id\":\"default:web\"}"));
    CHECK(bytes_contain(&claims, "\"sub\":\"global:default:web:frontend:server:vault_default\""));
    wid_bytes_free(&claims);

    /* Both optional claims. */
    f.extra_claims = want_both;
    f.extra_claims_count = 2;
    encode(&f, &e);
    claims = issue_and_verify(iss, &e, v, NULL);
    CHECK(bytes_contain(&claims, "\"extra_claims\":{\"dc\":\"dc:dc1\",\"owner\":\"team-a\","
                                 "\"pool\":\"gpu\",\"unique_id\":\"default:web\"}"));
    wid_bytes_free(&claims);

    /* Only the required ones. */
    f.extra_claims_count = 0;
    encode(&f, &e);
    claims = issue_and_verify(iss, &e, v, NULL);
    CHECK(bytes_contain(&claims,
                        "\"extra_claims\":{\"owner\":\"team-a\",\"unique_id\":\"default:web\"}"));
    wid_bytes_free(&claims);

    /* A claim the namespace does not offer; a required claim whose field the
     * request lacks (no Job.Meta): refused naming it, nothing written. */
    f.extra_claims = want_unknown;
    f.extra_claims_count = 1;
    encode(&f, &e);
    CHECK_RC(wid_issuer_issue(iss, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "nope") != NULL);
    f.extra_claims_count = 0;
    f.job_meta_count = 0;
    encode(&f, &e);
    CHECK_RC(wid_issuer_issue(iss, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Meta") != NULL);
    CHECK(is_sentinel(&out));

    /* Another namespace: no extra claims at all. */
    base_fields(&f);
    f.alloc_namespace = "other";
    encode(&f, &e);
    claims = issue_and_verify(iss, &e, v, NULL);
    CHECK(claims.data != NULL && !bytes_contain(&claims, "extra_claims"));
    wid_bytes_free(&claims);

    /* An issuer without a policy refuses an identity that names claims. */
    {
        wid_issuer_builder *pb = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
        plain = build(pb);
        wid_issuer_builder_free(pb);
    }
    base_fields(&f);
    f.extra_claims = want_dc;
    f.extra_claims_count = 1;
    encode(&f, &e);
    CHECK_RC(wid_issuer_issue(plain, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Identity.ExtraClaims") != NULL);
    CHECK(is_sentinel(&out));
    /* wid_issue, which has no policy, refuses it too. */
    CHECK_RC(wid_issue(kr, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    wid_issuer_free(plain);

    /* SPIFFE and extra claims together, ES256. */
    CHECK_OK(wid_issuer_builder_set_algorithm(b, WID_ALG_ES256));
    CHECK_OK(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), S("/dc/${node.datacenter}/${task.name}")));
    {
        wid_issuer *both = build(b);
        base_fields(&f);
        f.job_meta_keys = meta_keys;
        f.job_meta_values = meta_values;
        f.job_meta_count = 1;
        f.node_datacenter = "dc1";
        f.extra_claims = want_dc;
        f.extra_claims_count = 1;
        encode(&f, &e);
        claims = issue_and_verify(both, &e, v, ES256_HEADER_PREFIX);
        CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD "/dc/dc1/server\""));
        CHECK(bytes_contain(&claims, "\"extra_claims\":{\"dc\":\"dc:dc1\",\"owner\":\"team-a\","
                                     "\"unique_id\":\"default:web\"}"));
        wid_bytes_free(&claims);
        wid_issuer_free(both);
    }

    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* A request with a ProofKey gets a WIT from an issuer with a WIMSE trust
 * domain (and a WIT-SVID from a SPIFFE issuer); without either it is refused. */
static void test_issuer_wits(void) {
    wid_keyring *kr = keyring_for_wits(84);
    wid_workload_key *key = NULL;
    struct proof_request req;
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_issuer_builder *b = builder_for(kr, WID_ALG_ES256, 0, NULL);
    wid_issuer *no_td, *wimse, *spiffe;
    wid_bytes wit = {NULL, 0}, wpt, claims = {NULL, 0}, out = sentinel_bytes();

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    CHECK_OK(wid_workload_key_generate(WID_ALG_ES256, &key));
    proof_request_for(key, &req);

    no_td = build(b);
    CHECK_RC(wid_issuer_issue(no_td, req.buf, req.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "trust domain") != NULL);
    CHECK(is_sentinel(&out));

    CHECK_OK(wid_issuer_builder_set_wimse_trust_domain(b, S(TD)));
    wimse = build(b);
    CHECK_OK(wid_issuer_issue(wimse, req.buf, req.len, NOW, &wit));
    wpt = prove(key, &wit, TARGET, NULL, 0, NOW);
    CHECK_OK(verify_proof(v, &wit, &wpt, TARGET, NULL, &claims));
    CHECK(bytes_contain(
        &claims, "\"sub\":\"wimse://" TD "/global/default/web/frontend/server/vault_default\""));
    CHECK(bytes_contain(&claims, "\"cnf\":{\"jwk\":"));
    wid_bytes_free(&claims);
    CHECK_RC(wid_verify(v, (const char *)wit.data, wit.len, NOW, NULL),
             WID_RESULT_PROOF_REQUIRED);
    wid_bytes_free(&wpt);
    wid_bytes_free(&wit);

    CHECK_OK(wid_issuer_builder_set_spiffe(b, S(SPIFFE_TD), NULL, 0));
    spiffe = build(b);
    CHECK_OK(wid_issuer_issue(spiffe, req.buf, req.len, NOW, &wit));
    wpt = prove(key, &wit, TARGET, NULL, 0, NOW);
    CHECK_OK(verify_proof(v, &wit, &wpt, TARGET, NULL, &claims));
    CHECK(bytes_contain(&claims, "\"sub\":\"spiffe://" SPIFFE_TD
                                 "/global/default/web/frontend/server/vault_default\""));
    wid_bytes_free(&claims);
    wid_bytes_free(&wpt);
    wid_bytes_free(&wit);

    wid_issuer_free(no_td);
    wid_issuer_free(wimse);
    wid_issuer_free(spiffe);
    wid_issuer_builder_free(b);
    wid_workload_key_free(key);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* wid_request.h's new fields: absent, a request encodes exactly as before
 * (no new keys); present, they reach the library (a 20-entry Meta takes a
 * map16); a buffer too small still gives 0. */
static void test_request_encoder_extra_fields(void) {
    wid_keyring *kr = keyring_for_wits(85);
    wid_request_fields f;
    struct encoded e;
    uint8_t small[200];
    const char *keys[20], *values[20];
    char key_buf[20][8], value_buf[20][8];
    const char *extra[] = {"m19"};
    const char *policy = "{\"namespaces\":{\"default\":{\"optional_extra_claims\":"
                         "{\"m19\":\"${job.meta.k19}\",\"m0\":\"${job.meta.k0}\"}}}}";
    wid_issuer_builder *b = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss;
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_bytes claims;
    size_t i;

    base_fields(&f);
    encode(&f, &e);
    CHECK(!mem_contains(e.buf, e.len, "Node"));
    CHECK(!mem_contains(e.buf, e.len, "ExtraClaims"));
    CHECK(!mem_contains(e.buf, e.len, "Meta"));
    CHECK(!mem_contains(e.buf, e.len, "Job\x82") && !mem_contains(e.buf, e.len, "\xa3Job"));
    f.parent_job_id = "web";
    encode(&f, &e);
    CHECK(mem_contains(e.buf, e.len, "\xa3Job\x82"));      /* ID and ParentID, as before */
    CHECK(!mem_contains(e.buf, e.len, "NodePool"));

    for (i = 0; i < 20; i++) {
        snprintf(key_buf[i], sizeof key_buf[i], "k%u", (unsigned)i);
        snprintf(value_buf[i], sizeof value_buf[i], "v%u", (unsigned)i);
        keys[i] = key_buf[i];
        values[i] = value_buf[i];
    }
    base_fields(&f);
    f.job_meta_keys = keys;
    f.job_meta_values = values;
    f.job_meta_count = 20;
    f.extra_claims = extra;
    f.extra_claims_count = 1;
    f.node_name = "client-1"; /* the other Node fields are written as "" */
    encode(&f, &e);
    /* map16, 20 entries (the literal holds a NUL: its size, not strlen). */
    CHECK(mem_contains_n(e.buf, e.len, "\xa4Meta\xde\x00\x14", 8));
    CHECK(mem_contains(e.buf, e.len, "\xa4Node\x85"));
    CHECK(wid_encode_issue_request(&f, small, sizeof small) == 0);

    CHECK_OK(wid_issuer_builder_set_extra_claims_policy(b, S(policy)));
    iss = build(b);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    claims = issue_and_verify(iss, &e, v, NULL);
    CHECK(bytes_contain(&claims, "\"extra_claims\":{\"m19\":\"v19\"}"));
    wid_bytes_free(&claims);

    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* ------------------------------------------------------------------------ */
/* Verifier builder, explain, stats                                         */
/* ------------------------------------------------------------------------ */

#define SENTINEL_VB ((wid_verifier_builder *)(uintptr_t)0x60)

static wid_bytes empty_bytes(void) {
    wid_bytes b = {NULL, 0};
    return b;
}
#define OTHER_ISS "https://other.example.com"

static wid_verifier_builder *vbuilder_for(const wid_keyring *kr, struct lookup_ctx *ctx) {
    wid_verifier_builder *b = NULL;
    CHECK_OK(wid_verifier_builder_new(kr, lookup, ctx, S(AUD), &b));
    CHECK(b != NULL);
    return b;
}

static wid_verifier *vbuild(const wid_verifier_builder *b) {
    wid_verifier *v = NULL;
    CHECK_OK(wid_verifier_builder_build(b, &v));
    CHECK(v != NULL);
    return v;
}

static wid_bytes issue_iss(const wid_keyring *kr, const char *iss, int64_t now) {
    wid_bytes t = {NULL, 0};
    CHECK_OK(wid_issue_with_issuer(kr, wid_sample_request, wid_sample_request_len, S(iss), now,
                                   &t));
    return t;
}

static wid_result verify_at(const wid_verifier *v, const wid_bytes *t, int64_t now) {
    return wid_verify(v, (const char *)t->data, t->len, now, NULL);
}

/* wid_verifier_builder_new and every setter: NULLs, refusals that leave the
 * builder unchanged (checked by what the verifiers built from it do),
 * builds that do not consume the builder, wrong handle types. */
static void test_verifier_builder_arguments(void) {
    wid_keyring *kr = keyring_with_key("vbuilder", 30);
    struct lookup_ctx ctx;
    wid_verifier_builder *b = SENTINEL_VB;
    wid_verifier *v = SENTINEL_V, *v2;
    wid_bytes token = issue_iss(kr, WIT_ISS, NOW);
    wid_bytes other = issue_iss(kr, OTHER_ISS, NOW);
    wid_bytes out = sentinel_bytes();
    char *long_str = malloc(5000);
    char *long_token;

    if (long_str == NULL) abort();
    memset(long_str, 'a', 5000);
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);

    /* wid_verifier_builder_new */
    CHECK_RC(wid_verifier_builder_new(NULL, lookup, &ctx, S(AUD), &b), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_new(kr, NULL, &ctx, S(AUD), &b), WID_RESULT_NULL_ARGUMENT);
    CHECK(strstr(last_error(), "lookup") != NULL);
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, NULL, 5, &b), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, S(AUD), NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, NULL, 0, &b),
             WID_RESULT_INVALID_ARGUMENT); /* the audience is required */
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, S(BAD_UTF8), &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, long_str, 5000, &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_new(kr, lookup, &ctx, AUD, SIZE_MAX, &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(b == SENTINEL_VB);
    b = vbuilder_for(kr, &ctx);

    /* A valid configuration first: every failure below must leave it. */
    CHECK_OK(wid_verifier_builder_set_leeway_secs(b, 0));
    CHECK_OK(wid_verifier_builder_set_key_wait_ms(b, 0));
    CHECK_OK(wid_verifier_builder_set_max_token_bytes(b, 4096));
    CHECK_OK(wid_verifier_builder_set_require_exp(b, 1));
    CHECK_OK(wid_verifier_builder_set_cache_entries(b, 64));
    CHECK_OK(wid_verifier_builder_set_issuer(b, S(WIT_ISS)));
    CHECK_OK(wid_verifier_builder_set_require_proof(b, 0));
    CHECK_OK(wid_verifier_builder_set_max_proof_lifetime_secs(b, 60));
    CHECK_OK(wid_verifier_builder_set_proof_replay_capacity(b, 1000));

    /* Refusals. */
    CHECK_RC(wid_verifier_builder_set_leeway_secs(b, -1), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "-1") != NULL);
    CHECK_RC(wid_verifier_builder_set_leeway_secs(b, INT64_MIN), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_key_wait_ms(b, -1), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_max_token_bytes(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_require_exp(b, 2), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "0 or 1") != NULL);
    CHECK_RC(wid_verifier_builder_set_require_proof(b, UINT32_MAX), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_issuer(b, S(BAD_UTF8)), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "UTF-8") != NULL);
    CHECK_RC(wid_verifier_builder_set_issuer(b, long_str, 5000), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_issuer(b, "x", SIZE_MAX), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_issuer(b, NULL, 3), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_max_proof_lifetime_secs(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_max_proof_lifetime_secs(b, -3),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_proof_replay_capacity(b, 15), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "16") != NULL);

    /* NULL builders, whatever the value. */
    CHECK_RC(wid_verifier_builder_set_leeway_secs(NULL, -1), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_key_wait_ms(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_max_token_bytes(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_require_exp(NULL, 9), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_cache_entries(NULL, 1), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_issuer(NULL, NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_require_proof(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_max_proof_lifetime_secs(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_proof_replay_capacity(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_build(NULL, &v), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_build(b, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(v == SENTINEL_V);

    /* The builder kept the valid configuration: no leeway, exp and the
     * issuer required, a 4096-byte cap, a cache. */
    v = vbuild(b);
    CHECK_OK(verify_at(v, &token, NOW));
    CHECK_RC(verify_at(v, &token, NOW + TTL), WID_RESULT_EXPIRED);
    CHECK_RC(verify_at(v, &other, NOW), WID_RESULT_ISSUER_MISMATCH);
    long_token = malloc(4097);
    if (long_token == NULL) abort();
    memset(long_token, 'A', 4097);
    CHECK_RC(wid_verify(v, long_token, 4097, NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    CHECK(strstr(last_error(), "4096") != NULL);
    CHECK_OK(verify_at(v, &token, NOW)); /* a cache hit */
    CHECK_OK(wid_verifier_stats(v, &out));
    CHECK(bytes_contain(&out, "\"cache_hits\":1"));
    CHECK(bytes_contain(&out, "\"cache_entries\":1"));
    wid_bytes_free(&out);

    /* (NULL, 0) clears the issuer; the builder is not consumed, and
     * verifiers already built keep their settings. */
    CHECK_OK(wid_verifier_builder_set_issuer(b, NULL, 0));
    v2 = vbuild(b);
    CHECK_OK(verify_at(v2, &other, NOW));
    CHECK_RC(verify_at(v, &other, NOW), WID_RESULT_ISSUER_MISMATCH);

    /* Wrong handle types: detected, outputs untouched, frees ignored. */
    out = sentinel_bytes();
    {
        wid_verifier_builder *kr_as_b = (wid_verifier_builder *)(void *)kr;
        wid_verifier_builder *v_as_b = (wid_verifier_builder *)(void *)v;
        const wid_verifier *b_as_v = (const wid_verifier *)(const void *)b;
        const wid_keyring *v_as_kr = (const wid_keyring *)(const void *)v;
        const wid_keyring *b_as_kr = (const wid_keyring *)(const void *)b;
        wid_verifier *v_out = SENTINEL_V;
        wid_verifier_builder *b_out = SENTINEL_VB;
        wid_verifier_builder *wrong[2];
        size_t i;
        wrong[0] = kr_as_b;
        wrong[1] = v_as_b;
        for (i = 0; i < 2; i++) {
            CHECK_RC(wid_verifier_builder_set_leeway_secs(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_key_wait_ms(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_max_token_bytes(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_require_exp(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_cache_entries(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_issuer(wrong[i], NULL, 0),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_require_proof(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_max_proof_lifetime_secs(wrong[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_set_proof_replay_capacity(wrong[i], 16),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_verifier_builder_build(wrong[i], &v_out), WID_RESULT_INVALID_ARGUMENT);
            wid_verifier_builder_free(wrong[i]);
        }
        CHECK(v_out == SENTINEL_V);
        CHECK_RC(wid_verifier_builder_new(v_as_kr, lookup, &ctx, S(AUD), &b_out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_verifier_builder_new(b_as_kr, lookup, &ctx, S(AUD), &b_out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(b_out == SENTINEL_VB);
        CHECK_RC(wid_verify(b_as_v, (const char *)token.data, token.len, NOW, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        wid_verifier_free(b_as_v);
        wid_keyring_free(b_as_kr);
    }

    /* Verifiers outlive the builder and the keyring handle. */
    wid_verifier_builder_free(b);
    wid_keyring_free(kr);
    CHECK_OK(verify_at(v2, &token, NOW));
    CHECK_OK(verify_at(v, &token, NOW));

    free(long_token);
    free(long_str);
    wid_bytes_free(&token);
    wid_bytes_free(&other);
    wid_verifier_free(v);
    wid_verifier_free(v2);
}

/* The defaults (60 s leeway, bearer tokens), the key wait, and the proof
 * options: require proof, the proof lifetime and the replay capacity. */
static void test_verifier_builder_options(void) {
    wid_keyring *kr = keyring_for_wits(31);
    struct lookup_ctx ctx;
    wid_verifier_builder *b;
    wid_verifier *v, *vp, *vd;
    wid_bytes bearer = {NULL, 0}, wit = {NULL, 0}, wpt_long, wpt_short, wpt_next;
    wid_bytes out = sentinel_bytes();
    wid_workload_key *key = NULL;
    struct proof_request req;
    wid_keyring *foreign = keyring_with_key("vbuilder-foreign", 32);
    wid_bytes foreign_token = issue(foreign, NOW);

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    CHECK_OK(wid_issue_alg(kr, WID_ALG_EDDSA, wid_sample_request, wid_sample_request_len, NULL,
                           0, NOW, &bearer));
    CHECK_OK(wid_workload_key_generate(WID_ALG_ES256, &key));
    proof_request_for(key, &req);
    CHECK_OK(wid_issue_wit(kr, WID_ALG_EDDSA, req.buf, req.len, S(WIT_ISS), S(TD), NOW, &wit));

    /* The defaults. */
    b = vbuilder_for(kr, &ctx);
    CHECK_OK(wid_verifier_builder_set_key_wait_ms(b, 30));
    vd = vbuild(b);
    CHECK_OK(verify_at(vd, &bearer, NOW + TTL + 59));
    CHECK_RC(verify_at(vd, &bearer, NOW + TTL + 60), WID_RESULT_EXPIRED);
    CHECK_RC(verify_at(vd, &foreign_token, NOW), WID_RESULT_UNKNOWN_KEY);
    CHECK_OK(wid_verifier_stats(vd, &out));
    CHECK(bytes_contain(&out, "\"key_waits\":1"));
    wid_bytes_free(&out);

    /* Proof required, 30 s at most, 16 entries (so one per workload key). */
    CHECK_OK(wid_verifier_builder_set_require_proof(b, 1));
    CHECK_OK(wid_verifier_builder_set_max_proof_lifetime_secs(b, 30));
    CHECK_OK(wid_verifier_builder_set_proof_replay_capacity(b, 16));
    vp = vbuild(b);
    out = sentinel_bytes();
    CHECK_RC(wid_verify(vp, (const char *)bearer.data, bearer.len, NOW, &out),
             WID_RESULT_PROOF_REQUIRED);
    CHECK(is_sentinel(&out));
    wpt_long = prove(key, &wit, TARGET, NULL, 200, NOW); /* past 30 s and the leeway */
    CHECK_RC(verify_proof(vp, &wit, &wpt_long, TARGET, NULL, NULL), WID_RESULT_PROOF_INVALID);
    wpt_short = prove(key, &wit, TARGET, NULL, 20, NOW);
    CHECK_OK(verify_proof(vp, &wit, &wpt_short, TARGET, NULL, NULL));
    wpt_next = prove(key, &wit, TARGET, NULL, 20, NOW);
    CHECK_RC(verify_proof(vp, &wit, &wpt_next, TARGET, NULL, NULL), WID_RESULT_PROOF_REPLAYED);

    /* The verifier built before those settings keeps its own. */
    CHECK_OK(verify_at(vd, &bearer, NOW));
    CHECK_OK(verify_proof(vd, &wit, &wpt_long, TARGET, NULL, NULL));
    CHECK_OK(verify_proof(vd, &wit, &wpt_next, TARGET, NULL, NULL));

    /* Set back: bearer tokens again. */
    CHECK_OK(wid_verifier_builder_set_require_proof(b, 0));
    v = vbuild(b);
    CHECK_OK(verify_at(v, &bearer, NOW));

    wid_bytes_free(&wpt_long);
    wid_bytes_free(&wpt_short);
    wid_bytes_free(&wpt_next);
    wid_bytes_free(&wit);
    wid_bytes_free(&bearer);
    wid_bytes_free(&foreign_token);
    wid_workload_key_free(key);
    wid_verifier_free(v);
    wid_verifier_free(vp);
    wid_verifier_free(vd);
    wid_verifier_builder_free(b);
    wid_keyring_free(foreign);
    wid_keyring_free(kr);
}

/* wid_explain and wid_verifier_stats. */
static void test_explain_and_stats(void) {
    wid_keyring *kr = keyring_with_key("explain", 33);
    struct lookup_ctx ctx, missing;
    wid_verifier_builder *b;
    wid_verifier *v, *vm;
    wid_bytes token = issue(kr, NOW);
    wid_bytes out = sentinel_bytes();
    const char *steps[] = {"length", "structure", "key",      "algorithm", "signature",
                           "claims", "times",     "audience", "issuer",    "allocation"};
    size_t i;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    ctx_init(&missing, WID_ALLOC_MISSING, WID_ALLOC_MISSING);
    b = vbuilder_for(kr, &ctx);
    v = vbuild(b);
    {
        wid_verifier_builder *bm = vbuilder_for(kr, &missing);
        vm = vbuild(bm);
        wid_verifier_builder_free(bm);
    }

    /* Accepted: every step passed, in order. */
    CHECK_OK(wid_explain(v, (const char *)token.data, token.len, NOW, &out));
    CHECK(out.data != NULL && out.data[out.len] == '\0');
    CHECK(bytes_contain(&out, "\"accepted\":true"));
    CHECK(bytes_contain(&out, "\"code\":null"));
    CHECK(bytes_contain(&out, "\"result\":0"));
    CHECK(!bytes_contain(&out, "\"passed\":false"));
    {
        const char *at = (const char *)out.data;
        for (i = 0; i < sizeof steps / sizeof steps[0]; i++) {
            char want[64];
            snprintf(want, sizeof want, "\"name\":\"%s\",\"passed\":true", steps[i]);
            at = at == NULL ? NULL : strstr(at, want);
            CHECK(at != NULL);
        }
    }
    wid_bytes_free(&out);

    /* Expired: the times step failed and ended it. */
    CHECK_OK(wid_explain(v, (const char *)token.data, token.len, NOW + 2 * TTL, &out));
    CHECK(bytes_contain(&out, "\"accepted\":false"));
    CHECK(bytes_contain(&out, "\"code\":\"WID_RESULT_EXPIRED\""));
    CHECK(bytes_contain(&out, "\"result\":14"));
    CHECK(bytes_contain(&out, "\"name\":\"times\",\"passed\":false"));
    CHECK(!bytes_contain(&out, "\"name\":\"audience\""));
    wid_bytes_free(&out);

    /* A missing allocation: the last step. */
    CHECK_OK(wid_explain(vm, (const char *)token.data, token.len, NOW, &out));
    CHECK(bytes_contain(&out, "\"code\":\"WID_RESULT_ALLOCATION_NOT_FOUND\""));
    CHECK(bytes_contain(&out, "\"name\":\"allocation\",\"passed\":false"));
    wid_bytes_free(&out);

    /* Garbage is explained, not an error; so is (NULL, 0). */
    CHECK_OK(wid_explain(v, S("not.a.token"), NOW, &out));
    CHECK(bytes_contain(&out, "\"code\":\"WID_RESULT_MALFORMED_TOKEN\""));
    CHECK(bytes_contain(&out, "\"name\":\"structure\",\"passed\":false"));
    wid_bytes_free(&out);
    CHECK_OK(wid_explain(v, NULL, 0, NOW, &out));
    CHECK(bytes_contain(&out, "\"accepted\":false"));
    wid_bytes_free(&out);

    /* A length over the cap: the length step alone, nothing read (valgrind
     * would see a read past the 3-byte buffer). */
    CHECK_OK(wid_explain(v, "abc", SIZE_MAX, NOW, &out));
    CHECK(bytes_contain(&out, "\"code\":\"WID_RESULT_MALFORMED_TOKEN\""));
    CHECK(bytes_contain(&out, "\"name\":\"length\",\"passed\":false"));
    CHECK(bytes_contain(&out, "8192"));
    CHECK(!bytes_contain(&out, "\"structure\""));
    wid_bytes_free(&out);
    CHECK_OK(wid_explain(v, "abc", 8193, NOW, &out));
    CHECK(bytes_contain(&out, "\"name\":\"length\",\"passed\":false"));
    wid_bytes_free(&out);

    /* Explain counts neither verdict nor cache. */
    CHECK_OK(wid_verifier_stats(v, &out));
    CHECK(bytes_contain(&out, "\"accepted\":0"));
    CHECK(bytes_contain(&out, "\"rejected\":0"));
    wid_bytes_free(&out);

    /* Failures write nothing. */
    out = sentinel_bytes();
    CHECK_RC(wid_explain(v, S(BAD_UTF8), NOW, &out), WID_RESULT_MALFORMED_TOKEN);
    CHECK(strstr(last_error(), "UTF-8") != NULL);
    CHECK_RC(wid_explain(NULL, (const char *)token.data, token.len, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_explain(v, NULL, 5, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_explain(v, (const char *)token.data, token.len, NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_explain((const wid_verifier *)(const void *)kr, (const char *)token.data,
                         token.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_explain((const wid_verifier *)(const void *)b, (const char *)token.data,
                         token.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* Stats: what verification did. */
    CHECK_OK(verify_at(v, &token, NOW));
    CHECK_OK(verify_at(v, &token, NOW));
    CHECK_RC(wid_verify(v, S("x.y.z"), NOW, NULL), WID_RESULT_MALFORMED_TOKEN);
    out = empty_bytes();
    CHECK_OK(wid_verifier_stats(v, &out));
    CHECK(bytes_eq(&out, "{\"accepted\":2,\"cache_entries\":0,\"cache_hits\":0,"
                         "\"consistent_fallbacks\":0,\"key_waits\":0,\"rejected\":1}"));
    wid_bytes_free(&out);
    CHECK_RC(verify_at(vm, &token, NOW), WID_RESULT_ALLOCATION_NOT_FOUND);
    CHECK_OK(wid_verifier_stats(vm, &out));
    /* Two: the explanation's consistent read counts too. */
    CHECK(bytes_contain(&out, "\"consistent_fallbacks\":2"));
    CHECK(bytes_contain(&out, "\"rejected\":1"));
    wid_bytes_free(&out);
    out = sentinel_bytes();
    CHECK_RC(wid_verifier_stats(NULL, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_stats(v, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_stats((const wid_verifier *)(const void *)kr, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_stats((const wid_verifier *)(const void *)b, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));

    /* The older constructors' verifiers explain and count too. */
    {
        wid_verifier *old = verifier_for(kr, &ctx);
        wid_bytes o = {NULL, 0};
        CHECK_OK(wid_explain(old, (const char *)token.data, token.len, NOW, &o));
        CHECK(bytes_contain(&o, "\"accepted\":true"));
        wid_bytes_free(&o);
        CHECK_OK(verify_at(old, &token, NOW));
        CHECK_OK(wid_verifier_stats(old, &o));
        CHECK(bytes_contain(&o, "\"accepted\":1"));
        wid_bytes_free(&o);
        wid_verifier_free(old);
    }

    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_verifier_free(vm);
    wid_verifier_builder_free(b);
    wid_keyring_free(kr);
}

/* ------------------------------------------------------------------------ */
/* Remote JWKS, against an HTTP server on loopback                          */
/* ------------------------------------------------------------------------ */

#define SENTINEL_RB ((wid_remote_jwks_builder *)(uintptr_t)0x70)
#define SENTINEL_RJ ((wid_remote_jwks *)(uintptr_t)0x80)
#define JWKS_PATH "/jwks.json"
#define OIDC_PATH "/.well-known/openid-configuration"

/* A one-request-per-connection HTTP/1.1 server on 127.0.0.1, answering
 * JWKS_PATH and OIDC_PATH with what the test sets, counting requests. */
struct http_server {
    int fd;
    int port;
    char base[64];
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;
    int jwks_status;
    char *jwks_body;
    char *oidc_body;
    unsigned long jwks_hits, oidc_hits;
};

static char *dup_str(const char *s) {
    char *d = malloc(strlen(s) + 1);
    if (d == NULL) abort();
    strcpy(d, s);
    return d;
}

static void server_set_jwks(struct http_server *s, int status, const char *body) {
    pthread_mutex_lock(&s->mu);
    free(s->jwks_body);
    s->jwks_body = dup_str(body);
    s->jwks_status = status;
    pthread_mutex_unlock(&s->mu);
}

static void server_set_oidc(struct http_server *s, const char *body) {
    pthread_mutex_lock(&s->mu);
    free(s->oidc_body);
    s->oidc_body = dup_str(body);
    pthread_mutex_unlock(&s->mu);
}

static unsigned long server_jwks_hits(struct http_server *s) {
    unsigned long n;
    pthread_mutex_lock(&s->mu);
    n = s->jwks_hits;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void server_answer(struct http_server *s, int conn) {
    char req[4096];
    size_t got = 0;
    char path[256] = "";
    char head[256];
    char *body = NULL;
    int status = 404;
    while (got < sizeof req - 1) {
        ssize_t n = read(conn, req + got, sizeof req - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL) break;
    }
    req[got] = '\0';
    if (sscanf(req, "%*s %255s", path) != 1) path[0] = '\0';
    if (strchr(path, '?') != NULL) *strchr(path, '?') = '\0';
    pthread_mutex_lock(&s->mu);
    if (strcmp(path, JWKS_PATH) == 0 && s->jwks_body != NULL) {
        s->jwks_hits++;
        status = s->jwks_status;
        body = dup_str(s->jwks_body);
    } else if (strcmp(path, OIDC_PATH) == 0 && s->oidc_body != NULL) {
        s->oidc_hits++;
        status = 200;
        body = dup_str(s->oidc_body);
    }
    pthread_mutex_unlock(&s->mu);
    if (body == NULL) body = dup_str("{}");
    snprintf(head, sizeof head,
             "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n",
             status, strlen(body));
    write_all(conn, head, strlen(head));
    write_all(conn, body, strlen(body));
    free(body);
}

static void *server_loop(void *p) {
    struct http_server *s = p;
    for (;;) {
        int stop, conn = accept(s->fd, NULL, NULL);
        pthread_mutex_lock(&s->mu);
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (conn >= 0) {
            if (!stop) server_answer(s, conn);
            close(conn);
        }
        if (stop) return NULL;
    }
}

static int server_start(struct http_server *s) {
    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->jwks_status = 200;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0) return 0;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (bind(s->fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s->fd, 16) != 0 ||
        getsockname(s->fd, (struct sockaddr *)&addr, &len) != 0) {
        close(s->fd);
        return 0;
    }
    s->port = ntohs(addr.sin_port);
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", s->port);
    if (pthread_create(&s->thread, NULL, server_loop, s) != 0) {
        close(s->fd);
        return 0;
    }
    return 1;
}

static void server_stop(struct http_server *s) {
    struct sockaddr_in addr;
    int c;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    /* Wake the accept. */
    c = socket(AF_INET, SOCK_STREAM, 0);
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((uint16_t)s->port);
    if (c >= 0) {
        if (connect(c, (struct sockaddr *)&addr, sizeof addr) != 0) { /* already gone */
        }
        close(c);
    }
    pthread_join(s->thread, NULL);
    close(s->fd);
    free(s->jwks_body);
    free(s->oidc_body);
    pthread_mutex_destroy(&s->mu);
}

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static wid_bytes jwks_of(const wid_keyring *kr) {
    wid_bytes j = {NULL, 0};
    CHECK_OK(wid_keyring_jwks(kr, &j));
    return j;
}

static void serve_jwks_of(struct http_server *s, const wid_keyring *kr) {
    wid_bytes j = jwks_of(kr);
    server_set_jwks(s, 200, j.data == NULL ? "{}" : (const char *)j.data);
    wid_bytes_free(&j);
}

static wid_remote_jwks_builder *remote_builder(const char *url) {
    wid_remote_jwks_builder *b = NULL;
    CHECK_OK(wid_remote_jwks_builder_new(S(url), &b));
    CHECK(b != NULL);
    CHECK_OK(wid_remote_jwks_builder_set_allow_http_loopback(b, 1));
    return b;
}

static wid_remote_jwks *remote_build(const wid_remote_jwks_builder *b) {
    wid_remote_jwks *r = NULL;
    CHECK_OK(wid_remote_jwks_builder_build(b, &r));
    CHECK(r != NULL);
    return r;
}

/* A library built without the cargo feature: every function refuses. */
static void check_remote_jwks_disabled(void) {
    wid_remote_jwks_builder *b = SENTINEL_RB;
    wid_remote_jwks *r = SENTINEL_RJ;
    wid_keyring *kr = SENTINEL_KR;
    wid_bytes out = sentinel_bytes();
    printf("c tests: the library was built without `remote-jwks`: checking its refusals only\n");
    CHECK_RC(wid_remote_jwks_builder_new_discover(S("https://issuer.example.com"), &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "remote-jwks") != NULL);
    CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(SENTINEL_RB, NULL, 0),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_allow_http_loopback(SENTINEL_RB, 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_timeout_ms(SENTINEL_RB, 1), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_refresh_bounds_ms(SENTINEL_RB, 1, 2),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_default_refresh_ms(SENTINEL_RB, 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(SENTINEL_RB, 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_body_bytes(SENTINEL_RB, 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_keys(SENTINEL_RB, 1), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_build(SENTINEL_RB, &r), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_keyring(SENTINEL_RJ, &kr), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_refresh(SENTINEL_RJ, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_start_refresher(SENTINEL_RJ), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_stats(SENTINEL_RJ, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(b == SENTINEL_RB && r == SENTINEL_RJ && kr == SENTINEL_KR && is_sentinel(&out));
}

/* Every builder setter's checks, NULLs and wrong handles. */
static void test_remote_jwks_arguments(void) {
    wid_remote_jwks_builder *b = SENTINEL_RB;
    wid_remote_jwks *r = SENTINEL_RJ, *r2;
    wid_keyring *kr_out = SENTINEL_KR;
    wid_keyring *kr = keyring_with_key("remote-args", 34);
    wid_bytes out = sentinel_bytes();
    const char *bad_urls[] = {"ftp://example.com/jwks",       "http://example.com/jwks",
                              "https://example.com/jwks#frag", "https://u:p@example.com/jwks",
                              "https://example.com/j wks",     "/jwks"};
    size_t i;
    FILE *f;
    char pem[8192];
    size_t pem_len = 0;
    wid_result rc;

    rc = wid_remote_jwks_builder_new(S("https://example.com/jwks"), &b);
    if (rc != WID_RESULT_OK) {
        /* Refused: only a build without the feature may do that. */
        CHECK_RC(rc, WID_RESULT_INVALID_ARGUMENT);
        CHECK(strstr(last_error(), "`remote-jwks`") != NULL);
        CHECK(b == SENTINEL_RB);
        check_remote_jwks_disabled();
        wid_keyring_free(kr);
        return;
    }
    wid_remote_jwks_builder_free(b);
    b = SENTINEL_RB;

    /* wid_remote_jwks_builder_new and _new_discover */
    for (i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++)
        CHECK_RC(wid_remote_jwks_builder_new(S(bad_urls[i]), &b), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new(NULL, 0, &b), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new(S("http://example.com/j?secret=1"), &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "secret") == NULL); /* a query may carry one */
    CHECK_RC(wid_remote_jwks_builder_new_discover(S("https://issuer.example.com?x=1"), &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new(NULL, 5, &b), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new(S(BAD_UTF8), &b), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new("x", SIZE_MAX, &b), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new(S("https://example.com/jwks"), NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_new_discover(NULL, 5, &b), WID_RESULT_NULL_ARGUMENT);
    CHECK(b == SENTINEL_RB);

    /* Loopback http passes new, and build only once allowed. */
    CHECK_OK(wid_remote_jwks_builder_new(S("http://127.0.0.1:9/jwks.json"), &b));
    CHECK_RC(wid_remote_jwks_builder_build(b, &r), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "http") != NULL);
    CHECK(r == SENTINEL_RJ);

    /* A valid configuration, then every refusal. */
    CHECK_OK(wid_remote_jwks_builder_set_allow_http_loopback(b, 1));
    CHECK_OK(wid_remote_jwks_builder_set_timeout_ms(b, 2000));
    CHECK_OK(wid_remote_jwks_builder_set_refresh_bounds_ms(b, 1000, 2000));
    CHECK_OK(wid_remote_jwks_builder_set_default_refresh_ms(b, 1500));
    CHECK_OK(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(b, 0));
    CHECK_OK(wid_remote_jwks_builder_set_max_body_bytes(b, 65536));
    CHECK_OK(wid_remote_jwks_builder_set_max_keys(b, 3));
    CHECK_RC(wid_remote_jwks_builder_set_allow_http_loopback(b, 2), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_timeout_ms(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_timeout_ms(b, 604800001), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_refresh_bounds_ms(b, 10, 5),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_refresh_bounds_ms(b, 0, UINT64_MAX),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_default_refresh_ms(b, UINT64_MAX),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(b, UINT64_MAX),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_body_bytes(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_body_bytes(b, (16u << 20) + 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_keys(b, 0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(b, (const uint8_t *)"not pem", 7),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "ca_bundle_pem") != NULL);
    CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(b, NULL, 3), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(b, (const uint8_t *)"x", SIZE_MAX),
             WID_RESULT_INVALID_ARGUMENT);
    /* A real bundle (the repository's test CA), then (NULL, 0): Mozilla's. */
    f = fopen("tests/vectors/tls/ca.pem", "rb");
    if (f != NULL) {
        pem_len = fread(pem, 1, sizeof pem, f);
        fclose(f);
        CHECK_OK(wid_remote_jwks_builder_set_ca_bundle_pem(b, (const uint8_t *)pem, pem_len));
    }
    CHECK_OK(wid_remote_jwks_builder_set_ca_bundle_pem(b, NULL, 0));

    /* NULL builders. */
    CHECK_RC(wid_remote_jwks_builder_set_allow_http_loopback(NULL, 5), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_timeout_ms(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_refresh_bounds_ms(NULL, 5, 1), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_default_refresh_ms(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(NULL, 0),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_body_bytes(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_max_keys(NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(NULL, NULL, 0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_build(NULL, &r), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_builder_build(b, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(r == SENTINEL_RJ);

    /* The builder kept loopback allowed: it builds, twice. */
    r = remote_build(b);
    r2 = remote_build(b);

    /* The source's functions: NULLs, and a failed fetch (nothing listens on
     * port 9) leaves the output untouched. */
    CHECK_RC(wid_remote_jwks_keyring(NULL, &kr_out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_keyring(r, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_refresh(NULL, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_start_refresher(NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_stats(NULL, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_stats(r, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_remote_jwks_refresh(r, &out), WID_RESULT_IO_ERROR);
    CHECK(is_sentinel(&out));
    CHECK(kr_out == SENTINEL_KR);

    /* Wrong handle types. */
    {
        wid_remote_jwks_builder *wrong_b[2];
        const wid_remote_jwks *wrong_r[2];
        wid_remote_jwks *r_out = SENTINEL_RJ;
        wrong_b[0] = (wid_remote_jwks_builder *)(void *)r;
        wrong_b[1] = (wid_remote_jwks_builder *)(void *)kr;
        wrong_r[0] = (const wid_remote_jwks *)(const void *)b;
        wrong_r[1] = (const wid_remote_jwks *)(const void *)kr;
        for (i = 0; i < 2; i++) {
            CHECK_RC(wid_remote_jwks_builder_set_ca_bundle_pem(wrong_b[i], NULL, 0),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_allow_http_loopback(wrong_b[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_timeout_ms(wrong_b[i], 10),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_refresh_bounds_ms(wrong_b[i], 1, 2),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_default_refresh_ms(wrong_b[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(wrong_b[i], 1),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_max_body_bytes(wrong_b[i], 10),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_set_max_keys(wrong_b[i], 10),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_builder_build(wrong_b[i], &r_out),
                     WID_RESULT_INVALID_ARGUMENT);
            wid_remote_jwks_builder_free(wrong_b[i]);
            CHECK_RC(wid_remote_jwks_keyring(wrong_r[i], &kr_out), WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_refresh(wrong_r[i], &out), WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_start_refresher(wrong_r[i]), WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_remote_jwks_stats(wrong_r[i], &out), WID_RESULT_INVALID_ARGUMENT);
            wid_remote_jwks_free(wrong_r[i]);
        }
        /* A source is not a keyring. */
        CHECK_RC(wid_keyring_jwks((const wid_keyring *)(const void *)r, &out),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(is_sentinel(&out));
        CHECK(kr_out == SENTINEL_KR);
        CHECK(r_out == SENTINEL_RJ);
    }
    /* Everything still works after the wrong frees. */
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, "\"failures\":1"));
    wid_bytes_free(&out);

    wid_remote_jwks_free(r);
    wid_remote_jwks_free(r2);
    wid_remote_jwks_builder_free(b);
    wid_keyring_free(kr);
}

/* Verification through a remote keyring: refresh, rotation through an
 * unknown kid, the last good set kept on failure, discovery, stats, the
 * refresher stopping with the handle. */
static void test_remote_jwks_flows(void) {
    struct http_server server;
    struct lookup_ctx ctx;
    char url[128], oidc[512];
    wid_keyring *issuer = keyring_with_key("remote-1", 35);
    wid_remote_jwks_builder *b;
    wid_remote_jwks *r;
    wid_keyring *rkr = NULL;
    wid_verifier_builder *vb;
    wid_verifier *v;
    wid_bytes token, rotated, out = {NULL, 0};
    wid_bytes kid = {NULL, 0};
    unsigned long hits;
    int waited;

    {
        /* Only with the feature (test_remote_jwks_arguments checked both). */
        wid_remote_jwks_builder *probe = NULL;
        if (wid_remote_jwks_builder_new(S("https://example.com/jwks"), &probe) !=
            WID_RESULT_OK) {
            wid_keyring_free(issuer);
            return;
        }
        wid_remote_jwks_builder_free(probe);
    }
    if (!server_start(&server)) {
        CHECK(!"could not start the loopback server");
        wid_keyring_free(issuer);
        return;
    }
    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    snprintf(url, sizeof url, "%s" JWKS_PATH, server.base);
    serve_jwks_of(&server, issuer);

    b = remote_builder(url);
    CHECK_OK(wid_remote_jwks_builder_set_unknown_kid_cooldown_ms(b, 0));
    r = remote_build(b);
    CHECK_OK(wid_remote_jwks_keyring(r, &rkr));
    CHECK(rkr != NULL);
    /* Generous: under valgrind the fetch thread is slow. */
    vb = vbuilder_for(rkr, &ctx);
    CHECK_OK(wid_verifier_builder_set_key_wait_ms(vb, 20000));
    v = vbuild(vb);

    /* Nothing fetched yet. */
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, "\"fetches\":0"));
    CHECK(bytes_contain(&out, "\"keys\":0"));
    wid_bytes_free(&out);

    /* Refresh: the report. */
    CHECK_OK(wid_remote_jwks_refresh(r, &out));
    CHECK(out.data != NULL && out.data[out.len] == '\0');
    CHECK(bytes_contain(&out, "\"keys\":[\"remote-1\"]"));
    CHECK(bytes_contain(&out, "\"added\":[\"remote-1\"]"));
    CHECK(bytes_contain(&out, "\"removed\":[]"));
    CHECK(bytes_contain(&out, "\"max_age_ms\":null"));
    CHECK(bytes_contain(&out, "\"next_refresh_in_ms\":3600000"));
    CHECK(bytes_contain(&out, url));
    wid_bytes_free(&out);
    CHECK_OK(wid_remote_jwks_refresh(r, NULL)); /* the report may be NULL */
    CHECK(server_jwks_hits(&server) == 2);

    token = issue(issuer, NOW);
    CHECK_OK(verify_at(v, &token, NOW));

    /* A rotation: the unknown kid starts a fetch while the verifier waits. */
    CHECK_OK(wid_keyring_rotate(issuer, NOW + 1, &kid));
    serve_jwks_of(&server, issuer);
    rotated = issue(issuer, NOW);
    CHECK_OK(verify_at(v, &rotated, NOW));
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, "\"unknown_kid_fetches\":1"));
    CHECK(bytes_contain(&out, "\"keys\":2"));
    CHECK(bytes_contain(&out, "\"stale\":false"));
    wid_bytes_free(&out);

    /* A failure keeps the last good set. */
    server_set_jwks(&server, 500, "{}");
    out = sentinel_bytes();
    CHECK_RC(wid_remote_jwks_refresh(r, &out), WID_RESULT_IO_ERROR);
    CHECK(strstr(last_error(), "500") != NULL);
    CHECK(is_sentinel(&out));
    out = empty_bytes();
    server_set_jwks(&server, 200, "not json");
    CHECK_RC(wid_remote_jwks_refresh(r, NULL), WID_RESULT_DECODE_ERROR);
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, "\"failures\":2"));
    CHECK(bytes_contain(&out, "\"stale\":true"));
    CHECK(bytes_contain(&out, "\"keys\":2"));
    wid_bytes_free(&out);
    CHECK_OK(verify_at(v, &token, NOW));
    CHECK_OK(verify_at(v, &rotated, NOW));

    /* The keyring outlives the source, no longer refreshed. */
    wid_remote_jwks_free(r);
    wid_remote_jwks_builder_free(b);
    CHECK_OK(verify_at(v, &rotated, NOW));
    wid_verifier_free(v);
    wid_verifier_builder_free(vb);
    wid_keyring_free(rkr);

    /* Discovery. */
    serve_jwks_of(&server, issuer);
    snprintf(oidc, sizeof oidc, "{\"issuer\":\"%s\",\"jwks_uri\":\"%s\"}", server.base, url);
    server_set_oidc(&server, oidc);
    b = NULL;
    CHECK_OK(wid_remote_jwks_builder_new_discover(S(server.base), &b));
    CHECK_OK(wid_remote_jwks_builder_set_allow_http_loopback(b, 1));
    r = remote_build(b);
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, "\"jwks_uri\":null"));
    wid_bytes_free(&out);
    CHECK_OK(wid_remote_jwks_refresh(r, &out));
    CHECK(bytes_contain(&out, "\"keys\":[\"remote-1\""));
    wid_bytes_free(&out);
    CHECK_OK(wid_remote_jwks_stats(r, &out));
    CHECK(bytes_contain(&out, url));
    wid_bytes_free(&out);
    rkr = NULL;
    CHECK_OK(wid_remote_jwks_keyring(r, &rkr));
    vb = vbuilder_for(rkr, &ctx);
    v = vbuild(vb);
    CHECK_OK(verify_at(v, &rotated, NOW));
    wid_verifier_free(v);
    wid_verifier_builder_free(vb);
    wid_keyring_free(rkr);
    wid_remote_jwks_free(r);
    wid_remote_jwks_builder_free(b);

    /* The refresher: refetches until the handle is freed. */
    b = remote_builder(url);
    CHECK_OK(wid_remote_jwks_builder_set_refresh_bounds_ms(b, 20, 50));
    CHECK_OK(wid_remote_jwks_builder_set_default_refresh_ms(b, 20));
    r = remote_build(b);
    hits = server_jwks_hits(&server);
    CHECK_OK(wid_remote_jwks_start_refresher(r));
    CHECK_OK(wid_remote_jwks_start_refresher(r)); /* running: nothing more */
    for (waited = 0; server_jwks_hits(&server) < hits + 3 && waited < 30000; waited += 10)
        sleep_ms(10);
    CHECK(server_jwks_hits(&server) >= hits + 3);
    wid_remote_jwks_free(r); /* stops and joins the refresher */
    hits = server_jwks_hits(&server);
    sleep_ms(300);
    CHECK(server_jwks_hits(&server) == hits);
    wid_remote_jwks_builder_free(b);

    wid_bytes_free(&kid);
    wid_bytes_free(&token);
    wid_bytes_free(&rotated);
    wid_keyring_free(issuer);
    server_stop(&server);
}

/* ------------------------------------------------------------------------ */
/* Node identities                                                          */
/* ------------------------------------------------------------------------ */

#define NODE_ID "da86421c-7de9-85e4-2f50-3b2bf95102c1"
#define NODE_AUD "nomadproject.io"
#define NODE_SUB "node:global:default:" NODE_ID ":default"

/* The node of the node tests: Nomad's defaults for audience and TTL. */
static void node_fields(wid_node_request_fields *n) {
    memset(n, 0, sizeof *n);
    n->region = "global";
    n->node_id = NODE_ID;
    n->node_name = "client-1";
    n->node_datacenter = "dc1";
    n->node_class = "gpu";
    n->node_pool = "default";
    n->node_status = "ready";
}

static void encode_node(const wid_node_request_fields *n, struct encoded *e) {
    e->len = wid_encode_node_identity_request(n, e->buf, sizeof e->buf);
    CHECK(e->len > 0);
}

/* A lookup table for node `id` (the allocation lookup serves as the node
 * lookup: both have wid_node_lookup_fn's shape, and MISSING is 0 in both). */
static void node_ctx_init(struct lookup_ctx *c, uint32_t stale, uint32_t consistent) {
    ctx_init(c, stale, consistent);
    c->alloc_id = NODE_ID;
}

/* A verifier for `aud` accepting `mode`, with `nodes` as its node lookup
 * (NULL: none). */
static wid_verifier *node_verifier_for(const wid_keyring *kr, const char *aud, uint32_t mode,
                                       struct lookup_ctx *allocs, struct lookup_ctx *nodes) {
    wid_verifier_builder *b = NULL;
    wid_verifier *v;
    CHECK_OK(wid_verifier_builder_new(kr, lookup, allocs, S(aud), &b));
    CHECK_OK(wid_verifier_builder_set_key_wait_ms(b, 0));
    CHECK_OK(wid_verifier_builder_set_node_tokens(b, mode));
    if (nodes != NULL) CHECK_OK(wid_verifier_builder_set_node_lookup(b, lookup, nodes));
    v = vbuild(b);
    wid_verifier_builder_free(b);
    return v;
}

static wid_bytes issue_node_token(const wid_keyring *kr, wid_alg alg,
                                  const wid_node_request_fields *n, const char *iss) {
    struct encoded e;
    wid_bytes t = {NULL, 0};
    encode_node(n, &e);
    CHECK_OK(wid_issue_node(kr, alg, e.buf, e.len, iss, iss ? strlen(iss) : 0, NOW, &t));
    return t;
}

/* wid_encode_node_identity_request: Go's key order, fields as given,
 * overflow. */
static void test_node_request_encoder(void) {
    wid_node_request_fields n;
    struct encoded e;
    uint8_t small[64];
    const char *auds[] = {"consul.io"};
    size_t full;

    node_fields(&n);
    encode_node(&n, &e);
    full = e.len;
    /* A map of 4: Audience (empty), Node (a map of 6), Region, TTL. */
    CHECK(e.buf[0] == 0x84);
    CHECK(mem_contains_n(e.buf, e.len, "\xa8" "Audience\x90\xa4Node\x86\xaa" "Datacenter", 27));
    CHECK(mem_contains(e.buf, e.len, "\xa6Region\xa6global\xa3TTL\xd3"));
    CHECK(mem_contains(e.buf, e.len, "\xa6Status\xa5ready"));
    CHECK(mem_contains(e.buf, e.len, "\xa9NodeClass\xa3gpu"));
    CHECK(mem_contains_n(e.buf, e.len, "\xa2ID\xda\x00\x24" NODE_ID, 42)); /* str16, as Go */
    /* NULL strings are written as "". */
    n.node_class = NULL;
    n.node_status = NULL;
    n.audience = auds;
    n.audience_count = 1;
    n.ttl_ns = WID_TTL_SECONDS(3600);
    encode_node(&n, &e);
    CHECK(mem_contains(e.buf, e.len, "\xa9NodeClass\xa0\xa8NodePool"));
    CHECK(mem_contains_n(e.buf, e.len, "\xa6Status\xa0\xa6Region", 15));
    CHECK(mem_contains(e.buf, e.len, "\xa8" "Audience\x91\xa9" "consul.io"));
    CHECK(mem_contains_n(e.buf, e.len, "\xa3TTL\xd3\x00\x00\x03\x46\x30\xb8\xa0\x00", 13));
    /* Too small for it, exactly large enough, too many audiences. */
    node_fields(&n);
    CHECK(wid_encode_node_identity_request(&n, small, sizeof small) == 0);
    CHECK(wid_encode_node_identity_request(&n, e.buf, full - 1) == 0);
    CHECK(wid_encode_node_identity_request(&n, e.buf, full) == full);
    n.audience = auds;
    n.audience_count = 0x10000;
    CHECK(wid_encode_node_identity_request(&n, e.buf, sizeof e.buf) == 0);
}

/* wid_issue_node and wid_issuer_issue_node: NULLs, bad lengths and values,
 * invalid requests (every problem named), outputs untouched, wrong
 * handles. */
static void test_node_issue_arguments(void) {
    wid_keyring *kr = keyring_for_wits(90);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss = build(b);
    wid_node_request_fields n;
    struct encoded e, bad;
    wid_bytes out = sentinel_bytes();
    const char *empty_aud[] = {""};
    uint8_t garbage[] = {0x93, 1, 2, 3};
    uint8_t trailing[4096 + 1];

    node_fields(&n);
    encode_node(&n, &e);

    /* wid_issue_node */
    CHECK_RC(wid_issue_node(NULL, WID_ALG_EDDSA, e.buf, e.len, NULL, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, NULL, 5, NULL, 0, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, e.len, NULL, 3, NOW, &out),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, e.len, NULL, 0, NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, 0, e.buf, e.len, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "alg") != NULL);
    CHECK_RC(wid_issue_node(kr, 4, e.buf, e.len, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, SIZE_MAX, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT); /* past the cap: never read */
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, e.len, "x", SIZE_MAX, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, e.len, S(BAD_UTF8), NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "UTF-8") != NULL);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, NULL, 0, NULL, 0, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, e.buf, e.len - 1, NULL, 0, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    memcpy(trailing, e.buf, e.len);
    trailing[e.len] = 0xc0;
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, trailing, e.len + 1, NULL, 0, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, garbage, sizeof garbage, NULL, 0, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    /* Every problem named at once. */
    memset(&n, 0, sizeof n);
    n.region = "a:b";
    n.audience = empty_aud;
    n.audience_count = 1;
    n.ttl_ns = 3600; /* nanoseconds: under a second */
    encode_node(&n, &bad);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, bad.buf, bad.len, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Node.ID") != NULL);
    CHECK(strstr(last_error(), "Node.Datacenter") != NULL);
    CHECK(strstr(last_error(), "Node.NodePool") != NULL);
    CHECK(strstr(last_error(), "Region") != NULL);
    CHECK(strstr(last_error(), "Audience[0]") != NULL);
    CHECK(strstr(last_error(), "TTL") != NULL);
    node_fields(&n);
    n.node_pool = "a:b";
    encode_node(&n, &bad);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, bad.buf, bad.len, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "Node.NodePool") != NULL);
    node_fields(&n);
    n.ttl_ns = -1;
    encode_node(&n, &bad);
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, bad.buf, bad.len, NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    /* An allocation request is no node request, and the reverse. */
    CHECK_RC(wid_issue_node(kr, WID_ALG_EDDSA, wid_sample_request, wid_sample_request_len, NULL,
                            0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue(kr, e.buf, e.len, NOW, &out), WID_RESULT_INVALID_ARGUMENT);
    /* No active RS256 key. */
    CHECK_RC(wid_issue_node(kr, WID_ALG_RS256, e.buf, e.len, NULL, 0, NOW, &out),
             WID_RESULT_NO_ACTIVE_KEY);
    CHECK(is_sentinel(&out));

    /* wid_issuer_issue_node */
    CHECK_RC(wid_issuer_issue_node(NULL, e.buf, e.len, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue_node(iss, NULL, 1, NOW, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue_node(iss, e.buf, e.len, NOW, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_issuer_issue_node(iss, e.buf, SIZE_MAX, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_issue_node(iss, garbage, sizeof garbage, NOW, &out),
             WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_issuer_issue_node(iss, bad.buf, bad.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_issuer_builder_set_algorithm(b, WID_ALG_RS256));
    {
        wid_issuer *rs = build(b);
        CHECK_RC(wid_issuer_issue_node(rs, e.buf, e.len, NOW, &out), WID_RESULT_NO_ACTIVE_KEY);
        wid_issuer_free(rs);
    }
    CHECK(is_sentinel(&out));

    /* Wrong handle types. */
    CHECK_RC(wid_issuer_issue_node((const wid_issuer *)(const void *)kr, e.buf, e.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issuer_issue_node((const wid_issuer *)(const void *)b, e.buf, e.len, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_issue_node((const wid_keyring *)(const void *)iss, WID_ALG_EDDSA, e.buf, e.len,
                            NULL, 0, NOW, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));

    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    wid_keyring_free(kr);
}

/* wid_verifier_builder_set_node_tokens and _set_node_lookup: NULLs, bad
 * values (the builder unchanged), wrong handles. */
static void test_node_setter_arguments(void) {
    wid_keyring *kr = keyring_for_wits(91);
    struct lookup_ctx allocs, nodes;
    wid_verifier_builder *b;
    wid_verifier *v;
    wid_node_request_fields n;
    wid_bytes node_token, alloc_token;
    wid_issuer_builder *ib;

    ctx_init(&allocs, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    node_fields(&n);
    node_token = issue_node_token(kr, WID_ALG_EDDSA, &n, NULL);
    alloc_token = issue(kr, NOW);

    CHECK_OK(wid_verifier_builder_new(kr, lookup, &allocs, S(NODE_AUD), &b));
    CHECK_OK(wid_verifier_builder_set_key_wait_ms(b, 0));
    CHECK_OK(wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ONLY));
    CHECK_OK(wid_verifier_builder_set_node_lookup(b, lookup, &nodes));

    CHECK_RC(wid_verifier_builder_set_node_tokens(NULL, 99), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_node_lookup(NULL, NULL, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_node_lookup(NULL, lookup, &nodes), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_node_tokens(b, 3), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "got 3") != NULL);
    CHECK_RC(wid_verifier_builder_set_node_tokens(b, UINT32_MAX), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verifier_builder_set_node_lookup(b, NULL, &nodes), WID_RESULT_NULL_ARGUMENT);
    CHECK(strstr(last_error(), "lookup") != NULL);
    CHECK_RC(wid_verifier_builder_set_node_lookup(b, NULL, NULL), WID_RESULT_NULL_ARGUMENT);
    {
        wid_verifier_builder *kr_as_b = (wid_verifier_builder *)(void *)kr;
        CHECK_OK(wid_issuer_builder_new(kr, &ib));
        CHECK_RC(wid_verifier_builder_set_node_tokens(kr_as_b, WID_NODE_TOKENS_ACCEPT),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_verifier_builder_set_node_lookup(kr_as_b, lookup, &nodes),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_verifier_builder_set_node_tokens((wid_verifier_builder *)(void *)ib,
                                                      WID_NODE_TOKENS_ACCEPT),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_verifier_builder_set_node_lookup((wid_verifier_builder *)(void *)ib, lookup,
                                                      &nodes),
                 WID_RESULT_INVALID_ARGUMENT);
        wid_issuer_builder_free(ib);
    }

    /* Still node tokens only, with the node lookup. */
    v = vbuild(b);
    CHECK_OK(verify_at(v, &node_token, NOW));
    CHECK(nodes.nseen == 1 && nodes.seen[0] == WID_CONSISTENCY_STALE);
    CHECK(!nodes.wrong_id);
    wid_verifier_free(v);

    wid_bytes_free(&node_token);
    wid_bytes_free(&alloc_token);
    wid_verifier_builder_free(b);
    wid_keyring_free(kr);
}

/* Node tokens issued from C verify only where node tokens are accepted, and
 * only while the node lookup says the node is live. */
static void test_node_verify_flows(void) {
    wid_keyring *kr = keyring_for_wits(92);
    struct lookup_ctx allocs, nodes;
    wid_verifier *v;
    wid_verifier_builder *b;
    wid_node_request_fields n;
    wid_bytes node_token, es_token, alloc_token, vault_node_token, claims = {NULL, 0};
    wid_bytes out = sentinel_bytes();
    const char *vault_aud[] = {AUD};
    char want[256];

    ctx_init(&allocs, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    node_fields(&n);
    node_token = issue_node_token(kr, WID_ALG_EDDSA, &n, WIT_ISS);
    CHECK(strncmp((const char *)node_token.data, EDDSA_HEADER_PREFIX,
                  strlen(EDDSA_HEADER_PREFIX)) == 0);
    es_token = issue_node_token(kr, WID_ALG_ES256, &n, NULL);
    CHECK(strncmp((const char *)es_token.data, ES256_HEADER_PREFIX,
                  strlen(ES256_HEADER_PREFIX)) == 0);
    n.audience = vault_aud;
    n.audience_count = 1;
    vault_node_token = issue_node_token(kr, WID_ALG_EDDSA, &n, NULL);
    alloc_token = issue(kr, NOW);

    /* Accepted, with Nomad's node claims and no allocation claim. */
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    CHECK_OK(wid_verify(v, (const char *)node_token.data, node_token.len, NOW, &claims));
    CHECK(bytes_contain(&claims, "\"nomad_node_id\":\"" NODE_ID "\""));
    CHECK(bytes_contain(&claims, "\"nomad_node_pool\":\"default\""));
    CHECK(bytes_contain(&claims, "\"nomad_node_class\":\"gpu\""));
    CHECK(bytes_contain(&claims, "\"nomad_node_datacenter\":\"dc1\""));
    CHECK(bytes_contain(&claims, "\"sub\":\"" NODE_SUB "\""));
    CHECK(bytes_contain(&claims, "\"aud\":\"" NODE_AUD "\""));
    snprintf(want, sizeof want, "\"exp\":%lld", (long long)(NOW + 24 * 3600));
    CHECK(bytes_contain(&claims, want));
    CHECK(bytes_contain(&claims, "\"iss\":\"" WIT_ISS "\""));
    CHECK(!bytes_contain(&claims, "nomad_allocation_id"));
    CHECK(!bytes_contain(&claims, "nomad_namespace"));
    wid_bytes_free(&claims);
    CHECK(nodes.nseen == 1 && !nodes.wrong_id);
    CHECK(allocs.nseen == 0);
    CHECK_OK(verify_at(v, &es_token, NOW));
    CHECK_RC(verify_at(v, &node_token, NOW + 24 * 3600 + 61), WID_RESULT_EXPIRED);
    /* Explained step by step, the node checked. */
    CHECK_OK(wid_explain(v, (const char *)node_token.data, node_token.len, NOW, &out));
    CHECK(bytes_contain(&out, "\"accepted\":true"));
    CHECK(bytes_contain(&out, "\"name\":\"node\",\"passed\":true"));
    wid_bytes_free(&out);
    wid_verifier_free(v);

    /* A lagging replica: missing when stale, live when consistent. */
    node_ctx_init(&nodes, WID_NODE_MISSING, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ONLY, &allocs, &nodes);
    CHECK_OK(verify_at(v, &node_token, NOW));
    CHECK(nodes.nseen == 2 && nodes.seen[0] == WID_CONSISTENCY_STALE &&
          nodes.seen[1] == WID_CONSISTENCY_CONSISTENT);
    wid_verifier_free(v);

    /* Missing everywhere: NODE_NOT_FOUND, outputs untouched. */
    node_ctx_init(&nodes, WID_NODE_MISSING, WID_NODE_MISSING);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    out = sentinel_bytes();
    CHECK_RC(wid_verify(v, (const char *)node_token.data, node_token.len, NOW, &out),
             WID_RESULT_NODE_NOT_FOUND);
    CHECK(strstr(last_error(), NODE_ID) != NULL);
    CHECK(is_sentinel(&out));
    CHECK(nodes.nseen == 2);
    wid_verifier_free(v);

    /* Down. */
    node_ctx_init(&nodes, WID_NODE_DOWN, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    CHECK_RC(wid_verify(v, (const char *)node_token.data, node_token.len, NOW, &out),
             WID_RESULT_NODE_DOWN);
    CHECK(is_sentinel(&out));
    CHECK(nodes.nseen == 1);
    wid_verifier_free(v);

    /* The callback fails, reports a state that is none, or writes nothing:
     * STORE_UNAVAILABLE (fail closed). */
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    nodes.rc = WID_RESULT_IO_ERROR;
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    CHECK_RC(verify_at(v, &node_token, NOW), WID_RESULT_STORE_UNAVAILABLE);
    CHECK(strstr(last_error(), "WID_RESULT_IO_ERROR") != NULL);
    wid_verifier_free(v);
    node_ctx_init(&nodes, 3, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    CHECK_RC(verify_at(v, &node_token, NOW), WID_RESULT_STORE_UNAVAILABLE);
    CHECK(strstr(last_error(), "state 3") != NULL);
    wid_verifier_free(v);
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    nodes.write_state = 0;
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, &nodes);
    CHECK_RC(verify_at(v, &node_token, NOW), WID_RESULT_STORE_UNAVAILABLE);
    wid_verifier_free(v);

    /* No node lookup: node tokens fail closed. */
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ACCEPT, &allocs, NULL);
    CHECK_RC(verify_at(v, &node_token, NOW), WID_RESULT_STORE_UNAVAILABLE);
    CHECK(strstr(last_error(), "wid_verifier_builder_set_node_lookup") != NULL);
    wid_verifier_free(v);

    /* The kinds: a default verifier refuses node tokens, an Only verifier
     * allocation tokens, both before any lookup; Accept takes both. */
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    ctx_init(&allocs, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    b = vbuilder_for(kr, &allocs);
    CHECK_OK(wid_verifier_builder_set_node_lookup(b, lookup, &nodes));
    v = vbuild(b);
    out = sentinel_bytes();
    CHECK_RC(wid_verify(v, (const char *)vault_node_token.data, vault_node_token.len, NOW, &out),
             WID_RESULT_TOKEN_KIND_REFUSED);
    CHECK(strstr(last_error(), NODE_ID) != NULL);
    CHECK(is_sentinel(&out));
    CHECK_OK(verify_at(v, &alloc_token, NOW));
    wid_verifier_free(v);
    CHECK_OK(wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ONLY));
    v = vbuild(b);
    CHECK_RC(wid_verify(v, (const char *)alloc_token.data, alloc_token.len, NOW, &out),
             WID_RESULT_TOKEN_KIND_REFUSED);
    CHECK(strstr(last_error(), ALLOC_ID) != NULL);
    CHECK(is_sentinel(&out));
    CHECK_OK(verify_at(v, &vault_node_token, NOW));
    wid_verifier_free(v);
    CHECK_OK(wid_verifier_builder_set_node_tokens(b, WID_NODE_TOKENS_ACCEPT));
    v = vbuild(b);
    CHECK_OK(verify_at(v, &alloc_token, NOW));
    CHECK_OK(verify_at(v, &vault_node_token, NOW));
    CHECK(nodes.nseen == 2 && allocs.nseen == 2);
    {
        const char *toks[3];
        size_t lens[3];
        wid_result results[3] = {99, 99, 99};
        toks[0] = (const char *)alloc_token.data;
        lens[0] = alloc_token.len;
        toks[1] = (const char *)vault_node_token.data;
        lens[1] = vault_node_token.len;
        toks[2] = (const char *)node_token.data; /* for nomadproject.io */
        lens[2] = node_token.len;
        CHECK_OK(wid_verify_batch(v, toks, lens, 3, NOW, results));
        CHECK(results[0] == WID_RESULT_OK);
        CHECK(results[1] == WID_RESULT_OK);
        CHECK(results[2] == WID_RESULT_AUDIENCE_MISMATCH);
    }
    wid_verifier_free(v);
    /* The older constructor: allocation tokens only. */
    v = verifier_for(kr, &allocs);
    CHECK_RC(verify_at(v, &vault_node_token, NOW), WID_RESULT_TOKEN_KIND_REFUSED);
    wid_verifier_free(v);
    wid_verifier_builder_free(b);

    wid_bytes_free(&node_token);
    wid_bytes_free(&es_token);
    wid_bytes_free(&vault_node_token);
    wid_bytes_free(&alloc_token);
    wid_keyring_free(kr);
}

/* An issuer handle signs node identities with its algorithm and iss. */
static void test_issuer_node_identities(void) {
    wid_keyring *kr = keyring_for_wits(93);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_ES256, 1, NULL); /* SPIFFE: not for nodes */
    wid_issuer *iss;
    struct lookup_ctx allocs, nodes;
    wid_verifier *v;
    wid_node_request_fields n;
    struct encoded e;
    wid_bytes token = {NULL, 0}, claims = {NULL, 0};

    CHECK_OK(wid_issuer_builder_set_issuer(b, S(WIT_ISS)));
    iss = build(b);
    node_fields(&n);
    n.node_class = NULL;
    n.ttl_ns = WID_TTL_SECONDS(600);
    encode_node(&n, &e);
    CHECK_OK(wid_issuer_issue_node(iss, e.buf, e.len, NOW, &token));
    CHECK(token.data != NULL && token.data[token.len] == '\0');
    CHECK(strncmp((const char *)token.data, ES256_HEADER_PREFIX, strlen(ES256_HEADER_PREFIX)) ==
          0);
    ctx_init(&allocs, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ONLY, &allocs, &nodes);
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW, &claims));
    CHECK(bytes_contain(&claims, "\"iss\":\"" WIT_ISS "\""));
    CHECK(bytes_contain(&claims, "\"sub\":\"" NODE_SUB "\""));
    CHECK(!bytes_contain(&claims, "nomad_node_class")); /* none set */
    CHECK(!bytes_contain(&claims, "spiffe://"));
    wid_bytes_free(&claims);
    CHECK_RC(verify_at(v, &token, NOW + 600 + 61), WID_RESULT_EXPIRED);

    /* The issuer outlives its builder and keyring handle. */
    wid_issuer_builder_free(b);
    wid_keyring_free(kr);
    wid_bytes_free(&token);
    CHECK_OK(wid_issuer_issue_node(iss, e.buf, e.len, NOW, &token));
    CHECK_OK(verify_at(v, &token, NOW));
    wid_bytes_free(&token);
    wid_issuer_free(iss);
    wid_verifier_free(v);
}

/* ------------------------------------------------------------------------ */
/* The node identity manager                                                */
/* ------------------------------------------------------------------------ */

#define NM_T0 ((int64_t)1700000000000) /* Unix milliseconds */
#define NM_DAY_MS ((int64_t)24 * 3600 * 1000)
#define SENTINEL_NM ((wid_node_identity_manager *)(uintptr_t)0x10)

static wid_node_identity_manager *nm_new(const wid_issuer *iss, const wid_keyring *kr,
                                         const struct encoded *e, const char *dir) {
    wid_node_identity_manager *m = NULL;
    CHECK_OK(wid_node_identity_manager_new(iss, kr, e->buf, e->len, S(dir), &m));
    CHECK(m != NULL);
    return m;
}

static int nm_health_has(const wid_node_identity_manager *m, int64_t now, const char *needle) {
    wid_bytes j = {NULL, 0};
    int found;
    CHECK_OK(wid_node_identity_manager_health_json(m, now, &j));
    found = bytes_contain(&j, needle);
    wid_bytes_free(&j);
    return found;
}

/* NULLs, wrong handles, bad values: nothing written. */
static void test_node_manager_arguments(void) {
    char dir[] = "/tmp/wid-c-nm-XXXXXX";
    char missing[256], file[256];
    wid_keyring *kr = keyring_for_wits(61);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss = build(b);
    wid_node_identity_manager *m = SENTINEL_NM, *real;
    const wid_node_identity_manager *wrong = (const wid_node_identity_manager *)kr;
    wid_node_request_fields n;
    struct encoded e;
    wid_bytes out = {(uint8_t *)"x", 77};
    int64_t due = -7;
    uint32_t reused = 99;
    FILE *f;

    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        g_checks++;
        g_failed++;
        wid_issuer_builder_free(b);
        wid_issuer_free(iss);
        wid_keyring_free(kr);
        return;
    }
    snprintf(missing, sizeof missing, "%s/missing", dir);
    snprintf(file, sizeof file, "%s/file", dir);
    f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL) fclose(f);
    node_fields(&n);
    encode_node(&n, &e);

    CHECK_RC(wid_node_identity_manager_new(NULL, kr, e.buf, e.len, S(dir), &m),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, NULL, e.buf, e.len, S(dir), &m),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, NULL, 5, S(dir), &m), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, NULL, 4, &m),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, S(dir), NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new((const wid_issuer *)kr, kr, e.buf, e.len, S(dir), &m),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, (const wid_keyring *)iss, e.buf, e.len, S(dir), &m),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, (const uint8_t *)"\xc1", 1, S(dir), &m),
             WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, "", 0, &m),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, S(missing), &m),
             WID_RESULT_IO_ERROR);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, S(file), &m),
             WID_RESULT_IO_ERROR);
    n.node_id = ""; /* an invalid request */
    encode_node(&n, &e);
    CHECK_RC(wid_node_identity_manager_new(iss, kr, e.buf, e.len, S(dir), &m),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(m == SENTINEL_NM);
    node_fields(&n);
    encode_node(&n, &e);

    CHECK_RC(wid_node_identity_manager_start(NULL, NM_T0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_start(wrong, NM_T0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_restore(NULL, NM_T0, &reused), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_restore(wrong, NM_T0, &reused), WID_RESULT_INVALID_ARGUMENT);
    CHECK(reused == 99);
    CHECK_RC(wid_node_identity_manager_tick(NULL, NM_T0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_tick(wrong, NM_T0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_next_due_ms(NULL, &due), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_next_due_ms(wrong, &due), WID_RESULT_INVALID_ARGUMENT);
    CHECK(due == -7);
    CHECK_RC(wid_node_identity_manager_current(NULL, NM_T0, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_current(wrong, NM_T0, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_health_json(NULL, NM_T0, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_health_json(wrong, NM_T0, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(out.len == 77);
    wid_node_identity_manager_free(NULL);
    wid_node_identity_manager_free(wrong); /* a wrong handle type is ignored */

    real = nm_new(iss, kr, &e, dir);
    /* Nothing signed yet: no token, nothing scheduled. */
    CHECK_RC(wid_node_identity_manager_current(real, NM_T0, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "no valid node identity") != NULL);
    CHECK_RC(wid_node_identity_manager_next_due_ms(real, &due), WID_RESULT_INVALID_ARGUMENT);
    CHECK(out.len == 77 && due == -7);
    CHECK_RC(wid_node_identity_manager_current(real, NM_T0, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_next_due_ms(real, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_node_identity_manager_health_json(real, NM_T0, NULL), WID_RESULT_NULL_ARGUMENT);
    /* A manager is not a keyring. */
    CHECK_RC(wid_keyring_jwks((const wid_keyring *)real, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(out.len == 77);

    /* No active key of the issuer's algorithm: the signer's code. */
    {
        wid_keyring *empty = NULL;
        wid_issuer_builder *eb;
        wid_issuer *eiss;
        wid_node_identity_manager *em;
        CHECK_OK(wid_keyring_new(&empty));
        eb = builder_for(empty, WID_ALG_EDDSA, 0, NULL);
        eiss = build(eb);
        em = nm_new(eiss, empty, &e, dir);
        CHECK_RC(wid_node_identity_manager_start(em, NM_T0), WID_RESULT_NO_ACTIVE_KEY);
        CHECK_RC(wid_node_identity_manager_restore(em, NM_T0, &reused), WID_RESULT_NO_ACTIVE_KEY);
        CHECK(reused == 99);
        CHECK(nm_health_has(em, NM_T0, "\"at_risk\":true"));
        CHECK(nm_health_has(em, NM_T0, "\"failures\":2"));
        CHECK(nm_health_has(em, NM_T0, "\"expires_in_ms\":null"));
        CHECK_RC(wid_node_identity_manager_current(em, NM_T0, &out), WID_RESULT_INVALID_ARGUMENT);
        CHECK(out.len == 77);
        wid_node_identity_manager_free(em);
        wid_issuer_free(eiss);
        wid_issuer_builder_free(eb);
        wid_keyring_free(empty);
    }

    wid_node_identity_manager_free(real);
    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    wid_keyring_free(kr);
    remove(file);
    rmdir(dir);
}

/* Start, tick before due, a "restart" with a new handle on the same
 * directory taking the token back, renewal when due, the health JSON. */
static void test_node_manager_flows(void) {
    char dir[] = "/tmp/wid-c-nm-XXXXXX";
    wid_keyring *kr = keyring_for_wits(62);
    wid_issuer_builder *b = builder_for(kr, WID_ALG_ES256, 0, NULL);
    wid_issuer *iss = build(b);
    wid_node_identity_manager *m, *m2;
    wid_node_request_fields n;
    struct encoded e;
    wid_bytes first = {NULL, 0}, again = {NULL, 0}, renewed = {NULL, 0}, j = {NULL, 0};
    struct lookup_ctx allocs, nodes;
    wid_verifier *v;
    int64_t due = 0, due2 = 0;
    uint32_t reused = 99;
    char expect_exp[64];

    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        g_checks++;
        g_failed++;
        wid_issuer_builder_free(b);
        wid_issuer_free(iss);
        wid_keyring_free(kr);
        return;
    }
    node_fields(&n);
    encode_node(&n, &e);
    m = nm_new(iss, kr, &e, dir);
    CHECK_OK(wid_node_identity_manager_start(m, NM_T0));
    CHECK_OK(wid_node_identity_manager_current(m, NM_T0, &first));
    CHECK(first.data != NULL && first.data[first.len] == '\0');
    CHECK(strncmp((const char *)first.data, ES256_HEADER_PREFIX, strlen(ES256_HEADER_PREFIX)) == 0);
    ctx_init(&allocs, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    node_ctx_init(&nodes, WID_NODE_LIVE, WID_NODE_LIVE);
    v = node_verifier_for(kr, NODE_AUD, WID_NODE_TOKENS_ONLY, &allocs, &nodes);
    CHECK_OK(wid_verify(v, (const char *)first.data, first.len, NM_T0 / 1000, NULL));

    CHECK_OK(wid_node_identity_manager_next_due_ms(m, &due));
    CHECK(due >= NM_T0 + NM_DAY_MS * 2 / 3 - NM_DAY_MS / 20 && due <= NM_T0 + NM_DAY_MS * 2 / 3);
    /* Before due: nothing happens. */
    CHECK_OK(wid_node_identity_manager_tick(m, due - 1));
    CHECK(nm_health_has(m, due - 1, "\"signed\":1"));
    CHECK_OK(wid_node_identity_manager_current(m, due - 1, &again));
    CHECK(again.len == first.len && memcmp(again.data, first.data, first.len) == 0);
    wid_bytes_free(&again);

    /* The health JSON. */
    CHECK_OK(wid_node_identity_manager_health_json(m, NM_T0 + 1000, &j));
    CHECK(j.data != NULL && j.data[j.len] == '\0');
    CHECK(bytes_contain(&j, "\"expires_in_ms\":86399000"));
    CHECK(bytes_contain(&j, "\"renewal_overdue_ms\":0"));
    CHECK(bytes_contain(&j, "\"at_risk\":false"));
    CHECK(bytes_contain(&j, "\"signed\":1"));
    CHECK(bytes_contain(&j, "\"failures\":0"));
    CHECK(bytes_contain(&j, "\"consecutive_failures\":0"));
    snprintf(expect_exp, sizeof expect_exp, "\"expires_at\":%lld",
             (long long)(NM_T0 / 1000 + 86400));
    CHECK(bytes_contain(&j, expect_exp));
    CHECK(bytes_contain(&j, "\"next_attempt_ms\":"));
    CHECK(bytes_contain(&j, "\"expires_before_next_attempt\":false"));
    CHECK(bytes_contain(&j, "\"last_error\":null"));
    wid_bytes_free(&j);

    /* A "restart": a new handle on the same directory takes it back. */
    wid_node_identity_manager_free(m);
    m2 = nm_new(iss, kr, &e, dir);
    CHECK_OK(wid_node_identity_manager_restore(m2, NM_T0 + 60000, &reused));
    CHECK(reused == 1);
    CHECK_OK(wid_node_identity_manager_restore(m2, NM_T0 + 60000, NULL)); /* NULL: not wanted */
    CHECK_OK(wid_node_identity_manager_current(m2, NM_T0 + 60000, &again));
    CHECK(again.len == first.len && memcmp(again.data, first.data, first.len) == 0);
    wid_bytes_free(&again);
    CHECK(nm_health_has(m2, NM_T0 + 60000, "\"signed\":0"));

    /* Due: renewed, and the new token verifies. The manager outlives the
     * issuer and keyring handles it was made from. */
    wid_issuer_free(iss);
    wid_issuer_builder_free(b);
    CHECK_OK(wid_node_identity_manager_next_due_ms(m2, &due2));
    CHECK_OK(wid_node_identity_manager_tick(m2, due2));
    CHECK_OK(wid_node_identity_manager_current(m2, due2, &renewed));
    CHECK(renewed.len > 0 && !(renewed.len == first.len &&
                               memcmp(renewed.data, first.data, first.len) == 0));
    CHECK_OK(wid_verify(v, (const char *)renewed.data, renewed.len, due2 / 1000, NULL));
    CHECK(nm_health_has(m2, due2, "\"signed\":1"));
    CHECK_OK(wid_node_identity_manager_next_due_ms(m2, &due));
    CHECK(due > due2 + NM_DAY_MS / 2);

    /* Once expired (nothing renewed it), there is no valid identity. */
    CHECK_RC(wid_node_identity_manager_current(m2, due2 + NM_DAY_MS, &again),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(again.data == NULL);
    CHECK(nm_health_has(m2, due2 + NM_DAY_MS, "\"at_risk\":true"));

    wid_bytes_free(&first);
    wid_bytes_free(&renewed);
    wid_node_identity_manager_free(m2);
    wid_verifier_free(v);
    wid_keyring_free(kr);
    {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
}

/* ------------------------------------------------------------------------ */
/* The identity manager (one allocation's identities, exchanges, restore)   */
/* ------------------------------------------------------------------------ */

#define IM_T0 ((int64_t)1700000000000) /* Unix milliseconds */
#define SENTINEL_IM ((wid_identity_manager *)(uintptr_t)0x30)

/* What the callbacks saw, as one line per call. */
struct im_log {
    char text[4096];
    int derived;
    /* The next refresh: 0 fails (STORE_UNAVAILABLE), else the outcome. */
    uint32_t refresh_outcome;
    /* The host signer: 0 signs with `kr`, 1 fails, 2 answers nothing. */
    int sign_mode;
    const wid_keyring *kr;
};

static void im_say(struct im_log *log, const char *line) {
    size_t used = strlen(log->text);
    snprintf(log->text + used, sizeof log->text - used, "%s\n", line);
}

static void im_watch(void *userdata, uint32_t what, const char *workload, size_t workload_len,
                     const char *name, size_t name_len, const char *value, size_t value_len,
                     uint32_t kind) {
    struct im_log *log = userdata;
    char line[512];
    if (what == WID_MANAGED_IDENTITY)
        snprintf(line, sizeof line, "token %.*s/%.*s %s %u", (int)workload_len, workload,
                 (int)name_len, name, memchr(value, '.', value_len) ? "jws" : "?", (unsigned)kind);
    else
        snprintf(line, sizeof line, "secret %.*s/%.*s %.*s %u", (int)workload_len, workload,
                 (int)name_len, name, (int)value_len, value, (unsigned)kind);
    im_say(log, line);
}

static wid_result im_derive(void *userdata, const char *token, size_t token_len, int64_t now_ms,
                            wid_output *out_secret, int64_t *out_refresh_at_ms) {
    struct im_log *log = userdata;
    char secret[32];
    if (token_len == 0 || memchr(token, '.', token_len) == NULL || *out_refresh_at_ms != 0)
        return WID_RESULT_INVALID_ARGUMENT;
    snprintf(secret, sizeof secret, "s%d", ++log->derived);
    im_say(log, "derive");
    *out_refresh_at_ms = now_ms + 600000;
    return wid_output_set(out_secret, (const uint8_t *)secret, strlen(secret));
}

static wid_result im_refresh(void *userdata, const char *secret, size_t secret_len,
                             const char *token, size_t token_len, uint32_t reason, int64_t now_ms,
                             uint32_t *out_outcome, wid_output *out_new_secret,
                             int64_t *out_refresh_at_ms) {
    struct im_log *log = userdata;
    char line[128];
    (void)token;
    (void)token_len;
    (void)now_ms;
    (void)out_refresh_at_ms;
    snprintf(line, sizeof line, "refresh %.*s %u", (int)secret_len, secret, (unsigned)reason);
    im_say(log, line);
    if (*out_outcome != 0) return WID_RESULT_INVALID_ARGUMENT; /* preset to fail closed */
    if (log->refresh_outcome == 0) {
        static const char why[] = "the secret server is down";
        wid_output_set(out_new_secret, (const uint8_t *)why, sizeof why - 1);
        return WID_RESULT_STORE_UNAVAILABLE;
    }
    if (log->refresh_outcome == WID_REFRESHED_REPLACED) {
        char next[32];
        snprintf(next, sizeof next, "s%d", ++log->derived);
        wid_output_set(out_new_secret, (const uint8_t *)next, strlen(next));
    }
    *out_outcome = log->refresh_outcome;
    return WID_RESULT_OK;
}

static void im_release(void *userdata, const char *secret, size_t secret_len) {
    char line[64];
    snprintf(line, sizeof line, "release %.*s", (int)secret_len, secret);
    im_say(userdata, line);
}

static wid_result im_sign(void *userdata, const uint8_t *request, size_t request_len,
                          int64_t now_unix, wid_output *out_token) {
    struct im_log *log = userdata;
    wid_bytes t = {NULL, 0};
    wid_result rc;
    im_say(log, "sign");
    if (log->sign_mode == 1) {
        static const char why[] = "the servers are unreachable";
        wid_output_set(out_token, (const uint8_t *)why, sizeof why - 1);
        return WID_RESULT_STORE_UNAVAILABLE;
    }
    if (log->sign_mode == 2) return WID_RESULT_OK;
    rc = wid_issue(log->kr, request, request_len, now_unix, &t);
    if (rc != WID_RESULT_OK) return rc;
    rc = wid_output_set(out_token, t.data, t.len);
    wid_bytes_free(&t);
    return rc;
}

/* A builder over `kr` and `dir` with the sample request (task "server",
 * identity "vault_default", 1 h), the watcher and host exchange "x". */
static wid_identity_manager_builder *im_builder(const wid_keyring *kr, const char *dir,
                                                struct im_log *log) {
    wid_identity_manager_builder *b = NULL;
    CHECK_OK(wid_identity_manager_builder_new(kr, S(dir), &b));
    CHECK(b != NULL);
    CHECK_OK(wid_identity_manager_builder_add_identity(b, wid_sample_request,
                                                       wid_sample_request_len));
    CHECK_OK(wid_identity_manager_builder_set_watcher(b, im_watch, log));
    CHECK_OK(wid_identity_manager_builder_add_exchange(b, S("x"), S("server"), S("vault_default"),
                                                       im_derive, im_refresh, im_release, log));
    return b;
}

static wid_identity_manager *im_build(wid_identity_manager_builder *b) {
    wid_identity_manager *m = NULL;
    CHECK_OK(wid_identity_manager_builder_build(b, &m));
    CHECK(m != NULL);
    wid_identity_manager_builder_free(b);
    return m;
}

static int im_secret_is(const wid_identity_manager *m, const char *want) {
    wid_bytes s = {NULL, 0};
    int same;
    if (wid_identity_manager_secret(m, S("x"), &s) != WID_RESULT_OK) return want == NULL;
    same = want != NULL && bytes_eq(&s, want);
    wid_bytes_free(&s);
    return same;
}

static int im_health_has(const wid_identity_manager *m, int64_t now, const char *needle) {
    wid_bytes j = {NULL, 0};
    int found;
    CHECK_OK(wid_identity_manager_health_json(m, now, &j));
    found = bytes_contain(&j, needle);
    wid_bytes_free(&j);
    return found;
}

/* Start, restart and restore (the saved secret confirmed), a refresh that
 * fails (the secret held back, never handed out, released after its
 * successor), and a host signer checked and failing closed. */
static void test_identity_manager_flows(void) {
    char dir[] = "/tmp/wid-c-im-XXXXXX";
    wid_keyring *kr = keyring_with_key("im-1", 91);
    wid_issuer_builder *ib = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss = build(ib);
    struct im_log log;
    wid_identity_manager_builder *b;
    wid_identity_manager *m;
    wid_bytes token = {NULL, 0}, again = {NULL, 0}, report = {NULL, 0};
    int64_t next = 0;
    char want[512];

    memset(&log, 0, sizeof log);
    log.kr = kr;
    log.refresh_outcome = WID_REFRESHED_KEPT;
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        g_checks++;
        g_failed++;
        goto out;
    }

    b = im_builder(kr, dir, &log);
    CHECK_OK(wid_identity_manager_builder_set_issuer(b, iss));
    m = im_build(b);
    CHECK(im_secret_is(m, NULL));
    CHECK_OK(wid_identity_manager_start(m, IM_T0));
    snprintf(want, sizeof want, "derive\ntoken server/vault_default jws %u\nsecret server/x s1 %u\n",
             (unsigned)WID_EVENT_INITIAL, (unsigned)WID_EVENT_INITIAL);
    CHECK(strcmp(log.text, want) == 0);
    CHECK(im_secret_is(m, "s1"));
    CHECK_OK(wid_identity_manager_current(m, S("server"), S("vault_default"), IM_T0, &token));
    CHECK(im_health_has(m, IM_T0, "\"at_risk\":false"));
    CHECK(im_health_has(m, IM_T0, "\"expires_in_ms\":3600000"));
    CHECK(!im_health_has(m, IM_T0, "s1\""));
    CHECK_OK(wid_identity_manager_tick(m, IM_T0 + 1000, &next));
    CHECK(next == IM_T0 + 600000);
    wid_identity_manager_free(m);

    /* A restart: the saved token and secret, the secret confirmed. */
    log.text[0] = '\0';
    b = im_builder(kr, dir, &log);
    CHECK_OK(wid_identity_manager_builder_set_issuer(b, iss));
    m = im_build(b);
    CHECK_OK(wid_identity_manager_restore(m, IM_T0 + 5000, &report));
    CHECK(bytes_contain(&report, "\"reused\":true"));
    wid_bytes_free(&report);
    CHECK_OK(wid_identity_manager_current(m, S("server"), S("vault_default"), IM_T0 + 5000, &again));
    CHECK(token.len == again.len && memcmp(token.data, again.data, token.len) == 0);
    wid_bytes_free(&again);
    snprintf(want, sizeof want, "refresh s1 %u\ntoken server/vault_default jws %u\nsecret server/x s1 %u\n",
             (unsigned)WID_REFRESH_REASON_RESTORED, (unsigned)WID_EVENT_RESTORED,
             (unsigned)WID_EVENT_RESTORED);
    CHECK(strcmp(log.text, want) == 0);
    wid_identity_manager_free(m);

    /* Another restart; the confirmation fails: nothing handed out. */
    log.text[0] = '\0';
    log.refresh_outcome = 0;
    b = im_builder(kr, dir, &log);
    CHECK_OK(wid_identity_manager_builder_set_issuer(b, iss));
    m = im_build(b);
    again = sentinel_bytes();
    CHECK_RC(wid_identity_manager_restore(m, IM_T0 + 6000, &again),
             WID_RESULT_TOKEN_EXCHANGE_FAILED);
    CHECK(strstr(last_error(), "the secret server is down") != NULL);
    CHECK(is_sentinel(&again));
    CHECK(strstr(log.text, "secret ") == NULL);
    CHECK(im_secret_is(m, NULL));
    CHECK(im_health_has(m, IM_T0 + 6000, "\"held_back\":true"));
    CHECK(im_health_has(m, IM_T0 + 6000, "\"at_risk\":true"));
    /* The retry derives a new one, delivers it, then releases the old. */
    log.text[0] = '\0';
    CHECK_OK(wid_identity_manager_next_due_ms(m, &next));
    CHECK(next == IM_T0 + 7000);
    CHECK_OK(wid_identity_manager_tick(m, next, NULL));
    snprintf(want, sizeof want, "derive\nsecret server/x s2 %u\nrelease s1\n",
             (unsigned)WID_EVENT_RESTORED);
    CHECK(strcmp(log.text, want) == 0);
    CHECK(im_secret_is(m, "s2"));
    wid_identity_manager_free(m);

    /* A host signer: its tokens are checked against the keyring. */
    log.text[0] = '\0';
    log.refresh_outcome = WID_REFRESHED_KEPT;
    log.sign_mode = 0;
    b = im_builder(kr, dir, &log);
    CHECK_OK(wid_identity_manager_builder_set_signer(b, im_sign, &log));
    m = im_build(b);
    CHECK_OK(wid_identity_manager_start(m, IM_T0));
    CHECK(strncmp(log.text, "sign\nderive\n", 12) == 0);
    log.sign_mode = 1;
    CHECK_OK(wid_identity_manager_tick(m, IM_T0 + 2100000, NULL));
    CHECK(im_health_has(m, IM_T0 + 2100000, "the servers are unreachable"));
    log.sign_mode = 2;
    CHECK_OK(wid_identity_manager_tick(m, IM_T0 + 2200000, NULL));
    CHECK(im_health_has(m, IM_T0 + 2200000, "without setting a token"));
    /* The token in use stays in use. */
    CHECK_OK(wid_identity_manager_current(m, S("server"), S("vault_default"), IM_T0 + 2200000, &again));
    wid_bytes_free(&again);
    wid_identity_manager_free(m);

out:
    wid_bytes_free(&token);
    wid_issuer_builder_free(ib);
    wid_issuer_free(iss);
    wid_keyring_free(kr);
}

/* NULLs, wrong handles and bad values: refused, nothing written. */
static void test_identity_manager_arguments(void) {
    char dir[] = "/tmp/wid-c-ima-XXXXXX";
    char missing[256];
    wid_keyring *kr = keyring_with_key("im-2", 93);
    wid_issuer_builder *ib = builder_for(kr, WID_ALG_EDDSA, 0, NULL);
    wid_issuer *iss = build(ib);
    struct im_log log;
    wid_identity_manager_builder *b = NULL, *b2;
    wid_identity_manager *m = SENTINEL_IM, *real;
    const wid_identity_manager *wrong = (const wid_identity_manager *)kr;
    wid_vault_login_config *cfg = NULL;
    wid_bytes out = sentinel_bytes();
    int64_t due = -7;
    uint64_t not_output[4] = {0, 0, 0, 0};
    wid_result rc;

    memset(&log, 0, sizeof log);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        g_checks++;
        g_failed++;
        goto out;
    }
    snprintf(missing, sizeof missing, "%s/missing", dir);

    CHECK_RC(wid_identity_manager_builder_new(NULL, S(dir), &b), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_new(kr, NULL, 3, &b), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_new(kr, S(dir), NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_new(kr, "", 0, &b), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_new(kr, S(missing), &b), WID_RESULT_IO_ERROR);
    CHECK_RC(wid_identity_manager_builder_new((const wid_keyring *)iss, S(dir), &b),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(b == NULL);

    b = im_builder(kr, dir, &log);
    CHECK_RC(wid_identity_manager_builder_add_identity(NULL, wid_sample_request,
                                                       wid_sample_request_len),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_add_identity(b, NULL, 4), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_add_identity(b, (const uint8_t *)"\xc1", 1),
             WID_RESULT_DECODE_ERROR);
    CHECK_RC(wid_identity_manager_builder_set_issuer(b, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_set_issuer(b, (const wid_issuer *)kr),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_set_signer(b, NULL, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_set_watcher(b, NULL, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_add_exchange(b, S("y"), S("server"), S("vault_default"),
                                                       NULL, NULL, NULL, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_add_exchange(b, "", 0, S("server"), S("vault_default"),
                                                       im_derive, NULL, NULL, NULL),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_add_exchange(b, S("y"), S("server"), S(BAD_UTF8),
                                                       im_derive, NULL, NULL, NULL),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_builder_set_proof_of_possession(b, S("server"),
                                                                  S("vault_default"), 99),
             WID_RESULT_INVALID_ARGUMENT);
    /* No signer yet. */
    CHECK_RC(wid_identity_manager_builder_build(b, &m), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "has no signer") != NULL);
    CHECK(m == SENTINEL_IM);
    CHECK_OK(wid_identity_manager_builder_set_issuer(b, iss));
    /* An exchange of an identity not requested is refused at build. */
    CHECK_OK(wid_identity_manager_builder_add_exchange(b, S("y"), S("server"), S("vault_nope"),
                                                       im_derive, NULL, NULL, NULL));
    CHECK_RC(wid_identity_manager_builder_build(b, &m), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "not requested") != NULL);
    wid_identity_manager_builder_free(b);

    b = im_builder(kr, dir, &log);
    CHECK_OK(wid_identity_manager_builder_set_issuer(b, iss));
    CHECK_RC(wid_identity_manager_builder_build(b, NULL), WID_RESULT_NULL_ARGUMENT);
    real = NULL;
    CHECK_OK(wid_identity_manager_builder_build(b, &real));
    /* A builder builds one manager. */
    CHECK_RC(wid_identity_manager_builder_build(b, &m), WID_RESULT_INVALID_ARGUMENT);
    CHECK(m == SENTINEL_IM);
    CHECK_RC(wid_identity_manager_builder_add_identity(b, wid_sample_request,
                                                       wid_sample_request_len),
             WID_RESULT_INVALID_ARGUMENT);
    wid_identity_manager_builder_free(b);

    CHECK_RC(wid_identity_manager_start(NULL, IM_T0), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_start(wrong, IM_T0), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_restore(NULL, IM_T0, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_restore(wrong, IM_T0, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_identity_manager_tick(NULL, IM_T0, &due), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_tick(wrong, IM_T0, &due), WID_RESULT_INVALID_ARGUMENT);
    CHECK(due == -7);
    CHECK_RC(wid_identity_manager_next_due_ms(real, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_next_due_ms(real, &due), WID_RESULT_INVALID_ARGUMENT);
    CHECK(due == -7);
    CHECK_RC(wid_identity_manager_current(real, S("server"), S("vault_default"), IM_T0, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_identity_manager_current(real, S("server"), S("vault_default"), IM_T0, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_current(real, S("server"), "", 0, IM_T0, &out),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_secret(real, S("x"), &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_identity_manager_secret(real, NULL, 2, &out), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_identity_manager_health_json(wrong, IM_T0, &out), WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_identity_manager_health_json(real, IM_T0, NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK(is_sentinel(&out));
    CHECK_RC(wid_output_set(NULL, (const uint8_t *)"x", 1), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_output_set((wid_output *)not_output, (const uint8_t *)"x", 1),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_identity_manager_start(real, IM_T0));
    CHECK_OK(wid_identity_manager_next_due_ms(real, &due));
    CHECK(due == IM_T0 + 600000);
    wid_identity_manager_free(real);
    wid_identity_manager_free(NULL);
    wid_identity_manager_builder_free(NULL);

    /* The Vault login's config (the library is built with `vault`; without
     * it every config is refused, naming the feature). */
    rc = wid_vault_login_config_new(S("https://vault.example.com:8200"), S("server"),
                                    S("vault_default"), S("nomad-workloads"), &cfg);
    if (rc == WID_RESULT_INVALID_ARGUMENT) {
        CHECK(strstr(last_error(), "without the cargo feature `vault`") != NULL);
        CHECK(cfg == NULL);
    } else {
        CHECK_OK(rc);
        CHECK_RC(wid_vault_login_config_set_timeout_ms(cfg, 0), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_vault_login_config_set_min_ttl_ms(cfg, 600001), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_vault_login_config_set_allow_http_loopback(cfg, 2),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_vault_login_config_set_name(NULL, S("v")), WID_RESULT_NULL_ARGUMENT);
        CHECK_RC(wid_vault_login_config_set_mount(cfg, S(BAD_UTF8)), WID_RESULT_INVALID_ARGUMENT);
        CHECK_RC(wid_vault_login_config_set_ca_bundle_pem(cfg, NULL, 0),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK_OK(wid_vault_login_config_set_mount(cfg, S("jwt-nomad!")));
        CHECK_OK(wid_vault_login_config_set_name(cfg, S("vault-server")));
        CHECK_OK(wid_vault_login_config_set_min_ttl_ms(cfg, 2000));
        b2 = im_builder(kr, dir, &log);
        /* Checked when added: the mount is no mount path. */
        CHECK_RC(wid_identity_manager_builder_add_vault_login(b2, cfg),
                 WID_RESULT_INVALID_ARGUMENT);
        CHECK(strstr(last_error(), "mount") != NULL);
        CHECK_OK(wid_vault_login_config_set_mount(cfg, S("jwt-nomad")));
        CHECK_OK(wid_identity_manager_builder_add_vault_login(b2, cfg));
        CHECK_RC(wid_identity_manager_builder_add_vault_login(b2, NULL), WID_RESULT_NULL_ARGUMENT);
        CHECK_RC(wid_identity_manager_builder_add_vault_login(
                     b2, (const wid_vault_login_config *)kr),
                 WID_RESULT_INVALID_ARGUMENT);
        wid_identity_manager_builder_free(b2);
        wid_vault_login_config_free(cfg);
    }
    wid_vault_login_config_free(NULL);

    /* The Consul login's config (the library is built with `consul`). */
    {
        wid_consul_login_config *ccfg = NULL;
        rc = wid_consul_login_config_new(S("https://consul.example.com:8501"), S("server"),
                                         S("vault_default"), S("nomad-workloads"), &ccfg);
        if (rc == WID_RESULT_INVALID_ARGUMENT) {
            CHECK(strstr(last_error(), "without the cargo feature `consul`") != NULL);
            CHECK(ccfg == NULL);
        } else {
            CHECK_OK(rc);
            CHECK_RC(wid_consul_login_config_set_service(ccfg, 7), WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_consul_login_config_set_timeout_ms(ccfg, 0), WID_RESULT_INVALID_ARGUMENT);
            CHECK_RC(wid_consul_login_config_set_meta(ccfg, S("k"), NULL, 1),
                     WID_RESULT_NULL_ARGUMENT);
            CHECK_RC(wid_consul_login_config_set_namespace(ccfg, S(BAD_UTF8)),
                     WID_RESULT_INVALID_ARGUMENT);
            CHECK_OK(wid_consul_login_config_set_meta(ccfg, S("cluster"), S("east")));
            CHECK_OK(wid_consul_login_config_set_node_id(ccfg, S("node-1")));
            CHECK_OK(wid_consul_login_config_set_datacenter(ccfg, S("dc1")));
            CHECK_OK(wid_consul_login_config_set_partition(ccfg, S("default")));
            CHECK_OK(wid_consul_login_config_set_leeway_ms(ccfg, 5000));
            CHECK_OK(wid_consul_login_config_set_min_ttl_ms(ccfg, 10000));
            CHECK_OK(wid_consul_login_config_set_allow_http_loopback(ccfg, 0));
            CHECK_RC(wid_consul_login_config_set_ca_bundle_pem(ccfg, NULL, 0),
                     WID_RESULT_INVALID_ARGUMENT);
            b2 = im_builder(kr, dir, &log);
            CHECK_OK(wid_consul_login_config_set_name(ccfg, S("x")));
            CHECK_OK(wid_identity_manager_builder_add_consul_login(b2, ccfg));
            CHECK_OK(wid_identity_manager_builder_set_issuer(b2, iss));
            /* Named as the host exchange: refused at build. */
            CHECK_RC(wid_identity_manager_builder_build(b2, &m), WID_RESULT_INVALID_ARGUMENT);
            CHECK(strstr(last_error(), "two exchanges are named") != NULL);
            CHECK_RC(wid_identity_manager_builder_add_consul_login(
                         b2, (const wid_consul_login_config *)kr),
                     WID_RESULT_INVALID_ARGUMENT);
            wid_identity_manager_builder_free(b2);
            wid_consul_login_config_free(ccfg);
        }
        wid_consul_login_config_free(NULL);
    }

out:
    wid_issuer_builder_free(ib);
    wid_issuer_free(iss);
    wid_keyring_free(kr);
}

/* ------------------------------------------------------------------------ */
/* Claims without a JSON parser                                             */
/* ------------------------------------------------------------------------ */

static int claim_is(const wid_claims *c, const char *name, const char *want) {
    const char *p = NULL;
    size_t n = 0;
    if (wid_claims_str(c, WID_STR(name), &p, &n) != WID_RESULT_OK) return 0;
    return n == strlen(want) && memcmp(p, want, n) == 0 && p[n] == '\0';
}

static void test_claims_accessors(void) {
    wid_keyring *kr = keyring_with_key("claims-1", 101);
    struct lookup_ctx ctx;
    wid_verifier *v;
    wid_bytes token = issue(kr, NOW), json = {NULL, 0};
    wid_claims *c = NULL, *none = (wid_claims *)(uintptr_t)0x40, *parsed = NULL;
    const char *p = SENTINEL_PTR_C;
    size_t n = SENTINEL_LEN, count = 0, i;
    int64_t t = -1;
    int aud_vault = 0, aud_consul = 0;

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    v = verifier_for(kr, &ctx);
    CHECK_OK(wid_verify_claims(v, (const char *)token.data, token.len, NOW + 1, &c));
    CHECK(claim_is(c, WID_CLAIM_ALLOCATION_ID, ALLOC_ID));
    CHECK(claim_is(c, WID_CLAIM_NAMESPACE, "default"));
    CHECK(claim_is(c, WID_CLAIM_JOB_ID, "web"));
    CHECK(claim_is(c, WID_CLAIM_TASK, "server"));
    CHECK_RC(wid_claims_str(c, WID_STR(WID_CLAIM_SERVICE), &p, &n), WID_RESULT_INVALID_ARGUMENT);
    CHECK(strstr(last_error(), "is not in the token") != NULL);
    CHECK(p == SENTINEL_PTR_C && n == SENTINEL_LEN);
    CHECK_OK(wid_claims_i64(c, WID_STR(WID_CLAIM_ISSUED_AT), &t));
    CHECK(t == NOW);
    CHECK_OK(wid_claims_i64(c, WID_STR(WID_CLAIM_EXPIRES), &t));
    CHECK(t == NOW + TTL);
    CHECK_RC(wid_claims_i64(c, WID_STR(WID_CLAIM_TASK), &t), WID_RESULT_INVALID_ARGUMENT);
    CHECK(t == NOW + TTL);
    CHECK_OK(wid_claims_audience_count(c, &count));
    CHECK(count == 2);
    for (i = 0; i < count; i++) {
        CHECK_OK(wid_claims_audience(c, i, &p, &n));
        aud_vault |= n == 8 && memcmp(p, "vault.io", 8) == 0;
        aud_consul |= n == 9 && memcmp(p, "consul.io", 9) == 0;
    }
    CHECK(aud_vault && aud_consul);
    CHECK_RC(wid_claims_audience(c, count, &p, &n), WID_RESULT_INVALID_ARGUMENT);
    CHECK_OK(wid_claims_identity_name(c, &p, &n));
    CHECK(n == 13 && memcmp(p, "vault_default", 13) == 0);
    /* NULLs, wrong handles, an expired token: nothing written. */
    CHECK_RC(wid_claims_str(NULL, WID_STR(WID_CLAIM_TASK), &p, &n), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_claims_str(c, WID_STR(WID_CLAIM_TASK), NULL, &n), WID_RESULT_NULL_ARGUMENT);
    CHECK_RC(wid_claims_audience_count((const wid_claims *)kr, &count),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_verify_claims(v, (const char *)token.data, token.len, NOW + 10 * TTL, &none),
             WID_RESULT_EXPIRED);
    CHECK(none == (wid_claims *)(uintptr_t)0x40);
    CHECK_RC(wid_verify_claims(v, (const char *)token.data, token.len, NOW, NULL),
             WID_RESULT_NULL_ARGUMENT);
    /* The JSON wid_verify writes reads the same. */
    CHECK_OK(wid_verify(v, (const char *)token.data, token.len, NOW + 1, &json));
    CHECK_OK(wid_claims_parse(json.data, json.len, &parsed));
    CHECK(claim_is(parsed, WID_CLAIM_ALLOCATION_ID, ALLOC_ID));
    CHECK_RC(wid_claims_parse((const uint8_t *)"[1]", 3, &none), WID_RESULT_INVALID_ARGUMENT);
    CHECK(none == (wid_claims *)(uintptr_t)0x40);
    wid_claims_free(parsed);
    wid_claims_free(c);
    wid_claims_free(NULL);
    wid_bytes_free(&json);
    wid_bytes_free(&token);
    wid_verifier_free(v);
    wid_keyring_free(kr);
}

/* wid_trust_set: issuers by iss (with the allocation lookup, and foreign
 * without one), routing that names the issuer, cross-issuer substitution and
 * unknown issuers refused, builder refusals, outputs only on success. */
static void test_trust_set(void) {
    wid_keyring *east = keyring_with_key("k1", 41);
    wid_keyring *west = keyring_with_key("k1", 42);
    struct lookup_ctx ctx;
    wid_trust_set_builder *b = NULL;
    wid_trust_set *t = NULL, *t2 = NULL;
    wid_bytes e = {NULL, 0}, w = {NULL, 0}, forged = {NULL, 0}, evil = {NULL, 0};
    wid_bytes claims = sentinel_bytes(), iss = sentinel_bytes();

    ctx_init(&ctx, WID_ALLOC_LIVE, WID_ALLOC_LIVE);
    CHECK_OK(wid_issue_with_issuer(east, wid_sample_request, wid_sample_request_len,
                                   S("https://east"), NOW, &e));
    CHECK_OK(wid_issue_with_issuer(west, wid_sample_request, wid_sample_request_len,
                                   S("https://west"), NOW, &w));
    CHECK_OK(wid_issue_with_issuer(west, wid_sample_request, wid_sample_request_len,
                                   S("https://east"), NOW, &forged));
    CHECK_OK(wid_issue_with_issuer(east, wid_sample_request, wid_sample_request_len,
                                   S("https://evil"), NOW, &evil));

    CHECK_RC(wid_trust_set_builder_new(NULL), WID_RESULT_NULL_ARGUMENT);
    CHECK_OK(wid_trust_set_builder_new(&b));
    CHECK_RC(wid_trust_set_builder_build(b, &t), WID_RESULT_INVALID_ARGUMENT); /* no issuer */
    CHECK(t == NULL);
    CHECK_OK(wid_trust_set_builder_add_iss(b, S("https://east"), east, S(AUD), lookup, &ctx));
    CHECK_OK(wid_trust_set_builder_add_iss(b, S("https://west"), west, S(AUD), NULL, NULL));
    CHECK_RC(wid_trust_set_builder_add_iss(b, S(""), east, S(AUD), NULL, NULL),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_trust_set_builder_add_trust_domain(b, S("Upper.Example"), east, S(AUD), NULL,
                                                    NULL),
             WID_RESULT_INVALID_ARGUMENT);
    CHECK_RC(wid_trust_set_builder_add_iss(b, S("https://x"), NULL, S(AUD), NULL, NULL),
             WID_RESULT_NULL_ARGUMENT);
    CHECK_OK(wid_trust_set_builder_build(b, &t));

    CHECK_OK(wid_trust_set_verify(t, (const char *)e.data, e.len, NOW, &claims, &iss));
    CHECK(bytes_eq(&iss, "https://east"));
    CHECK(bytes_contain(&claims, ALLOC_ID));
    wid_bytes_free(&claims);
    wid_bytes_free(&iss);
    CHECK_OK(wid_trust_set_verify(t, (const char *)w.data, w.len, NOW, NULL, &iss));
    CHECK(bytes_eq(&iss, "https://west"));
    wid_bytes_free(&iss);
    claims = sentinel_bytes();
    CHECK_RC(wid_trust_set_verify(t, (const char *)forged.data, forged.len, NOW, &claims, NULL),
             WID_RESULT_BAD_SIGNATURE);
    CHECK(is_sentinel(&claims));
    CHECK_RC(wid_trust_set_verify(t, (const char *)evil.data, evil.len, NOW, NULL, NULL),
             WID_RESULT_ISSUER_MISMATCH);
    CHECK_RC(wid_trust_set_verify(NULL, (const char *)e.data, e.len, NOW, NULL, NULL),
             WID_RESULT_NULL_ARGUMENT);

    /* A second issuer under one iss: refused when built; the first set lives on. */
    CHECK_OK(wid_trust_set_builder_add_iss(b, S("https://east"), west, S(AUD), NULL, NULL));
    CHECK_RC(wid_trust_set_builder_build(b, &t2), WID_RESULT_INVALID_ARGUMENT);
    CHECK(t2 == NULL);
    wid_trust_set_builder_free(b);
    CHECK_OK(wid_trust_set_verify(t, (const char *)e.data, e.len, NOW, NULL, NULL));

    wid_bytes_free(&e);
    wid_bytes_free(&w);
    wid_bytes_free(&forged);
    wid_bytes_free(&evil);
    wid_trust_set_free(t);
    wid_trust_set_free(NULL);
    wid_trust_set_builder_free(NULL);
    wid_keyring_free(east);
    wid_keyring_free(west);
}

int main(void) {
    test_versions_and_names();
    test_last_error_message();
    test_frees_are_null_safe();
    test_null_arguments();
    test_keyring_argument_checks();
    test_huge_lengths();
    test_issue_decoding();
    test_request_encoder_and_ttl();
    test_verify_flows();
    test_rotation_seen_by_verifier();
    test_jwks_import();
    test_save_load();
    test_wrapped_keystores();
    test_issuer();
    test_batch();
    test_wrong_handle_type();
    test_handle_lifetimes();
    test_threads();
    test_overlong_tokens_unread();
    test_algorithms();
    test_proof_round_trip();
    test_proof_arguments();
    test_issuer_builder_arguments();
    test_spiffe_issuance();
    test_extra_claims_issuance();
    test_issuer_wits();
    test_key_purposes();
    test_request_encoder_extra_fields();
    test_verifier_builder_arguments();
    test_verifier_builder_options();
    test_explain_and_stats();
    test_remote_jwks_arguments();
    test_remote_jwks_flows();
    test_node_request_encoder();
    test_node_issue_arguments();
    test_node_setter_arguments();
    test_node_verify_flows();
    test_issuer_node_identities();
    test_node_manager_arguments();
    test_node_manager_flows();
    test_identity_manager_flows();
    test_identity_manager_arguments();
    test_claims_accessors();
    test_trust_set();

    printf("c tests: %lu checks, %lu failed\n", g_checks, g_failed);
    return g_failed == 0 ? 0 : 1;
}
