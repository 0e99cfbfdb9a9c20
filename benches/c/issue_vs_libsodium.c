/* wid_issue beside libsodium's Ed25519 signature, in wall time: the C ABI's
 * whole issuance (decoding the Go-encoded msgpack request, building the
 * claims and the token, the signature, the copy out) against the bare
 * crypto_sign_detached of the same signing input with the same key, in
 * alternating rounds in one process. Built and run by
 * scripts/bench-c-issue.sh; prints each round's ratio and the median.
 *
 * Usage: issue_vs_libsodium REQUEST.msgpack [rounds] [calls per round] */
#define _POSIX_C_SOURCE 199309L
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "workload_identity.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = malloc(1 << 16);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s REQUEST.msgpack [rounds] [calls]\n", argv[0]);
        return 2;
    }
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    int calls = argc > 3 ? atoi(argv[3]) : 2000;
    const int64_t now = 1700000000;
    size_t req_len = 0;
    unsigned char *req = read_file(argv[1], &req_len);
    if (!req || req_len == 0 || sodium_init() < 0) {
        fprintf(stderr, "cannot read %s or start libsodium\n", argv[1]);
        return 1;
    }
    unsigned char seed[32];
    memset(seed, 7, sizeof seed);
    wid_keyring *kr = NULL;
    if (wid_keyring_new(&kr) != WID_RESULT_OK ||
        wid_keyring_insert(kr, "k", 1, seed, 32, WID_KEY_DERIVATION_NOMAD_RAW_SEED,
                           WID_KEY_STATE_ACTIVE, 0) != WID_RESULT_OK) {
        fprintf(stderr, "cannot make the keyring\n");
        return 1;
    }
    /* The signing input of the token wid_issue makes, for libsodium. */
    wid_bytes token = {0};
    if (wid_issue(kr, req, req_len, now, &token) != WID_RESULT_OK) {
        fprintf(stderr, "wid_issue failed\n");
        return 1;
    }
    size_t input_len = (size_t)(strrchr((const char *)token.data, '.') - (const char *)token.data);
    unsigned char *input = malloc(input_len);
    memcpy(input, token.data, input_len);
    wid_bytes_free(&token);
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    crypto_sign_seed_keypair(pk, sk, seed);
    unsigned char sig[crypto_sign_BYTES];

    double *ratio = calloc((size_t)rounds, sizeof *ratio);
    double issue_best = 1e30, sign_best = 1e30;
    volatile unsigned char sink = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (int i = 0; i < calls; i++) {
            wid_bytes t = {0};
            if (wid_issue(kr, req, req_len, now, &t) != WID_RESULT_OK) return 1;
            sink ^= t.data[0];
            wid_bytes_free(&t);
        }
        double t1 = now_ns();
        for (int i = 0; i < calls; i++) {
            crypto_sign_detached(sig, NULL, input, input_len, sk);
            sink ^= sig[0];
        }
        double t2 = now_ns();
        double issue = (t1 - t0) / calls, sign = (t2 - t1) / calls;
        ratio[r] = issue / sign;
        if (issue < issue_best) issue_best = issue;
        if (sign < sign_best) sign_best = sign;
        printf("round %2d: wid_issue %.2f us, crypto_sign_detached %.2f us, ratio %.3f\n", r + 1,
               issue / 1e3, sign / 1e3, ratio[r]);
    }
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmp_double);
    printf("signing input %zu bytes; best wid_issue %.2f us, best crypto_sign_detached %.2f us\n",
           input_len, issue_best / 1e3, sign_best / 1e3);
    printf("median ratio %.3f (min %.3f, max %.3f) over %d rounds of %d calls each\n",
           ratio[rounds / 2], ratio[0], ratio[rounds - 1], rounds, calls);
    wid_keyring_free(kr);
    free(ratio);
    free(input);
    free(req);
    return sink == 255 ? 0 : 0;
}
