package wid

// #include "wid_helpers.h"
import "C"

import (
	"runtime"
	"runtime/cgo"
	"sync"
	"time"
)

// TrustedIssuer is one issuer a TrustSet trusts: exactly one of Iss (the
// iss its tokens carry) and TrustDomain (SPIFFE JWT-SVIDs whose sub is in
// it: exp required, RS/ES/PS algorithms only), the Keyring its keys are in
// (shared: a RemoteJwks's keyring follows its JWKS), the Audience its
// tokens must name, and Store: the allocation store for Nomad identity
// tokens, or nil for foreign tokens (SPIRE, Kubernetes, AWS: no Nomad
// claims, no store, sub required).
type TrustedIssuer struct {
	Iss         string
	TrustDomain string
	Keyring     *Keyring
	Audience    string
	Store       StateStore
}

// TrustSet verifies the tokens of several issuers, each with its own keys
// and rules. Each token is routed to the one issuer its iss (or the trust
// domain of its SPIFFE sub) names before any key is used, so a key of one
// issuer never verifies a token that claims another; a token naming no
// trusted issuer, or two, fails with ErrIssuerMismatch. Safe for concurrent
// use.
type TrustSet struct {
	mu      sync.RWMutex
	t       *C.wid_trust_set
	handles []cgo.Handle
	states  []*lookupState
}

// NewTrustSet builds a trust set of issuers (at least one; no two under one
// iss or trust domain).
func NewTrustSet(issuers []TrustedIssuer) (*TrustSet, error) {
	var b *C.wid_trust_set_builder
	if err := call(func() C.wid_result { return C.wid_trust_set_builder_new(&b) }); err != nil {
		return nil, err
	}
	defer C.wid_trust_set_builder_free(b)
	ts := &TrustSet{}
	fail := func(err error) (*TrustSet, error) {
		for _, h := range ts.handles {
			h.Delete()
		}
		return nil, err
	}
	for i, is := range issuers {
		if is.Keyring == nil {
			return fail(&Error{Code: ResultNullArgument, Message: "wid: nil *Keyring in TrustedIssuer"})
		}
		if (is.Iss == "") == (is.TrustDomain == "") {
			return fail(&Error{Code: ResultInvalidArgument,
				Message: "wid: a TrustedIssuer has exactly one of Iss and TrustDomain"})
		}
		name, byTD := is.Iss, C.int(0)
		if is.TrustDomain != "" {
			name, byTD = is.TrustDomain, 1
		}
		var h cgo.Handle
		if is.Store != nil {
			state := &lookupState{store: is.Store, log: newFailureLog()}
			h = cgo.NewHandle(state)
			ts.handles = append(ts.handles, h)
			ts.states = append(ts.states, state)
		}
		err := is.Keyring.with(func(kr *C.wid_keyring) C.wid_result {
			n, nLen := strIn(name)
			aud, audLen := strIn(is.Audience)
			return C.wid_go_trust_set_builder_add(b, byTD, n, nLen, kr, aud, audLen, C.uintptr_t(h))
		})
		runtime.KeepAlive(issuers[i])
		if err != nil {
			return fail(err)
		}
	}
	if err := call(func() C.wid_result { return C.wid_trust_set_builder_build(b, &ts.t) }); err != nil {
		return fail(err)
	}
	runtime.SetFinalizer(ts, (*TrustSet).Close)
	return ts, nil
}

// Close releases the trust set after the calls in flight. It is
// idempotent; Verify fails with ErrNullArgument afterwards.
func (t *TrustSet) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t != nil {
		C.wid_trust_set_free(t.t)
		t.t = nil
		for _, h := range t.handles {
			h.Delete()
		}
		runtime.SetFinalizer(t, nil)
	}
}

// Verify checks token at now (whole seconds; the zero time.Time is
// ErrInvalidArgument) with the one issuer it claims, and returns its claims
// and that issuer (its Iss, or "spiffe://" + its TrustDomain).
func (t *TrustSet) Verify(token string, now time.Time) (*Claims, string, error) {
	if now.IsZero() {
		return nil, "", errZeroTime("TrustSet.Verify: now")
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.t == nil {
		return nil, "", errClosed("TrustSet")
	}
	tok, tokLen := strIn(token)
	var claims, issuer C.wid_bytes
	runtime.LockOSThread()
	rc := C.wid_trust_set_verify(t.t, tok, tokLen, C.int64_t(now.Unix()), &claims, &issuer)
	if rc != C.WID_RESULT_OK {
		err := t.failure(rc)
		runtime.UnlockOSThread()
		return nil, "", err
	}
	runtime.UnlockOSThread()
	raw, name := takeString(&claims), takeString(&issuer)
	c, err := decodeClaimsString(raw)
	if err != nil {
		return nil, "", err
	}
	return c, name, nil
}

// failure is the *Error for rc, with the StateStore's error behind a
// ResultStoreUnavailable (claimed from every issuer's log: one call reaches
// one issuer's store).
func (t *TrustSet) failure(rc C.wid_result) error {
	code := Result(rc)
	for _, s := range t.states {
		if fs := s.log.claim(); code == ResultStoreUnavailable && len(fs) > 0 {
			return fs[len(fs)-1].asError(code)
		}
	}
	return &Error{Code: code, Message: lastErrorMessage()}
}
