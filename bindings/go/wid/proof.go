package wid

// #include "wid_helpers.h"
import "C"

import (
	"encoding/json"
	"runtime"
	"sync"
	"time"
)

// WorkloadKey is a workload's own key pair (a wid_workload_key handle), for
// proof of possession (WIMSE): the workload sends its public half with its
// request (IssueRequest.ProofKey), the issuer binds it into a workload
// identity token (WIT, Keyring.IssueWIT), and for each request the workload
// makes a proof with the private half (Prove) that the receiver checks
// together with the WIT (Verifier.VerifyProof). The private key never leaves
// the library; it is zeroized by Close. Safe for concurrent use.
type WorkloadKey struct {
	mu sync.RWMutex // held for reading by calls, for writing by Close
	k  *C.wid_workload_key
}

// GenerateWorkloadKey makes a fresh key pair from the OS's CSPRNG: AlgEdDSA
// (Ed25519) or AlgES256 (P-256, the algorithm the WIMSE drafts make
// mandatory). AlgRS256 fails with ErrUnsupportedAlgorithm, an unknown alg
// with ErrInvalidArgument.
func GenerateWorkloadKey(alg Alg) (*WorkloadKey, error) {
	var k *C.wid_workload_key
	if err := call(func() C.wid_result { return C.wid_workload_key_generate(C.wid_alg(alg), &k) }); err != nil {
		return nil, err
	}
	wk := &WorkloadKey{k: k}
	runtime.SetFinalizer(wk, (*WorkloadKey).Close)
	return wk, nil
}

// Close releases the key (the library zeroizes the private key) after the
// calls in flight. It is idempotent; other methods fail with
// ErrNullArgument afterwards.
func (k *WorkloadKey) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.k != nil {
		C.wid_workload_key_free(k.k)
		k.k = nil
		runtime.SetFinalizer(k, nil)
	}
}

// with runs f with the live handle, holding the read lock.
func (k *WorkloadKey) with(f func(wk *C.wid_workload_key) C.wid_result) error {
	k.mu.RLock()
	defer k.mu.RUnlock()
	if k.k == nil {
		return errClosed("WorkloadKey")
	}
	return call(func() C.wid_result { return f(k.k) })
}

// PublicJWK returns the public key as a JWK with alg, the JSON a WIT's
// cnf.jwk holds: {"alg":"EdDSA","crv":"Ed25519","kty":"OKP","x":...} or
// {"alg":"ES256","crv":"P-256","kty":"EC","x":...,"y":...}.
func (k *WorkloadKey) PublicJWK() (string, error) {
	var out C.wid_bytes
	if err := k.with(func(wk *C.wid_workload_key) C.wid_result {
		return C.wid_workload_key_public_jwk(wk, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// ProofKey returns the public key as an IssueRequest carries it (the
// members of PublicJWK).
func (k *WorkloadKey) ProofKey() (*ProofKey, error) {
	jwk, err := k.PublicJWK()
	if err != nil {
		return nil, err
	}
	var pk ProofKey
	if err := json.Unmarshal([]byte(jwk), &pk); err != nil {
		return nil, &Error{Code: ResultDecodeError, Message: "wid: decoding the public JWK: " + err.Error()}
	}
	return &pk, nil
}

// Prove makes a workload proof token (WPT) for one request to targetURI
// (its query and fragment are dropped), bound to wit and, when accessToken
// is not empty, to that access token (the value without "Bearer "). It is
// valid from now for ttl, rounded up to whole seconds (0: the library's
// default, 60 s; negative fails with ErrInvalidArgument), and carries a
// fresh jti: make one per request.
func (k *WorkloadKey) Prove(wit, targetURI, accessToken string, ttl time.Duration, now time.Time) (string, error) {
	if ttl < 0 {
		return "", errNegative("WorkloadKey.Prove: ttl", ttl)
	}
	ttlSecs := secsCeil(ttl)
	nowSecs, err := unixSecs("WorkloadKey.Prove: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(wk *C.wid_workload_key) C.wid_result {
		w, wLen := strIn(wit)
		t, tLen := strIn(targetURI)
		at, atLen := strIn(accessToken) // (NULL, 0) when empty: none
		return C.wid_workload_key_prove(wk, w, wLen, t, tLen, at, atLen,
			C.int64_t(ttlSecs), nowSecs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// IssueWIT signs a workload identity token (WIT, typ wit+jwt) with the
// active key of alg for a msgpack IssueRequest that carries the workload's
// ProofKey (EncodeIssueRequest, or Nomad's bytes): sub is
// wimse://<trustDomain>/<region>/<namespace>/<job>/<group>/<task or service>/<identity>,
// exp the identity's TTL (required; at most an hour), cnf.jwk the key; iss
// is issuer (none when empty). A request without ProofKey, a TTL of 0, an
// unusable key or a trust domain that is not a lower-case DNS name fails
// with ErrInvalidArgument; an alg without an active key with
// ErrNoActiveKey. A WIT is never a bearer token: Verify refuses it
// (ErrProofRequired); check it with VerifyProof.
func (k *Keyring) IssueWIT(alg Alg, requestMsgpack []byte, issuer, trustDomain string, now time.Time) (string, error) {
	secs, err := unixSecs("Keyring.IssueWIT: now", now)
	if err != nil {
		return "", err
	}
	var out C.wid_bytes
	if err := k.with(func(kr *C.wid_keyring) C.wid_result {
		r, rLen := bytesIn(requestMsgpack)
		iss, issLen := strIn(issuer) // (NULL, 0) when empty: no iss
		td, tdLen := strIn(trustDomain)
		return C.wid_issue_wit(kr, C.wid_alg(alg), (*C.uint8_t)(ptr(r)), rLen, iss, issLen,
			td, tdLen, secs, &out)
	}); err != nil {
		return "", err
	}
	return takeString(&out), nil
}

// VerifyProof checks a WIT and the WPT that came with one request to
// targetURI (the URI this service was reached at, from its own
// configuration; query and fragment are ignored), at now: the WIT as Verify
// checks a token (signature, times, audience, issuer, live allocation),
// then the proof against the WIT's cnf.jwk (signature, aud, exp, the WIT's
// hash, and the access token's hash exactly when accessToken is not empty),
// then that the proof was not used before (each is accepted once). It
// returns the WIT's claims (Confirmation included). WIT failures have
// Verify's codes; proof failures are ErrProofInvalid, a replay
// ErrProofReplayed.
func (v *Verifier) VerifyProof(wit, wpt, targetURI, accessToken string, now time.Time) (*Claims, error) {
	secs, err := unixSecs("Verifier.VerifyProof: now", now)
	if err != nil {
		return nil, err
	}
	var out C.wid_bytes
	err = v.verifyCall(func(vp *C.wid_verifier) C.wid_result {
		w, wLen := strIn(wit)
		p, pLen := strIn(wpt)
		t, tLen := strIn(targetURI)
		at, atLen := strIn(accessToken) // (NULL, 0) when empty: none
		return C.wid_verify_proof(vp, w, wLen, p, pLen, t, tLen, at, atLen,
			secs, &out)
	})
	if err != nil {
		return nil, err
	}
	return decodeClaims(takeBytes(&out))
}
