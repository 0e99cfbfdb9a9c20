package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime"
	"sync"
)

// KeyWrapper is a key-encryption key for wrapped keystores (a
// wid_key_wrapper handle): a local KEK file or a Vault/OpenBao Transit key.
// A keystore saved with one (Keyring.SaveWrapped) holds no plaintext key and
// loads only with the same KEK (LoadKeyringWrapped). Safe for concurrent use.
type KeyWrapper struct {
	mu sync.RWMutex
	w  *C.wid_key_wrapper
}

func wrapWrapper(w *C.wid_key_wrapper) *KeyWrapper {
	kw := &KeyWrapper{w: w}
	runtime.SetFinalizer(kw, (*KeyWrapper).Close)
	return kw
}

// NewKEKFileWrapper reads a KEK file: exactly 32 raw bytes, or 44
// standard-base64 characters and an optional newline. A file group or others
// can access is refused (ErrIOError, naming its mode).
func NewKEKFileWrapper(path string) (*KeyWrapper, error) {
	var w *C.wid_key_wrapper
	err := call(func() C.wid_result {
		p, n := strIn(path)
		return C.wid_key_wrapper_kek_file(p, n, &w)
	})
	if err != nil {
		return nil, err
	}
	return wrapWrapper(w), nil
}

// NewTransitWrapper uses the Vault/OpenBao Transit encryption key `key` (type
// aes256-gcm96) at addr (https; http only to a loopback host). mount "" is
// "transit"; token "" takes VAULT_TOKEN, then BAO_TOKEN, from the
// environment; caPEM nil trusts the Mozilla roots, else only that PEM
// bundle (an empty, non-nil caPEM is refused). The C library must be built with its `transit` feature (cargo build
// --release -p workload-identity-ffi --features transit; not a default);
// otherwise this fails with ErrInvalidArgument saying so.
func NewTransitWrapper(addr, mount, key, token string, caPEM []byte) (*KeyWrapper, error) {
	if caPEM != nil && len(caPEM) == 0 {
		// An empty file read as the bundle must not mean "trust the
		// Mozilla roots".
		return nil, &Error{Code: ResultInvalidArgument, Message: "caPEM is empty: give a PEM bundle, or nil for the Mozilla roots"}
	}
	var w *C.wid_key_wrapper
	err := call(func() C.wid_result {
		a, an := strIn(addr)
		m, mn := strIn(mount)
		k, kn := strIn(key)
		t, tn := strIn(token)
		c, cn := bytesIn(caPEM)
		var ca *C.uint8_t
		if caPEM != nil {
			ca = (*C.uint8_t)(ptr(c))
		}
		return C.wid_key_wrapper_transit(a, an, m, mn, k, kn, t, tn, ca, cn, &w)
	})
	if err != nil {
		return nil, err
	}
	return wrapWrapper(w), nil
}

// Close releases the handle. Idempotent; later uses fail with
// ErrNullArgument.
func (kw *KeyWrapper) Close() {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if kw.w != nil {
		C.wid_key_wrapper_free(kw.w)
		kw.w = nil
		runtime.SetFinalizer(kw, nil)
	}
}

// handle returns the live handle with the read lock held (release it with
// the returned func): nil for a nil wrapper (which means plaintext where a
// call allows it), and an error for a closed one, so a closed wrapper is
// never taken for "no wrapper".
func (kw *KeyWrapper) handle() (*C.wid_key_wrapper, func(), error) {
	if kw == nil {
		return nil, func() {}, nil
	}
	kw.mu.RLock()
	if kw.w == nil {
		kw.mu.RUnlock()
		return nil, func() {}, errClosed("KeyWrapper")
	}
	return kw.w, kw.mu.RUnlock, nil
}

// SaveWrapped saves the keyring to path as a wrapped keystore (version 3):
// every key's material wrapped by w, mode 0600, crash-safe.
func (k *Keyring) SaveWrapped(path string, w *KeyWrapper) error {
	h, done, err := w.handle()
	if err != nil {
		return err
	}
	defer done()
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		p, n := strIn(path)
		return C.wid_keyring_save_wrapped(kr, p, n, h)
	})
}

// LoadKeyringWrapped loads a keystore wrapped by w. Without its KEK, with
// another, or after any change to a wrapped key it fails with
// ErrKeyCustodyFailed, saying which; a plaintext keystore is refused too
// (RewrapKeystore wraps it).
func LoadKeyringWrapped(path string, w *KeyWrapper) (*Keyring, error) {
	h, done, err := w.handle()
	if err != nil {
		return nil, err
	}
	defer done()
	var kr *C.wid_keyring
	err = call(func() C.wid_result {
		p, n := strIn(path)
		return C.wid_keyring_load_wrapped(p, n, h, &kr)
	})
	if err != nil {
		return nil, err
	}
	return wrapKeyring(kr), nil
}

// RewrapKeystore converts the keystore at path in place: read with from (nil:
// plaintext), written wrapped by to (nil: plaintext). On failure the file is
// unchanged. It returns the number of keys.
func RewrapKeystore(path string, from, to *KeyWrapper) (int, error) {
	f, doneF, err := from.handle()
	if err != nil {
		return 0, err
	}
	defer doneF()
	t, doneT, err := to.handle()
	if err != nil {
		return 0, err
	}
	defer doneT()
	var keys C.size_t
	err = call(func() C.wid_result {
		p, n := strIn(path)
		return C.wid_keystore_rewrap(p, n, f, t, &keys)
	})
	return int(keys), err
}
