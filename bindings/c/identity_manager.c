/*
 * identity_manager.c: one allocation's identity kept by a
 * wid_identity_manager from C, across a restart (seed 001: a restored
 * workload must never run with an empty or dead secret).
 *
 * A client signs in process (a wid_issuer; a scheduler's client would set a
 * signer callback that asks its servers) and derives a secret with its own
 * token exchange (a Vault or Consul login is one setter away:
 * wid_identity_manager_builder_add_vault_login). It starts, "restarts" (a
 * second manager on the same state directory) and restores: the saved
 * secret is confirmed by the exchange's refresh callback, not derived again.
 *
 * docs/c.md shows this file; scripts/c-tests.sh builds it with -Werror and
 * runs it under valgrind.
 *
 *   identity_manager STATE_DIR
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "workload_identity.h"
#include "sample_request.h" /* a msgpack IssueRequest: task "server", identity "vault_default" */

#define T0 ((int64_t)1700000000000) /* Unix milliseconds (tests pass times in) */

/* The host's exchange: derives a secret from the identity token. */
static wid_result derive(void *userdata, const char *token, size_t token_len, int64_t now_ms,
                         wid_output *out_secret, int64_t *out_refresh_at_ms) {
    static const char secret[] = "s.secret-for-this-token";
    (void)userdata;
    (void)token;
    (void)token_len;
    *out_refresh_at_ms = now_ms + 10 * 60 * 1000; /* look at it again in 10 min */
    return wid_output_set(out_secret, (const uint8_t *)secret, sizeof secret - 1);
}

/* After a restart (reason WID_REFRESH_REASON_RESTORED): confirm the saved
 * secret still works (a real exchange asks its server) and keep it. */
static wid_result refresh(void *userdata, const char *secret, size_t secret_len,
                          const char *token, size_t token_len, uint32_t reason, int64_t now_ms,
                          uint32_t *out_outcome, wid_output *out_new_secret,
                          int64_t *out_refresh_at_ms) {
    (void)userdata, (void)secret, (void)secret_len, (void)token, (void)token_len;
    (void)reason, (void)out_new_secret;
    *out_refresh_at_ms = now_ms + 10 * 60 * 1000;
    *out_outcome = WID_REFRESHED_KEPT;
    return WID_RESULT_OK;
}

/* Told of every new token and secret, the token first. */
static void watch(void *userdata, uint32_t what, const char *workload, size_t workload_len,
                  const char *name, size_t name_len, const char *value, size_t value_len,
                  uint32_t kind) {
    (void)userdata, (void)value, (void)value_len; /* the token or secret: hand it to the workload */
    printf("%s %.*s/%.*s, %s\n", what == WID_MANAGED_IDENTITY ? "token" : "secret",
           (int)workload_len, workload, (int)name_len, name,
           kind == WID_EVENT_INITIAL ? "initial" : kind == WID_EVENT_RESTORED ? "restored" : "renewed");
}

/* A manager for the allocation: its identity, signer, exchange, watcher. */
static wid_identity_manager *manager(const wid_keyring *kr, const wid_issuer *iss, const char *dir) {
    wid_identity_manager_builder *b = NULL;
    wid_identity_manager *m = NULL;
    if (wid_identity_manager_builder_new(kr, dir, strlen(dir), &b) != WID_RESULT_OK) return NULL;
    if (wid_identity_manager_builder_add_identity(b, wid_sample_request, wid_sample_request_len) ||
        wid_identity_manager_builder_set_issuer(b, iss) ||
        wid_identity_manager_builder_add_exchange(b, "secrets", 7, "server", 6, "vault_default", 13,
                                                  derive, refresh, NULL, NULL) ||
        wid_identity_manager_builder_set_watcher(b, watch, NULL) ||
        wid_identity_manager_builder_build(b, &m))
        m = NULL;
    wid_identity_manager_builder_free(b);
    return m;
}

static int fail(const char *what) {
    char why[512];
    wid_last_error_message(why, sizeof why);
    fprintf(stderr, "%s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv) {
    uint8_t material[32] = {1, 2, 3};
    wid_keyring *kr = NULL;
    wid_issuer_builder *ib = NULL;
    wid_issuer *iss = NULL;
    wid_identity_manager *m;
    wid_bytes report = {NULL, 0}, secret = {NULL, 0};
    int64_t next = 0;
    int rc = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s STATE_DIR\n", argv[0]);
        return 2;
    }
    if (wid_keyring_new(&kr) ||
        wid_keyring_insert(kr, "k1", 2, material, sizeof material, WID_KEY_DERIVATION_HKDF_V1,
                           WID_KEY_STATE_ACTIVE, T0 / 1000) ||
        wid_issuer_builder_new(kr, &ib) || wid_issuer_builder_build(ib, &iss))
        return fail("keyring and issuer");

    /* A new allocation: sign, save, derive, deliver. */
    m = manager(kr, iss, argv[1]);
    if (m == NULL) return fail("manager");
    if (wid_identity_manager_start(m, T0)) rc = fail("start");
    wid_identity_manager_tick(m, T0 + 1000, &next); /* a host ticks at next */
    printf("next tick at +%lld ms\n", (long long)(next - T0));
    wid_identity_manager_free(m); /* the process "dies"; the state directory stays */

    /* The restart: restore, the saved secret confirmed before it is handed out. */
    m = manager(kr, iss, argv[1]);
    if (m == NULL) return fail("manager");
    if (wid_identity_manager_restore(m, T0 + 5000, &report)) rc = fail("restore");
    else printf("restore: %s\n", (const char *)report.data);
    if (wid_identity_manager_secret(m, "secrets", 7, &secret) == WID_RESULT_OK)
        printf("the workload's secret is %zu bytes\n", secret.len);
    else rc = fail("secret");

    wid_bytes_free(&report);
    wid_bytes_free(&secret);
    wid_identity_manager_free(m);
    wid_issuer_free(iss);
    wid_issuer_builder_free(ib);
    wid_keyring_free(kr);
    return rc;
}
