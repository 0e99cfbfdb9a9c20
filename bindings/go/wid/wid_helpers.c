// C glue for package wid; see wid_helpers.h.

#include <stdlib.h>
#include <string.h>

#include "wid_helpers.h"
#include "_cgo_export.h"

static _Thread_local char wid_go_thread_marker;

uintptr_t wid_go_thread_key(void) {
    return (uintptr_t)&wid_go_thread_marker;
}

// The wid_alloc_lookup_fn handed to the library: forwards to the Go export
// with the calling thread's key, so that the Go side can hand a store error
// back to the Verify call that caused it.
static wid_result wid_go_lookup(void *userdata, const uint8_t *alloc_id,
                                size_t alloc_id_len, uint32_t consistency,
                                uint32_t *out_state) {
    return widGoLookup((uintptr_t)userdata, wid_go_thread_key(),
                       (uint8_t *)alloc_id, alloc_id_len, consistency,
                       out_state);
}

wid_result wid_go_verifier_builder_new(const wid_keyring *kr,
                                       const char *audience, size_t audience_len,
                                       uintptr_t handle,
                                       wid_verifier_builder **out) {
    return wid_verifier_builder_new(kr, wid_go_lookup, (void *)handle, audience,
                                    audience_len, out);
}

wid_result wid_go_trust_set_builder_add(wid_trust_set_builder *b, int by_trust_domain,
                                        const char *name, size_t name_len,
                                        const wid_keyring *kr, const char *audience,
                                        size_t audience_len, uintptr_t handle) {
    wid_alloc_lookup_fn lookup = handle != 0 ? wid_go_lookup : NULL;
    if (by_trust_domain) {
        return wid_trust_set_builder_add_trust_domain(b, name, name_len, kr, audience,
                                                      audience_len, lookup, (void *)handle);
    }
    return wid_trust_set_builder_add_iss(b, name, name_len, kr, audience, audience_len,
                                         lookup, (void *)handle);
}

// The wid_node_lookup_fn handed to the library, as wid_go_lookup.
static wid_result wid_go_node_lookup(void *userdata, const uint8_t *node_id,
                                     size_t node_id_len, uint32_t consistency,
                                     uint32_t *out_state) {
    return widGoNodeLookup((uintptr_t)userdata, wid_go_thread_key(),
                           (uint8_t *)node_id, node_id_len, consistency,
                           out_state);
}

wid_result wid_go_verifier_builder_set_node_lookup(wid_verifier_builder *b,
                                                   uintptr_t handle) {
    return wid_verifier_builder_set_node_lookup(b, wid_go_node_lookup,
                                                (void *)handle);
}

wid_result wid_go_verify_batch(const wid_verifier *v, const char *buf,
                               const size_t *lens, size_t count,
                               int64_t now_unix, wid_result *out_results) {
    if (count == 0) {
        return wid_verify_batch(v, NULL, NULL, 0, now_unix, out_results);
    }
    const char **ptrs = malloc(count * sizeof *ptrs);
    if (ptrs == NULL) {
        return WID_RESULT_IO_ERROR;
    }
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        ptrs[i] = buf == NULL ? NULL : buf + off;
        off += lens[i];
    }
    wid_result rc = wid_verify_batch(v, ptrs, lens, count, now_unix, out_results);
    free(ptrs);
    return rc;
}

wid_result wid_go_verify(uintptr_t v, const char *token,
                         size_t token_len, int64_t now_unix, char *buf,
                         size_t cap, size_t *out_len, wid_bytes *out_big) {
    wid_bytes claims = {NULL, 0};
    wid_result rc = wid_verify((const wid_verifier *)v, token, token_len, now_unix,
                               &claims);
    if (rc != WID_RESULT_OK) {
        return rc;
    }
    *out_len = claims.len;
    if (claims.len <= cap) {
        if (claims.len > 0) {
            memcpy(buf, claims.data, claims.len);
        }
        wid_bytes_free(&claims);
    } else {
        *out_big = claims;
    }
    return rc;
}

// The identity manager's callbacks: each forwards to its Go export
// (identity_manager_callbacks.go) with the cgo.Handle value it was given as
// userdata. They run on the thread that called wid_identity_manager_start,
// _restore or _tick (a goroutine's, inside that cgo call).
static wid_result wid_go_im_sign(void *userdata, const uint8_t *request,
                                 size_t request_len, int64_t now_unix,
                                 wid_output *out_token) {
    return widGoSign((uintptr_t)userdata, (uint8_t *)request, request_len,
                     now_unix, out_token);
}

static wid_result wid_go_im_derive(void *userdata, const char *token,
                                   size_t token_len, int64_t now_ms,
                                   wid_output *out_secret,
                                   int64_t *out_refresh_at_ms) {
    return widGoDerive((uintptr_t)userdata, (char *)token, token_len, now_ms,
                       out_secret, out_refresh_at_ms);
}

static wid_result wid_go_im_refresh(void *userdata, const char *secret,
                                    size_t secret_len, const char *token,
                                    size_t token_len, uint32_t reason,
                                    int64_t now_ms, uint32_t *out_outcome,
                                    wid_output *out_new_secret,
                                    int64_t *out_refresh_at_ms) {
    return widGoRefresh((uintptr_t)userdata, (char *)secret, secret_len,
                        (char *)token, token_len, reason, now_ms, out_outcome,
                        out_new_secret, out_refresh_at_ms);
}

static void wid_go_im_release(void *userdata, const char *secret,
                              size_t secret_len) {
    widGoRelease((uintptr_t)userdata, (char *)secret, secret_len);
}

static void wid_go_im_watch(void *userdata, uint32_t what,
                            const char *workload, size_t workload_len,
                            const char *name, size_t name_len,
                            const char *value, size_t value_len,
                            uint32_t kind) {
    widGoWatch((uintptr_t)userdata, what, (char *)workload, workload_len,
               (char *)name, name_len, (char *)value, value_len, kind);
}

wid_result wid_go_identity_manager_builder_set_signer(wid_identity_manager_builder *b,
                                                      uintptr_t handle) {
    return wid_identity_manager_builder_set_signer(b, wid_go_im_sign,
                                                   (void *)handle);
}

wid_result wid_go_identity_manager_builder_set_watcher(wid_identity_manager_builder *b,
                                                       uintptr_t handle) {
    return wid_identity_manager_builder_set_watcher(b, wid_go_im_watch,
                                                    (void *)handle);
}

wid_result wid_go_identity_manager_builder_add_exchange(wid_identity_manager_builder *b,
                                                        const char *name, size_t name_len,
                                                        const char *workload, size_t workload_len,
                                                        const char *identity, size_t identity_len,
                                                        uintptr_t handle) {
    return wid_identity_manager_builder_add_exchange(
        b, name, name_len, workload, workload_len, identity, identity_len,
        wid_go_im_derive, wid_go_im_refresh, wid_go_im_release, (void *)handle);
}
