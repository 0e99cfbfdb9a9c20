/*
 * logins.c: the identity manager's built-in Vault and Consul logins from C,
 * against a real OpenBao and the Consul stand-in (tests/seed001/harness.py
 * runs it; docs/vault.md and docs/consul.md show its regions).
 *
 *   logins keys KEYSTORE JWKS_OUT
 *       makes a keyring with one EdDSA key, saves it (plaintext keystore,
 *       mode 0600) and writes its JWKS for the server's configuration
 *   logins vault|consul start|restore ADDR ROLE_OR_METHOD KEYSTORE STATE_DIR
 *       starts (or restores) the allocation's identity "vault_default" of task
 *       "server", logs in, and prints the login's secret as a fingerprint
 *       (never the secret): "secret <fnv64 hex> <initial|restored>"
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "workload_identity.h"
#include "sample_request.h" /* task "server", identity "vault_default", aud vault.io, consul.io */

static int fail(const char *what) {
    char why[1024];
    wid_last_error_message(why, sizeof why);
    fprintf(stderr, "logins: %s: %s\n", what, why);
    return 1;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A fingerprint of a secret, to compare runs without printing it. */
static unsigned long long fnv64(const uint8_t *p, size_t n) {
    unsigned long long h = 1469598103934665603ULL;
    while (n--) h = (h ^ *p++) * 1099511628211ULL;
    return h;
}

static int keys(const char *keystore, const char *jwks_out) {
    wid_keyring *kr = NULL;
    wid_bytes id = {NULL, 0}, jwks = {NULL, 0};
    FILE *f;
    if (wid_keyring_new(&kr) || wid_keyring_rotate(kr, now_ms() / 1000, &id) ||
        wid_keyring_save(kr, keystore, strlen(keystore)) || wid_keyring_jwks(kr, &jwks))
        return fail("keys");
    f = fopen(jwks_out, "w");
    if (f == NULL || fwrite(jwks.data, 1, jwks.len, f) != jwks.len || fclose(f) != 0) {
        perror(jwks_out);
        return 1;
    }
    wid_bytes_free(&id);
    wid_bytes_free(&jwks);
    wid_keyring_free(kr);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode, *step, *addr, *name, *keystore, *dir;
    wid_keyring *kr = NULL;
    wid_issuer_builder *ib = NULL;
    wid_issuer *iss = NULL;
    wid_identity_manager_builder *b = NULL;
    wid_identity_manager *m = NULL;
    wid_bytes secret = {NULL, 0};
    const char *exchange;
    int64_t t;
    int rc = 0;

    if (argc == 4 && strcmp(argv[1], "keys") == 0) return keys(argv[2], argv[3]);
    if (argc != 7) {
        fprintf(stderr, "usage: logins keys KEYSTORE JWKS_OUT\n"
                        "       logins vault|consul start|restore ADDR ROLE_OR_METHOD KEYSTORE STATE_DIR\n");
        return 2;
    }
    mode = argv[1], step = argv[2], addr = argv[3], name = argv[4], keystore = argv[5], dir = argv[6];
    if (wid_keyring_load(keystore, strlen(keystore), &kr) || wid_issuer_builder_new(kr, &ib) ||
        wid_issuer_builder_build(ib, &iss) ||
        wid_identity_manager_builder_new(kr, dir, strlen(dir), &b) ||
        wid_identity_manager_builder_add_identity(b, wid_sample_request, wid_sample_request_len) ||
        wid_identity_manager_builder_set_issuer(b, iss))
        return fail("setup");

    if (strcmp(mode, "vault") == 0) {
        /* doc:begin vault */
        wid_vault_login_config *vault = NULL;
        /* addr: "https://vault.example.com:8200"; name: the JWT auth role */
        if (wid_vault_login_config_new(addr, strlen(addr), "server", 6, "vault_default", 13,
                                       name, strlen(name), &vault) ||
            wid_vault_login_config_set_mount(vault, "jwt", 3) ||
            wid_vault_login_config_set_min_ttl_ms(vault, 2000) || /* below the role's token_ttl */
            wid_vault_login_config_set_allow_http_loopback(vault, 1) || /* a dev server */
            wid_identity_manager_builder_add_vault_login(b, vault))
            rc = fail("vault login");
        wid_vault_login_config_free(vault); /* the builder keeps what it needs */
        exchange = "vault"; /* its default name: wid_identity_manager_secret(m, "vault", ...) */
        /* doc:end vault */
    } else {
        /* doc:begin consul */
        wid_consul_login_config *consul = NULL;
        /* addr: "https://consul.example.com:8501"; name: the JWT auth method */
        if (wid_consul_login_config_new(addr, strlen(addr), "server", 6, "vault_default", 13,
                                        name, strlen(name), &consul) ||
            wid_consul_login_config_set_node_id(consul, "node-1", 6) || /* Meta node_id */
            wid_consul_login_config_set_allow_http_loopback(consul, 1) || /* a dev agent */
            wid_identity_manager_builder_add_consul_login(b, consul))
            rc = fail("consul login");
        wid_consul_login_config_free(consul);
        exchange = "consul";
        /* doc:end consul */
    }
    if (rc == 0 && wid_identity_manager_builder_build(b, &m)) rc = fail("build");
    if (rc == 0) {
        /* doc:begin run */
        t = now_ms();
        if (strcmp(step, "start") == 0 ? wid_identity_manager_start(m, t)
                                       : wid_identity_manager_restore(m, t, NULL))
            rc = fail(step); /* the login failed: nothing was handed out */
        else if (wid_identity_manager_secret(m, exchange, strlen(exchange), &secret))
            rc = fail("secret");
        else
            printf("secret %016llx %s\n", fnv64(secret.data, secret.len),
                   strcmp(step, "start") == 0 ? "initial" : "restored");
        /* doc:end run */
    }
    if (secret.data != NULL) memset(secret.data, 0, secret.len);
    wid_bytes_free(&secret);
    wid_identity_manager_free(m);
    wid_identity_manager_builder_free(b);
    wid_issuer_free(iss);
    wid_issuer_builder_free(ib);
    wid_keyring_free(kr);
    return rc;
}
