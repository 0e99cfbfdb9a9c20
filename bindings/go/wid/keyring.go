package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime"
	"sync"
	"time"
)

// Keyring is a set of signing and verification keys (a wid_keyring handle).
// It is safe for concurrent use. Verifiers made from it share it: keys
// inserted, rotated or imported later are seen by them, and they keep it
// alive after Close.
type Keyring struct {
	mu sync.RWMutex // held for reading by calls, for writing by Close
	kr *C.wid_keyring
	// source keeps a RemoteJWKS or SpiffeBundleSource reachable while a
	// keyring it feeds is: without it the garbage collector could close
	// the source (and stop its refresher) under a keyring still in use.
	source any
}

func wrapKeyring(kr *C.wid_keyring) *Keyring {
	k := &Keyring{kr: kr}
	runtime.SetFinalizer(k, (*Keyring).Close)
	return k
}

// NewKeyring creates an empty keyring.
func NewKeyring() (*Keyring, error) {
	var kr *C.wid_keyring
	if err := call(func() C.wid_result { return C.wid_keyring_new(&kr) }); err != nil {
		return nil, err
	}
	return wrapKeyring(kr), nil
}

// LoadKeyring loads a keyring written by Keyring.Save.
func LoadKeyring(path string) (*Keyring, error) {
	var kr *C.wid_keyring
	err := call(func() C.wid_result {
		p, n := strIn(path)
		return C.wid_keyring_load(p, n, &kr)
	})
	if err != nil {
		return nil, err
	}
	return wrapKeyring(kr), nil
}

// Close releases this handle. Verifiers made from the keyring keep working.
// Close is idempotent; other methods fail with ErrNullArgument afterwards.
func (k *Keyring) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kr != nil {
		C.wid_keyring_free(k.kr)
		k.kr = nil
		runtime.SetFinalizer(k, nil)
	}
}

// with runs f with the live handle, holding the read lock.
func (k *Keyring) with(f func(kr *C.wid_keyring) C.wid_result) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.kr == nil {
		return errClosed("Keyring")
	}
	return call(func() C.wid_result { return f(k.kr) })
}

// Insert adds an EdDSA key: material must be 32 bytes, d DerivationHKDFV1
// or DerivationNomadRawSeed. A duplicate ID fails with ErrDuplicateKey; a
// second active EdDSA key with ErrInvalidArgument. createTime is when the
// key was made (whole seconds; the zero time.Time is ErrInvalidArgument).
// It is InsertAlg(AlgEdDSA, ...).
func (k *Keyring) Insert(keyID string, material []byte, d Derivation, s KeyState, createTime time.Time) error {
	secs, err := unixSecs("Keyring.Insert: createTime", createTime)
	if err != nil {
		return err
	}
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		id, idLen := strIn(keyID)
		m, mLen := bytesIn(material)
		return C.wid_keyring_insert(kr, id, idLen, (*C.uint8_t)(ptr(m)), mLen,
			C.uint32_t(d), C.uint32_t(s), secs)
	})
}

// InsertAlg adds a key of algorithm alg. AlgEdDSA takes 32 bytes of
// material with DerivationHKDFV1 or DerivationNomadRawSeed, AlgES256 32
// bytes with DerivationHKDFV1, AlgRS256 a PKCS#8 DER private key (2048 to
// 8192 bits, e = 65537; x509.MarshalPKCS8PrivateKey) with DerivationPKCS8.
// Any other pairing, an unacceptable RSA key, an unknown alg or a second
// active key of alg fails with ErrInvalidArgument; a duplicate ID with
// ErrDuplicateKey. createTime is when the key was made (whole seconds; the
// zero time.Time is ErrInvalidArgument).
func (k *Keyring) InsertAlg(alg Alg, keyID string, material []byte, d Derivation, s KeyState, createTime time.Time) error {
	secs, err := unixSecs("Keyring.InsertAlg: createTime", createTime)
	if err != nil {
		return err
	}
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		id, idLen := strIn(keyID)
		m, mLen := bytesIn(material)
		return C.wid_keyring_insert_alg(kr, C.wid_alg(alg), id, idLen, (*C.uint8_t)(ptr(m)), mLen,
			C.uint32_t(d), C.uint32_t(s), secs)
	})
}

// InsertPurpose is InsertAlg for a key of purpose p: PurposeWIT inserts a
// key that signs WITs only (IssueWIT) and is published only in the WIT key
// set (JWKSPurpose(PurposeWIT)).
func (k *Keyring) InsertPurpose(p KeyPurpose, alg Alg, keyID string, material []byte, d Derivation, s KeyState, createTime time.Time) error {
	secs, err := unixSecs("Keyring.InsertPurpose: createTime", createTime)
	if err != nil {
		return err
	}
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		id, idLen := strIn(keyID)
		m, mLen := bytesIn(material)
		return C.wid_keyring_insert_purpose(kr, C.wid_key_purpose(p), C.wid_alg(alg), id, idLen,
			(*C.uint8_t)(ptr(m)), mLen, C.uint32_t(d), C.uint32_t(s), secs)
	})
}

// RotatePurpose makes a fresh key of purpose p and algorithm alg the
// active key of that pair (the previous one becomes inactive) and returns
// its ID. RotatePurpose(PurposeWIT, AlgES256, now) makes the key IssueWIT
// signs ES256 WITs with: WITs are never signed by a bearer key.
func (k *Keyring) RotatePurpose(p KeyPurpose, alg Alg, now time.Time) (string, error) {
	secs, err := unixSecs("Keyring.RotatePurpose: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_rotate_purpose(kr, C.wid_key_purpose(p), C.wid_alg(alg), secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// JWKSPurpose returns the key set of purpose p: PurposeBearer is JWKS,
// PurposeWIT the WIT key set (what wid serve serves at /wit/jwks.json), for
// receivers of WITs only; never give it to a relying party that accepts
// bearer tokens.
func (k *Keyring) JWKSPurpose(p KeyPurpose) ([]byte, error) {
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_jwks_purpose(kr, C.wid_key_purpose(p), &out)
	}); err != nil {
		return nil, err
	}
	return takeBytes(&out), nil
}

// ImportJWKSPurpose is ImportJWKS for a key set of purpose p: import the
// WIT key set with PurposeWIT, so its keys verify WITs (VerifyProof) and
// never bearer tokens (Verify).
func (k *Keyring) ImportJWKSPurpose(p KeyPurpose, jwks []byte) (int, error) {
	var n C.size_t
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		jp, l := bytesIn(jwks)
		return C.wid_keyring_import_jwks_purpose(kr, C.wid_key_purpose(p), jp, l, &n)
	}); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Rotate makes a fresh EdDSA key active (the previous active EdDSA key
// becomes inactive: it still verifies) and returns its ID. It is
// RotateAlg(AlgEdDSA, now).
func (k *Keyring) Rotate(now time.Time) (string, error) {
	secs, err := unixSecs("Keyring.Rotate: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_rotate(kr, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// RotateAlg makes a fresh key of alg active (a 2048-bit RSA key from the
// OS CSPRNG for AlgRS256, which takes a moment) and returns its ID; the
// previous active key of alg becomes inactive (it still verifies), other
// algorithms' keys are untouched. An unknown alg fails with
// ErrInvalidArgument.
func (k *Keyring) RotateAlg(alg Alg, now time.Time) (string, error) {
	secs, err := unixSecs("Keyring.RotateAlg: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_rotate_alg(kr, C.wid_alg(alg), secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// Prepublish adds a key that is published (it verifies and is in the JWKS)
// now and becomes active at publishAt (see PromoteDue); it returns its ID.
func (k *Keyring) Prepublish(now, publishAt time.Time) (string, error) {
	nowSecs, err := unixSecs("Keyring.Prepublish: now", now)
	if err != nil {
		return "", err
	}
	atSecs, err := unixSecs("Keyring.Prepublish: publishAt", publishAt)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_prepublish(kr, nowSecs, atSecs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// PromoteDue activates every prepublished key whose publish time has come
// and returns how many were promoted.
func (k *Keyring) PromoteDue(now time.Time) (int, error) {
	secs, err := unixSecs("Keyring.PromoteDue: now", now)
	if err != nil {
		return 0, err
	}
	var n C.size_t
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_promote_due(kr, secs, &n)
	}); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Deprecate retires a key: it stops verifying and leaves the JWKS. The
// active key cannot be deprecated.
func (k *Keyring) Deprecate(keyID string, now time.Time) error {
	secs, err := unixSecs("Keyring.Deprecate: now", now)
	if err != nil {
		return err
	}
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		id, n := strIn(keyID)
		return C.wid_keyring_deprecate(kr, id, n, secs)
	})
}

// JWKS returns the JSON Web Key Set ({"keys":[...]}) of the keys that verify.
func (k *Keyring) JWKS() ([]byte, error) {
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		return C.wid_keyring_jwks(kr, &out)
	}); err != nil {
		return nil, err
	}
	return takeBytes(&out), nil
}

// ImportJWKS adds the keys of a JWKS as verify-only keys (all or nothing)
// and returns how many were added: OKP Ed25519, EC P-256 and RSA (at least
// 2048 bits, e = 65537) keys whose use is absent or "sig". Entries with use
// "enc" or an unknown kty are skipped; a private member (d, p, q, ...), an
// invalid point, a duplicate kid or an alg that does not match the key type
// refuses the whole set.
func (k *Keyring) ImportJWKS(jwks []byte) (int, error) {
	var n C.size_t
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		p, l := bytesIn(jwks)
		return C.wid_keyring_import_jwks(kr, p, l, &n)
	}); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Save writes the keyring, private keys included, to path (mode 0600,
// crash-safe replace).
func (k *Keyring) Save(path string) error {
	return k.with(func(kr *C.wid_keyring) C.wid_result {
		p, n := strIn(path)
		return C.wid_keyring_save(kr, p, n)
	})
}
