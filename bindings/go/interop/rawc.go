package interop

// #cgo LDFLAGS: -lpthread -ldl -lm
// #include <stdlib.h>
// #include "workload_identity.h"
//
// /* The cheapest lookup: every allocation is live (no Go callback). */
// static wid_result raw_live(void *userdata, const uint8_t *alloc_id,
//                            size_t alloc_id_len, uint32_t consistency,
//                            uint32_t *out_state) {
//     (void)userdata; (void)alloc_id; (void)alloc_id_len; (void)consistency;
//     *out_state = WID_ALLOC_LIVE;
//     return WID_RESULT_OK;
// }
//
// static wid_result raw_verifier_new(const char *path, size_t path_len,
//                                    const char *aud, size_t aud_len,
//                                    wid_verifier **out) {
//     wid_keyring *kr = NULL;
//     wid_result rc = wid_keyring_load(path, path_len, &kr);
//     if (rc != WID_RESULT_OK) {
//         return rc;
//     }
//     rc = wid_verifier_new_with_options(kr, aud, aud_len, NULL, raw_live, NULL, out);
//     wid_keyring_free(kr);
//     return rc;
// }
//
// /* wid_verify as a C caller makes it: claims JSON wanted, then freed. */
// /* v is the handle as an integer, so cgo has no pointer to check. */
// static wid_result raw_verify(uintptr_t v, const char *token,
//                              size_t token_len, int64_t now) {
//     wid_bytes claims = {NULL, 0};
//     wid_result rc = wid_verify((const wid_verifier *)v, token, token_len, now, &claims);
//     wid_bytes_free(&claims);
//     return rc;
// }
import "C"

import (
	"fmt"
	"unsafe"
)

// rawVerifier is a wid_verifier made through the C ABI alone, with a C
// lookup that answers "live" for every allocation: the floor under
// wid.Verifier.Verify, for BenchmarkVerifyRawC. Test support only.
type rawVerifier struct{ v *C.wid_verifier }

// newRawVerifier loads the keyring saved at path into its own handle (the
// same keys) and makes a verifier for audience with the default options.
func newRawVerifier(path, audience string) (*rawVerifier, error) {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	a := C.CString(audience)
	defer C.free(unsafe.Pointer(a))
	var v *C.wid_verifier
	if rc := C.raw_verifier_new(p, C.size_t(len(path)), a, C.size_t(len(audience)), &v); rc != C.WID_RESULT_OK {
		return nil, fmt.Errorf("raw verifier: %s", C.GoString(C.wid_result_name(rc)))
	}
	return &rawVerifier{v: v}, nil
}

// verify is one cgo crossing: wid_verify (claims JSON out) + wid_bytes_free.
// token is passed without copying (the library only reads it, during the call).
func (r *rawVerifier) verify(token []byte, now int64) error {
	var p *C.char
	if len(token) > 0 {
		p = (*C.char)(unsafe.Pointer(&token[0]))
	}
	if rc := C.raw_verify(C.uintptr_t(uintptr(unsafe.Pointer(r.v))), p, C.size_t(len(token)), C.int64_t(now)); rc != C.WID_RESULT_OK {
		return fmt.Errorf("raw verify: %s", C.GoString(C.wid_result_name(rc)))
	}
	return nil
}

func (r *rawVerifier) close() { C.wid_verifier_free(r.v) }
