/*
 * C glue for package wid (cgo). Not part of the library's ABI.
 */
#ifndef WID_GO_HELPERS_H
#define WID_GO_HELPERS_H

#include <stddef.h>
#include <stdint.h>

#include "wid_header.h" /* workload_identity.h, or how to find it */
#ifndef WID_GO_HEADER_MISSING

/* wid_trust_set_builder_add_iss (by_trust_domain 0) or _add_trust_domain
 * (1) with the C trampoline as the lookup and the cgo.Handle value `handle`
 * as userdata; handle 0: no lookup (foreign tokens). */
wid_result wid_go_trust_set_builder_add(wid_trust_set_builder *b, int by_trust_domain,
                                        const char *name, size_t name_len,
                                        const wid_keyring *kr, const char *audience,
                                        size_t audience_len, uintptr_t handle);

/* wid_verifier_builder_new with the C trampoline as the lookup and the
 * cgo.Handle value `handle` as userdata (so that C keeps no Go pointer). */
wid_result wid_go_verifier_builder_new(const wid_keyring *kr,
                                       const char *audience, size_t audience_len,
                                       uintptr_t handle,
                                       wid_verifier_builder **out);

/* wid_verifier_builder_set_node_lookup with the C trampoline of
 * widGoNodeLookup and the cgo.Handle value `handle` as userdata. */
wid_result wid_go_verifier_builder_set_node_lookup(wid_verifier_builder *b,
                                                   uintptr_t handle);

/* wid_verify_batch over `count` tokens laid end to end in `buf`
 * (`lens[i]` bytes each). The pointer array lives in C memory. */
wid_result wid_go_verify_batch(const wid_verifier *v, const char *buf,
                               const size_t *lens, size_t count,
                               int64_t now_unix, wid_result *out_results);

/* wid_verify in one crossing: on success the claims JSON is copied into
 * `buf` (`cap` bytes, Go memory valid during the call) when it fits and
 * freed, `*out_len` being its length; when it does not fit, `*out_len` is
 * still its length and `*out_big` receives the library's bytes (the caller
 * copies and frees them). Nothing is written on failure. `v` is the
 * wid_verifier handle as an integer: cgo then has no pointer to check (its
 * check would cost the call a heap allocation). */
wid_result wid_go_verify(uintptr_t v, const char *token,
                         size_t token_len, int64_t now_unix, char *buf,
                         size_t cap, size_t *out_len, wid_bytes *out_big);

/* Identity manager glue: each sets the C trampoline of a Go export as the
 * callback, with the cgo.Handle value `handle` as userdata (so that C keeps
 * no Go pointer). See identity_manager.go. */
wid_result wid_go_identity_manager_builder_set_signer(wid_identity_manager_builder *b,
                                                      uintptr_t handle);
wid_result wid_go_identity_manager_builder_set_watcher(wid_identity_manager_builder *b,
                                                       uintptr_t handle);
wid_result wid_go_identity_manager_builder_add_exchange(wid_identity_manager_builder *b,
                                                        const char *name, size_t name_len,
                                                        const char *workload, size_t workload_len,
                                                        const char *identity, size_t identity_len,
                                                        uintptr_t handle);

/* A value unique to the calling OS thread while it lives. */
uintptr_t wid_go_thread_key(void);

#endif /* WID_GO_HEADER_MISSING */

#endif
