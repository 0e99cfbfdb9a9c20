package wid

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

const (
	now     = int64(1700000000)
	ttl     = 3600
	allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
	aud     = "vault.io"
)

// at is the time.Time of Unix seconds unix: the tests count in seconds from
// now, the API takes time.Time.
func at(unix int64) time.Time { return time.Unix(unix, 0) }

// vectorsDir is the repository's committed msgpack vectors, relative to this
// package directory (bindings/go/wid); WID_VECTORS_DIR overrides it.
func vectorsDir() string {
	if d := os.Getenv("WID_VECTORS_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "..", "tests", "vectors", "msgpack")
}

func material(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// newKeyring returns a keyring with one active key, "key-1".
func newKeyring(t testing.TB) *Keyring {
	t.Helper()
	kr, err := NewKeyring()
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	t.Cleanup(kr.Close)
	if err := kr.Insert("key-1", material(7), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return kr
}

func request(alloc string, audiences ...string) *IssueRequest {
	return &IssueRequest{
		Region: "global",
		Allocation: &Allocation{
			ID:            alloc,
			Namespace:     "default",
			JobID:         "web",
			TaskGroup:     "frontend",
			DesiredStatus: "run",
			ClientStatus:  "running",
		},
		Task: "server",
		Identity: &WorkloadIdentity{
			Name:     "default",
			Audience: audiences,
			TTL:      ttl * time.Second,
		},
	}
}

func issue(t testing.TB, kr *Keyring, req *IssueRequest, unix int64) string {
	t.Helper()
	tok, err := kr.Issue(req, at(unix))
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return tok
}

// memStore is an in-memory StateStore, safe for concurrent use, recording
// the lookups it answers.
type memStore struct {
	mu     sync.Mutex
	states map[string]AllocState
	calls  []string // "<alloc>/<consistency>"
	n      int64    // atomic: number of lookups
}

func newMemStore(states map[string]AllocState) *memStore {
	return &memStore{states: states}
}

func (s *memStore) AllocationState(id string, c Consistency) (AllocState, error) {
	atomic.AddInt64(&s.n, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, id+"/"+c.String())
	return s.states[id], nil
}

func (s *memStore) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func liveStore() *memStore { return newMemStore(map[string]AllocState{allocID: Live}) }

func newVerifier(t testing.TB, kr *Keyring, audience string, store StateStore, opts *VerifierOptions) *Verifier {
	t.Helper()
	v, err := NewVerifier(kr, audience, store, opts)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

var noWait = &VerifierOptions{KeyWait: -1}

// kid returns the kid of a token's JOSE header.
func kid(t testing.TB, token string) string {
	t.Helper()
	seg := strings.SplitN(token, ".", 2)[0]
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	var h struct {
		Kid string `json:"kid"`
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("header: %v", err)
	}
	if h.Alg != "EdDSA" {
		t.Fatalf("alg = %q, want EdDSA", h.Alg)
	}
	return h.Kid
}

// wantCode checks err is an *Error with code want, matched by errors.Is.
func wantCode(t testing.TB, err error, sentinel *Error) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("got %v, want %v", err, sentinel.Code)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %T, want *Error", err)
	}
	return e
}

func TestVersionAndResultNames(t *testing.T) {
	if got := LibraryABIVersion(); got != ABIVersion {
		t.Fatalf("library ABI %d, header ABI %d", got, ABIVersion)
	}
	if Version() == "" {
		t.Fatal("empty Version()")
	}
	t.Logf("library version %s, ABI %d", Version(), ABIVersion)
	for _, r := range Results() {
		if got, want := r.String(), libraryResultName(r); got != want {
			t.Errorf("Result(%d).String() = %q, wid_result_name = %q", r, got, want)
		}
	}
	if got := libraryResultName(Result(999)); got != "WID_RESULT_UNKNOWN" {
		t.Errorf("wid_result_name(999) = %q", got)
	}
	sentinels := []*Error{ErrNullArgument, ErrInvalidArgument, ErrDecodeError, ErrIOError, ErrPanic,
		ErrMalformedToken, ErrUnsupportedAlgorithm, ErrUnknownKey, ErrBadSignature, ErrExpired,
		ErrNotYetValid, ErrAudienceMismatch, ErrIssuerMismatch, ErrTokenKindRefused, ErrAllocationNotFound,
		ErrAllocationTerminal, ErrStoreUnavailable, ErrNodeNotFound, ErrNodeDown, ErrNoActiveKey, ErrDuplicateKey,
		ErrKeyringConflict, ErrKeyringUnavailable, ErrTokenExchangeFailed, ErrProofRequired, ErrProofInvalid, ErrProofReplayed, ErrKeyCustodyFailed}
	if len(sentinels) != len(Results())-1 {
		t.Fatalf("%d sentinels for %d failure codes", len(sentinels), len(Results())-1)
	}
	for i, s := range sentinels {
		if s.Code != Results()[i+1] {
			t.Errorf("sentinel %d has code %v, want %v", i, s.Code, Results()[i+1])
		}
		for j, o := range sentinels {
			if errors.Is(s, o) != (i == j) {
				t.Errorf("errors.Is(%v, %v) = %v", s, o, i != j)
			}
		}
	}
	e := &Error{Code: ResultExpired, Message: "boom"}
	if e.Error() != "WID_RESULT_EXPIRED: boom" || ErrExpired.Error() != "WID_RESULT_EXPIRED" {
		t.Errorf("Error() = %q / %q", e.Error(), ErrExpired.Error())
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", e), ErrExpired) {
		t.Error("errors.Is through a wrapper")
	}
}

func TestIssueVerify(t *testing.T) {
	kr := newKeyring(t)
	store := liveStore()
	v := newVerifier(t, kr, aud, store, nil)
	tok := issue(t, kr, request(allocID, aud), now)
	if kid(t, tok) != "key-1" {
		t.Fatalf("kid %q", kid(t, tok))
	}
	c, err := v.Verify(tok, at(now+10))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.Namespace != "default" || c.JobID != "web" || c.AllocationID != allocID ||
		c.Task != "server" || c.Service != "" || c.Issuer != "" {
		t.Errorf("claims %+v", c)
	}
	if c.Subject != "global:default:web:frontend:server:default" {
		t.Errorf("sub %q", c.Subject)
	}
	if !reflect.DeepEqual(c.Audience, []string{aud}) {
		t.Errorf("aud %q", c.Audience)
	}
	if c.IssuedAt.Unix() != now || c.NotBefore.Unix() != now ||
		c.Expires.Unix() != now+ttl {
		t.Errorf("iat/nbf/exp %v/%v/%v", c.IssuedAt, c.NotBefore, c.Expires)
	}
	if len(c.JTI) != 36 {
		t.Errorf("jti %q", c.JTI)
	}
	if got := store.Calls(); !reflect.DeepEqual(got, []string{allocID + "/stale"}) {
		t.Errorf("store calls %q", got)
	}

	// Several audiences: aud is an array on the wire.
	tok2 := issue(t, kr, request(allocID, "consul.io", aud), now)
	c2, err := v.Verify(tok2, at(now))
	if err != nil {
		t.Fatalf("Verify (two audiences): %v", err)
	}
	if !reflect.DeepEqual(c2.Audience, []string{"consul.io", aud}) {
		t.Errorf("aud %q", c2.Audience)
	}
	if c2.JTI == c.JTI {
		t.Error("two tokens share a jti")
	}

	// No TTL: no exp.
	req := request(allocID, aud)
	req.Identity.TTL = 0
	c3, err := v.Verify(issue(t, kr, req, now), at(now+10*ttl))
	if err != nil || !c3.Expires.IsZero() {
		t.Fatalf("no-TTL token: %v, exp %v", err, c3)
	}
}

func TestIssuer(t *testing.T) {
	kr := newKeyring(t)
	const iss = "https://nomad.example.com"
	tok, err := kr.IssueWithIssuer(request(allocID, aud), iss, at(now))
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Issuer: iss})
	c, err := v.Verify(tok, at(now))
	if err != nil || c.Issuer != iss {
		t.Fatalf("Verify: %v %+v", err, c)
	}
	other := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Issuer: "https://elsewhere"})
	if _, err := other.Verify(tok, at(now)); !errors.Is(err, ErrIssuerMismatch) {
		t.Fatalf("a token with another issuer: want ErrIssuerMismatch, got %v", err)
	}
	if _, err := v.Verify(issue(t, kr, request(allocID, aud), now), at(now)); !errors.Is(err, ErrIssuerMismatch) {
		t.Fatalf("a token without iss against a required issuer: want ErrIssuerMismatch, got %v", err)
	}
}

func TestRotation(t *testing.T) {
	kr := newKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	old := issue(t, kr, request(allocID, aud), now)

	newID, err := kr.Rotate(at(now + 10))
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if newID == "" || newID == "key-1" {
		t.Fatalf("new key id %q", newID)
	}
	fresh := issue(t, kr, request(allocID, aud), now+10)
	if got := kid(t, fresh); got != newID {
		t.Fatalf("new token kid %q, want %q", got, newID)
	}
	if got := kid(t, old); got != "key-1" {
		t.Fatalf("old token kid %q", got)
	}
	for name, tok := range map[string]string{"old": old, "new": fresh} {
		if _, err := v.Verify(tok, at(now+20)); err != nil {
			t.Errorf("%s token after rotation: %v", name, err)
		}
	}
	jwks, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(jwks, []byte(`"key-1"`)) || !bytes.Contains(jwks, []byte(`"`+newID+`"`)) {
		t.Errorf("JWKS after rotation: %s", jwks)
	}

	// The active key cannot be deprecated; the old one can, and then its
	// tokens no longer verify.
	e := wantCode(t, kr.Deprecate(newID, at(now+30)), &Error{Code: ResultInvalidArgument})
	t.Logf("deprecating the active key: %v", e)
	if err := kr.Deprecate("key-1", at(now+30)); err != nil {
		t.Fatalf("Deprecate: %v", err)
	}
	_, err = v.Verify(old, at(now+40))
	wantCode(t, err, ErrUnknownKey)
	if _, err := v.Verify(fresh, at(now+40)); err != nil {
		t.Errorf("new token after deprecating the old key: %v", err)
	}
	if jwks, _ := kr.JWKS(); bytes.Contains(jwks, []byte(`"key-1"`)) {
		t.Errorf("deprecated key still in the JWKS: %s", jwks)
	}
}

func TestPrepublishPromote(t *testing.T) {
	kr := newKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	id, err := kr.Prepublish(at(now), at(now+100))
	if err != nil {
		t.Fatalf("Prepublish: %v", err)
	}
	if jwks, _ := kr.JWKS(); !bytes.Contains(jwks, []byte(id)) {
		t.Errorf("prepublished key not in the JWKS: %s", jwks)
	}
	if n, err := kr.PromoteDue(at(now + 50)); err != nil || n != 0 {
		t.Fatalf("PromoteDue early: %d %v", n, err)
	}
	if got := kid(t, issue(t, kr, request(allocID, aud), now+50)); got != "key-1" {
		t.Fatalf("signed with %q before promotion", got)
	}
	if n, err := kr.PromoteDue(at(now + 100)); err != nil || n != 1 {
		t.Fatalf("PromoteDue: %d %v", n, err)
	}
	tok := issue(t, kr, request(allocID, aud), now+100)
	if got := kid(t, tok); got != id {
		t.Fatalf("signed with %q after promotion, want %q", got, id)
	}
	if _, err := v.Verify(tok, at(now+100)); err != nil {
		t.Fatal(err)
	}
}

func TestAllocationStates(t *testing.T) {
	kr := newKeyring(t)
	store := newMemStore(map[string]AllocState{"terminal-alloc": Terminal})
	v := newVerifier(t, kr, aud, store, nil)

	_, err := v.Verify(issue(t, kr, request("terminal-alloc", aud), now), at(now))
	e := wantCode(t, err, ErrAllocationTerminal)
	if !strings.HasPrefix(e.Error(), "WID_RESULT_ALLOCATION_TERMINAL: ") || e.Message == "" {
		t.Errorf("error text %q", e.Error())
	}
	// A stale terminal answer is final.
	if got := store.Calls(); !reflect.DeepEqual(got, []string{"terminal-alloc/stale"}) {
		t.Errorf("calls %q", got)
	}

	_, err = v.Verify(issue(t, kr, request("gone-alloc", aud), now), at(now))
	wantCode(t, err, ErrAllocationNotFound)
}

// laggingStore is a replica that has not seen the allocation yet: missing
// when read stale, live when read consistently.
type laggingStore struct{ memStore }

func (s *laggingStore) AllocationState(id string, c Consistency) (AllocState, error) {
	s.memStore.AllocationState(id, c)
	if c == Consistent {
		return Live, nil
	}
	return Missing, nil
}

func TestStaleThenConsistent(t *testing.T) {
	kr := newKeyring(t)
	store := &laggingStore{}
	v := newVerifier(t, kr, aud, store, nil)
	if _, err := v.Verify(issue(t, kr, request(allocID, aud), now), at(now)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := []string{allocID + "/stale", allocID + "/consistent"}
	if got := store.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("store saw %q, want %q", got, want)
	}
}

var errReplicaDown = errors.New("replica down")

func TestStoreFailuresFailClosed(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	var calls int64
	cases := map[string]StateStoreFunc{
		"error": func(string, Consistency) (AllocState, error) {
			atomic.AddInt64(&calls, 1)
			return Live, errReplicaDown
		},
		"panic": func(string, Consistency) (AllocState, error) { panic("store exploded") },
		"bogus state": func(string, Consistency) (AllocState, error) {
			return AllocState(7), nil
		},
		"error on consistent": func(_ string, c Consistency) (AllocState, error) {
			if c == Stale {
				return Missing, nil
			}
			return Missing, errReplicaDown
		},
	}
	for name, store := range cases {
		t.Run(name, func(t *testing.T) {
			v := newVerifier(t, kr, aud, store, nil)
			_, err := v.Verify(tok, at(now))
			e := wantCode(t, err, ErrStoreUnavailable)
			if e.Cause == nil || e.Message == "" {
				t.Errorf("no cause or message: %#v", e)
			}
			t.Logf("%v (cause: %v)", e, e.Cause)
			if strings.HasPrefix(name, "error") && !errors.Is(err, errReplicaDown) {
				t.Errorf("errors.Is(err, errReplicaDown) is false: %v", err)
			}
			// The store's own words reach whoever logs err.Error(), as a
			// Go error's: which callback, then its error; no C wording.
			if !strings.HasSuffix(err.Error(), ": "+e.Cause.Error()) {
				t.Errorf("Error() %q does not end with the store's error %q", err.Error(), e.Cause.Error())
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "wid: the StateStore ") || !strings.Contains(msg, allocID) ||
				strings.Contains(msg, "WID_RESULT") || strings.Contains(msg, "callback") {
				t.Errorf("Error() is not in Go's words: %q", msg)
			}
			// The failure is not left behind for the next call.
			if _, err := v.Verify("x.y.z", at(now)); errors.Is(err, ErrStoreUnavailable) || err.(*Error).Cause != nil {
				t.Errorf("next call: %#v", err)
			}
		})
	}
	if calls != 1 {
		t.Errorf("an erroring store was called %d times, want 1 (no retry after an error)", calls)
	}
}

func TestRejections(t *testing.T) {
	kr := newKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	tok := issue(t, kr, request(allocID, aud), now)

	other := newVerifier(t, kr, "other.io", liveStore(), nil)
	_, err := other.Verify(tok, at(now))
	e := wantCode(t, err, ErrAudienceMismatch)
	if !strings.HasPrefix(err.Error(), "WID_RESULT_AUDIENCE_MISMATCH: ") || e.Message == "" {
		t.Errorf("%q", err.Error())
	}

	// Default leeway 60 s: valid up to exp+59, expired from exp+60.
	if _, err := v.Verify(tok, at(now+ttl+59)); err != nil {
		t.Errorf("within leeway: %v", err)
	}
	_, err = v.Verify(tok, at(now+ttl+60))
	e = wantCode(t, err, ErrExpired)
	if !strings.HasPrefix(e.Error(), "WID_RESULT_EXPIRED: ") || e.Message == "" {
		t.Errorf("%q", e.Error())
	}
	t.Logf("expired: %v", e)

	_, err = v.Verify(tok, at(now-61))
	wantCode(t, err, ErrNotYetValid)

	for _, bad := range []string{"", "abc", "a.b.c", strings.Repeat("x", 9000)} {
		_, err = v.Verify(bad, at(now))
		wantCode(t, err, ErrMalformedToken)
	}

	// Flip one signature character.
	parts := strings.Split(tok, ".")
	sig := []byte(parts[2])
	if sig[5] == 'A' {
		sig[5] = 'B'
	} else {
		sig[5] = 'A'
	}
	_, err = v.Verify(parts[0]+"."+parts[1]+"."+string(sig), at(now))
	wantCode(t, err, ErrBadSignature)

	// A token signed by a key this keyring never saw.
	stranger, _ := NewKeyring()
	defer stranger.Close()
	if err := stranger.Insert("key-x", material(9), DerivationHKDFV1, KeyStateActive, at(now)); err != nil {
		t.Fatal(err)
	}
	strange := issue(t, stranger, request(allocID, aud), now)
	start := time.Now()
	_, err = v.Verify(strange, at(now))
	e = wantCode(t, err, ErrUnknownKey)
	// No wait at all: the message says so (a wait, the 1s default say, ends
	// "after waiting up to ..."); the time bound only catches a hang.
	if !strings.Contains(e.Message, "not in the keyring") || strings.Contains(e.Message, "after waiting") {
		t.Errorf("KeyWait -1 still waited: %v", e)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("KeyWait -1 still waited %v", d)
	}
}

// A zero time.Time is refused, naming the argument, wherever a time is
// taken: never a token issued, a key made or a token checked at year 1.
func TestZeroTimeRefused(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	v := newVerifier(t, kr, aud, liveStore(), nil)
	var zero time.Time
	calls := map[string]func() error{
		"Keyring.Issue": func() error { _, err := kr.Issue(request(allocID, aud), zero); return err },
		"Keyring.IssueAlg": func() error {
			_, err := kr.IssueAlg(AlgEdDSA, request(allocID, aud), "", zero)
			return err
		},
		"Keyring.Rotate":    func() error { _, err := kr.Rotate(zero); return err },
		"Keyring.RotateAlg": func() error { _, err := kr.RotateAlg(AlgES256, zero); return err },
		"Keyring.Insert": func() error {
			return kr.Insert("k-zero", make([]byte, 32), DerivationHKDFV1, KeyStateInactive, zero)
		},
		"Keyring.Prepublish": func() error { _, err := kr.Prepublish(at(now), zero); return err },
		"Keyring.PromoteDue": func() error { _, err := kr.PromoteDue(zero); return err },
		"Keyring.Deprecate":  func() error { return kr.Deprecate("k-zero", zero) },
		"Verifier.Verify":    func() error { _, err := v.Verify(tok, zero); return err },
		"Verifier.Explain":   func() error { _, err := v.Explain(tok, zero); return err },
		"Verifier.VerifyBatch": func() error {
			return v.VerifyBatch([]string{tok, tok}, zero)[1]
		},
	}
	for name, f := range calls {
		err := f()
		e := wantCode(t, err, ErrInvalidArgument)
		if e != nil && (!strings.Contains(e.Message, name) || !strings.Contains(e.Message, "zero time.Time")) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The token still verifies at a real time.
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatal(err)
	}
}

func TestVerifierOptions(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	noTTL := request(allocID, aud)
	noTTL.Identity.TTL = 0
	noExp := issue(t, kr, noTTL, now)

	strict := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{RequireExp: true, Leeway: 5 * time.Second})
	_, err := strict.Verify(noExp, at(now))
	wantCode(t, err, ErrMalformedToken)
	if _, err := strict.Verify(tok, at(now+ttl+4)); err != nil {
		t.Errorf("leeway 5: %v", err)
	}
	_, err = strict.Verify(tok, at(now+ttl+5))
	wantCode(t, err, ErrExpired)
	// Rounded up to whole seconds: 4.2 s is 5 s.
	rounded := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Leeway: 4200 * time.Millisecond})
	if _, err := rounded.Verify(tok, at(now+ttl+4)); err != nil {
		t.Errorf("leeway 4.2s (5s): %v", err)
	}
	_, err = rounded.Verify(tok, at(now+ttl+5))
	wantCode(t, err, ErrExpired)
	// Negative: none.
	exact := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Leeway: -1})
	if _, err := exact.Verify(tok, at(now+ttl-1)); err != nil {
		t.Errorf("no leeway, a second before exp: %v", err)
	}
	_, err = exact.Verify(tok, at(now+ttl))
	wantCode(t, err, ErrExpired)

	// A TTL is Go nanoseconds: a positive TTL under a second (what a caller
	// who meant seconds writes) is refused, never issued without exp.
	short := request(allocID, aud)
	short.Identity.TTL = 3600
	_, err = kr.Issue(short, at(now))
	wantCode(t, err, ErrInvalidArgument)

	small := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{MaxTokenBytes: 64})
	_, err = small.Verify(tok, at(now))
	wantCode(t, err, ErrMalformedToken)

	store := liveStore()
	cached := newVerifier(t, kr, aud, store, &VerifierOptions{CacheEntries: 16})
	for i := 0; i < 3; i++ {
		if _, err := cached.Verify(tok, at(now)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("cached verifier: %d store lookups for 3 verifications", atomic.LoadInt64(&store.n))

	for name, o := range map[string]*VerifierOptions{
		"negative max size": {MaxTokenBytes: -1},
	} {
		_, err := NewVerifier(kr, aud, liveStore(), o)
		wantCode(t, err, ErrInvalidArgument)
		t.Logf("%s: %v", name, err)
	}
	_, err = NewVerifier(kr, "", liveStore(), nil)
	wantCode(t, err, ErrInvalidArgument)
	_, err = NewVerifier(kr, aud, liveStore(), &VerifierOptions{MaxProofLifetime: -time.Second})
	if e := wantCode(t, err, ErrInvalidArgument); e != nil && !strings.Contains(e.Message, "VerifierOptions.MaxProofLifetime") {
		t.Errorf("negative MaxProofLifetime: the message does not name the option: %v", err)
	}
	_, err = NewVerifier(kr, aud, nil, nil)
	wantCode(t, err, ErrNullArgument)
	_, err = NewVerifier(nil, aud, liveStore(), nil)
	wantCode(t, err, ErrNullArgument)
}

// A verifier waits (KeyWait) for a key that a replica has not received yet.
func TestKeyWait(t *testing.T) {
	signer := newKeyring(t)
	tok := issue(t, signer, request(allocID, aud), now)
	jwks, err := signer.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	replica, _ := NewKeyring()
	defer replica.Close()
	v := newVerifier(t, replica, aud, liveStore(), &VerifierOptions{KeyWait: 5 * time.Second})
	done := make(chan error, 1)
	// Taken before the goroutine starts: the key cannot arrive sooner than
	// 100ms after it, so Verify's success cannot come sooner either.
	start := time.Now()
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := replica.ImportJWKS(jwks)
		done <- err
	}()
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatalf("Verify while the key arrives: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("verified after only %v: it did not wait for the key", d)
	}

	short := newVerifier(t, replica, aud, liveStore(), &VerifierOptions{KeyWait: 50 * time.Millisecond})
	stranger, _ := NewKeyring()
	defer stranger.Close()
	if err := stranger.Insert("key-x", material(9), DerivationHKDFV1, KeyStateActive, at(now)); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = short.Verify(issue(t, stranger, request(allocID, aud), now), at(now))
	wantCode(t, err, ErrUnknownKey)
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("KeyWait 50ms waited only %v", d)
	}
}

func TestConcurrentVerify(t *testing.T) {
	kr := newKeyring(t)
	store := liveStore()
	v := newVerifier(t, kr, aud, store, nil)
	tok := issue(t, kr, request(allocID, aud), now)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				// Every 10th call fails, so that each thread's last-error
				// message is read while others are verifying.
				if i%10 == g%10 {
					_, err := v.Verify(tok, at(now+ttl+60))
					var e *Error
					if !errors.As(err, &e) || e.Code != ResultExpired || !strings.Contains(e.Message, "expire") {
						errs <- fmt.Errorf("goroutine %d call %d: want expired, got %v", g, i, err)
						return
					}
					continue
				}
				c, err := v.Verify(tok, at(now+int64(i)))
				if err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %v", g, i, err)
					return
				}
				if c.AllocationID != allocID {
					errs <- fmt.Errorf("goroutine %d: claims %+v", g, c)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := atomic.LoadInt64(&store.n); n != goroutines*each*9/10 {
		t.Errorf("store answered %d lookups, want %d", n, goroutines*each*9/10)
	}
}

func TestConcurrentIssueRotate(t *testing.T) {
	kr := newKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), nil)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				tok, err := kr.Issue(request(allocID, aud), at(now))
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := v.Verify(tok, at(now)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for i := 0; i < 5; i++ {
		if _, err := kr.Rotate(at(now + int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestVerifyBatch(t *testing.T) {
	kr := newKeyring(t)
	store := newMemStore(map[string]AllocState{allocID: Live, "done": Terminal})
	v := newVerifier(t, kr, aud, store, nil)
	good := issue(t, kr, request(allocID, aud), now)
	tokens := []string{
		good,
		issue(t, kr, request("done", aud), now),
		"garbage",
		issue(t, kr, request(allocID, "other.io"), now),
		"",
		good,
	}
	errs := v.VerifyBatch(tokens, at(now))
	want := []*Error{nil, ErrAllocationTerminal, ErrMalformedToken, ErrAudienceMismatch, ErrMalformedToken, nil}
	if len(errs) != len(want) {
		t.Fatalf("%d results", len(errs))
	}
	for i, w := range want {
		if w == nil {
			if errs[i] != nil {
				t.Errorf("token %d: %v", i, errs[i])
			}
			continue
		}
		wantCode(t, errs[i], w)
	}
	if got := v.VerifyBatch(nil, at(now)); len(got) != 0 {
		t.Errorf("empty batch: %v", got)
	}

	// Store failures inside a batch carry their causes.
	failing := newVerifier(t, kr, aud, StateStoreFunc(func(id string, _ Consistency) (AllocState, error) {
		if id == "done" {
			return Missing, fmt.Errorf("lookup of %s failed: %w", id, errReplicaDown)
		}
		return Live, nil
	}), nil)
	errs = failing.VerifyBatch([]string{tokens[1], good, tokens[1]}, at(now))
	if errs[1] != nil {
		t.Errorf("good token in a failing batch: %v", errs[1])
	}
	for _, i := range []int{0, 2} {
		wantCode(t, errs[i], ErrStoreUnavailable)
		if !errors.Is(errs[i], errReplicaDown) {
			t.Errorf("batch store failure %d has no cause: %#v", i, errs[i])
		}
	}
	// Nothing left behind.
	if _, err := failing.Verify(good, at(now)); err != nil {
		t.Error(err)
	}
}

func TestGoMsgpackVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), "issue_request_task.msgpack"))
	if err != nil {
		t.Fatalf("committed vector: %v", err)
	}
	// Our structs decode Nomad's full encoding (extra fields are skipped).
	req, err := DecodeIssueRequest(raw)
	if err != nil {
		t.Fatalf("DecodeIssueRequest: %v", err)
	}
	if req.Region != "global" || req.Task != "server" || req.Allocation == nil ||
		req.Allocation.ID != allocID || req.Allocation.Job == nil || req.Allocation.Job.ParentID != "web" ||
		req.Identity == nil || req.Identity.TTL != time.Hour ||
		!reflect.DeepEqual(req.Identity.Audience, []string{"vault.io", "consul.io"}) {
		t.Fatalf("decoded %+v / %+v / %+v", req, req.Allocation, req.Identity)
	}

	kr := newKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), nil)
	// The raw Go bytes, straight to the library.
	tok, err := kr.IssueMsgpack(raw, at(now))
	if err != nil {
		t.Fatalf("IssueMsgpack: %v", err)
	}
	c, err := v.Verify(tok, at(now))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if c.JobID != "web" || c.Task != "server" || c.AllocationID != allocID ||
		c.Subject != "global:default:web:frontend:server:vault_default" ||
		!reflect.DeepEqual(c.Audience, []string{"vault.io", "consul.io"}) ||
		c.Expires.Unix() != now+3600 {
		t.Errorf("claims %+v", c)
	}
	// The same request re-encoded through our structs gives the same claims.
	c2, err := v.Verify(issue(t, kr, req, now), at(now))
	if err != nil {
		t.Fatal(err)
	}
	c2.JTI = c.JTI
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("re-encoded request: %+v, raw: %+v", c2, c)
	}

	// The service vector.
	raw, err = os.ReadFile(filepath.Join(vectorsDir(), "issue_request_service.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err = kr.IssueMsgpack(raw, at(now))
	if err != nil {
		t.Fatalf("IssueMsgpack (service): %v", err)
	}
	cv := newVerifier(t, kr, "consul.io", liveStore(), nil)
	c, err = cv.Verify(tok, at(now))
	if err != nil {
		t.Fatal(err)
	}
	if c.Service != "web-api" || c.Task != "" || !strings.HasPrefix(c.Subject, "eu-west:") {
		t.Errorf("service claims %+v", c)
	}
}

func TestEncodeIssueRequest(t *testing.T) {
	b, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	// Keys are the Go field names, as Nomad writes them.
	var m map[string]interface{}
	if err := codec.NewDecoderBytes(b, msgpackHandle).Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Region", "Allocation", "Task", "Service", "Identity"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q key in %v", k, m)
		}
	}
	back, err := DecodeIssueRequest(b)
	if err != nil || !reflect.DeepEqual(back, request(allocID, aud)) {
		t.Errorf("round trip: %v %+v", err, back)
	}
	_, err = EncodeIssueRequest(nil)
	wantCode(t, err, ErrNullArgument)
}

func TestIssueErrors(t *testing.T) {
	empty, _ := NewKeyring()
	defer empty.Close()
	_, err := empty.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrNoActiveKey)

	kr := newKeyring(t)
	both := request(allocID, aud)
	both.Service = "web-api"
	_, err = kr.Issue(both, at(now))
	e := wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(e.Message, "exactly one of Task and Service") {
		t.Errorf("message %q", e.Message)
	}
	bad := request(allocID, aud)
	bad.Identity.Name = "no spaces"
	bad.Region = ""
	_, err = kr.Issue(bad, at(now))
	e = wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(e.Message, "Region") || !strings.Contains(e.Message, "Identity.Name") {
		t.Errorf("message %q", e.Message)
	}
	_, err = kr.IssueMsgpack([]byte{0xc1}, at(now))
	wantCode(t, err, ErrDecodeError)
	_, err = kr.IssueMsgpack(nil, at(now))
	if err == nil {
		t.Error("empty request issued")
	}
	_, err = kr.Issue(nil, at(now))
	wantCode(t, err, ErrNullArgument)
}

func TestInsertErrors(t *testing.T) {
	kr := newKeyring(t)
	wantCode(t, kr.Insert("key-1", material(8), DerivationHKDFV1, KeyStateInactive, at(now)), ErrDuplicateKey)
	wantCode(t, kr.Insert("key-2", material(8), DerivationHKDFV1, KeyStateActive, at(now)), ErrInvalidArgument)
	wantCode(t, kr.Insert("key-3", material(8)[:31], DerivationHKDFV1, KeyStateInactive, at(now)), ErrInvalidArgument)
	wantCode(t, kr.Insert("key-4", material(8), Derivation(9), KeyStateInactive, at(now)), ErrInvalidArgument)
	wantCode(t, kr.Insert("key-5", material(8), DerivationHKDFV1, KeyState(0), at(now)), ErrInvalidArgument)
	wantCode(t, kr.Insert("", material(8), DerivationHKDFV1, KeyStateInactive, at(now)), ErrInvalidArgument)
	wantCode(t, kr.Insert("a/b", material(8), DerivationHKDFV1, KeyStateInactive, at(now)), ErrInvalidArgument)
	if err := kr.Insert("nomad-seed", material(8), DerivationNomadRawSeed, KeyStateInactive, at(now)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, kr.Deprecate("no-such-key", at(now)), ErrUnknownKey)
}

func TestJWKSExportImport(t *testing.T) {
	kr := newKeyring(t)
	if _, err := kr.Rotate(at(now)); err != nil {
		t.Fatal(err)
	}
	tok := issue(t, kr, request(allocID, aud), now)
	jwks, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []map[string]interface{} `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatalf("JWKS is not JSON: %v: %s", err, jwks)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("%d keys: %s", len(set.Keys), jwks)
	}
	for _, k := range set.Keys {
		if k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["kid"] == "" || k["x"] == "" || k["d"] != nil {
			t.Errorf("JWK %v", k)
		}
	}

	replica, _ := NewKeyring()
	defer replica.Close()
	n, err := replica.ImportJWKS(jwks)
	if err != nil || n != 2 {
		t.Fatalf("ImportJWKS: %d %v", n, err)
	}
	v := newVerifier(t, replica, aud, liveStore(), noWait)
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatalf("Verify against imported keys: %v", err)
	}
	// Imported keys verify only.
	_, err = replica.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrNoActiveKey)
	if n, err := replica.ImportJWKS(jwks); err != nil {
		t.Logf("importing the same JWKS again: %v", err)
	} else {
		t.Logf("importing the same JWKS again: %d added", n)
	}
	if _, err := replica.ImportJWKS([]byte("{not json")); err == nil {
		t.Error("garbage JWKS imported")
	} else {
		t.Logf("garbage JWKS: %v", err)
	}
	if _, err := replica.ImportJWKS(nil); err == nil {
		t.Error("empty JWKS imported")
	}
}

func TestSaveLoad(t *testing.T) {
	kr := newKeyring(t)
	rotated, err := kr.Rotate(at(now))
	if err != nil {
		t.Fatal(err)
	}
	tok := issue(t, kr, request(allocID, aud), now)
	path := filepath.Join(t.TempDir(), "keyring.json")
	if err := kr.Save(path); err != nil {
		t.Fatalf("Save: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	loaded, err := LoadKeyring(path)
	if err != nil {
		t.Fatalf("LoadKeyring: %v", err)
	}
	defer loaded.Close()
	v := newVerifier(t, loaded, aud, liveStore(), noWait)
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatalf("token from the original, verified by the loaded keyring: %v", err)
	}
	tok2 := issue(t, loaded, request(allocID, aud), now)
	if kid(t, tok2) != rotated {
		t.Errorf("loaded keyring signs with %q, want %q", kid(t, tok2), rotated)
	}
	v0 := newVerifier(t, kr, aud, liveStore(), noWait)
	if _, err := v0.Verify(tok2, at(now)); err != nil {
		t.Fatalf("token from the loaded, verified by the original keyring: %v", err)
	}
	a, _ := kr.JWKS()
	b, _ := loaded.JWKS()
	if !bytes.Equal(a, b) {
		t.Errorf("JWKS differ:\n%s\n%s", a, b)
	}

	_, err = LoadKeyring(filepath.Join(t.TempDir(), "missing.json"))
	wantCode(t, err, ErrIOError)
	_, err = LoadKeyring("")
	wantCode(t, err, ErrInvalidArgument)
	garbage := filepath.Join(t.TempDir(), "garbage.json")
	if err := os.WriteFile(garbage, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyring(garbage); err == nil {
		t.Error("garbage keyring loaded")
	} else {
		t.Logf("garbage keyring: %v", err)
	}
	wantCode(t, kr.Save(filepath.Join(t.TempDir(), "no", "such", "dir", "k.json")), ErrIOError)
}

func TestCloseIdempotent(t *testing.T) {
	kr, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	if err := kr.Insert("key-1", material(7), DerivationHKDFV1, KeyStateActive, at(now)); err != nil {
		t.Fatal(err)
	}
	tok := issue(t, kr, request(allocID, aud), now)
	v, err := NewVerifier(kr, aud, liveStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	kr.Close()
	kr.Close()
	// The verifier holds its own reference to the keyring.
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatalf("Verify after the keyring handle closed: %v", err)
	}
	_, err = kr.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrNullArgument)
	_, err = kr.JWKS()
	wantCode(t, err, ErrNullArgument)
	_, err = NewVerifier(kr, aud, liveStore(), nil)
	wantCode(t, err, ErrNullArgument)

	v.Close()
	v.Close()
	_, err = v.Verify(tok, at(now))
	wantCode(t, err, ErrNullArgument)
	for _, err := range v.VerifyBatch([]string{tok}, at(now)) {
		wantCode(t, err, ErrNullArgument)
	}
}

// Close waits for calls in flight instead of freeing under them.
func TestCloseWhileVerifying(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	v, err := NewVerifier(kr, aud, StateStoreFunc(func(string, Consistency) (AllocState, error) {
		once.Do(func() { close(entered) })
		<-release
		return Live, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		_, err := v.Verify(tok, at(now))
		result <- err
	}()
	<-entered
	closed := make(chan struct{})
	go func() { v.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a Verify was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-result; err != nil {
		t.Fatalf("in-flight Verify: %v", err)
	}
	<-closed
}

// header returns the alg and kid of a token's JOSE header.
func header(t testing.TB, token string) (alg, kid string) {
	t.Helper()
	seg := strings.SplitN(token, ".", 2)[0]
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatalf("header: %v", err)
	}
	var h struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatalf("header: %v", err)
	}
	return h.Alg, h.Kid
}

// rsaKeys are generated once: RSA key generation is slow under -race.
var rsaKeys struct {
	once  sync.Once
	k2048 *rsa.PrivateKey // e = 65537
	k1024 *rsa.PrivateKey // too small
	e3    *rsa.PrivateKey // 2048 bits, e = 3
	err   error
}

func testRSAKeys(t testing.TB) (k2048, k1024, e3 *rsa.PrivateKey) {
	t.Helper()
	rsaKeys.once.Do(func() {
		if rsaKeys.k2048, rsaKeys.err = rsa.GenerateKey(rand.Reader, 2048); rsaKeys.err != nil {
			return
		}
		if rsaKeys.k1024, rsaKeys.err = rsa.GenerateKey(rand.Reader, 1024); rsaKeys.err != nil {
			return
		}
		rsaKeys.e3, rsaKeys.err = rsaKeyWithExponent(2048, 3)
	})
	if rsaKeys.err != nil {
		t.Fatalf("generating RSA keys: %v", rsaKeys.err)
	}
	return rsaKeys.k2048, rsaKeys.k1024, rsaKeys.e3
}

// rsaKeyWithExponent makes a valid RSA key with public exponent e (crypto/rsa
// only makes e = 65537).
func rsaKeyWithExponent(bits, e int) (*rsa.PrivateKey, error) {
	one, bigE := big.NewInt(1), big.NewInt(int64(e))
	for {
		p, err := rand.Prime(rand.Reader, bits/2)
		if err != nil {
			return nil, err
		}
		q, err := rand.Prime(rand.Reader, bits/2)
		if err != nil {
			return nil, err
		}
		n := new(big.Int).Mul(p, q)
		if p.Cmp(q) == 0 || n.BitLen() != bits {
			continue
		}
		phi := new(big.Int).Mul(new(big.Int).Sub(p, one), new(big.Int).Sub(q, one))
		d := new(big.Int).ModInverse(bigE, phi)
		if d == nil {
			continue // e divides p-1 or q-1
		}
		k := &rsa.PrivateKey{PublicKey: rsa.PublicKey{N: n, E: e}, D: d, Primes: []*big.Int{p, q}}
		if err := k.Validate(); err != nil {
			return nil, err
		}
		k.Precompute()
		return k, nil
	}
}

func pkcs8(t testing.TB, key interface{}) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// newAlgKeyring returns a keyring with an active key of each algorithm:
// "key-1" (EdDSA), "es-1" (ES256, HKDF v1 of material(3)) and "rs-1"
// (RS256, testRSAKeys' 2048-bit key).
func newAlgKeyring(t testing.TB) *Keyring {
	t.Helper()
	kr := newKeyring(t)
	if err := kr.InsertAlg(AlgES256, "es-1", material(3), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg(ES256): %v", err)
	}
	k2048, _, _ := testRSAKeys(t)
	if err := kr.InsertAlg(AlgRS256, "rs-1", pkcs8(t, k2048), DerivationPKCS8, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg(RS256): %v", err)
	}
	return kr
}

func TestAlgConstants(t *testing.T) {
	// The header's numbers (WID_ALG_EDDSA 1, WID_ALG_ES256 2, WID_ALG_RS256 3).
	for alg, want := range map[Alg]uint32{AlgEdDSA: 1, AlgES256: 2, AlgRS256: 3} {
		if uint32(alg) != want {
			t.Errorf("%v = %d, want %d", alg, uint32(alg), want)
		}
	}
	if DerivationPKCS8 != 3 {
		t.Errorf("DerivationPKCS8 = %d, want 3", DerivationPKCS8)
	}
	for alg, want := range map[Alg]string{AlgEdDSA: "EdDSA", AlgES256: "ES256", AlgRS256: "RS256", Alg(99): "Alg(99)"} {
		if got := alg.String(); got != want {
			t.Errorf("Alg(%d).String() = %q, want %q", uint32(alg), got, want)
		}
	}
}

func TestIssueAlgVerify(t *testing.T) {
	kr := newAlgKeyring(t)
	store := liveStore()
	v := newVerifier(t, kr, aud, store, noWait)
	const iss = "https://nomad.example.com"
	issV := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Issuer: iss, KeyWait: -1})
	for _, c := range []struct {
		alg      Alg
		kid      string
		sigBytes int // raw signature length: Ed25519 64, P-256 r||s 64, RSA-2048 256
	}{
		{AlgEdDSA, "key-1", 64},
		{AlgES256, "es-1", 64},
		{AlgRS256, "rs-1", 256},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			tok, err := kr.IssueAlg(c.alg, request(allocID, aud), "", at(now))
			if err != nil {
				t.Fatalf("IssueAlg: %v", err)
			}
			if alg, kid := header(t, tok); alg != c.alg.String() || kid != c.kid {
				t.Fatalf("header alg %q kid %q, want %v %q", alg, kid, c.alg, c.kid)
			}
			sig, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[2])
			if err != nil || len(sig) != c.sigBytes {
				t.Fatalf("signature: %d bytes (%v), want %d", len(sig), err, c.sigBytes)
			}
			cl, err := v.Verify(tok, at(now+10))
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if cl.AllocationID != allocID || cl.Subject != "global:default:web:frontend:server:default" ||
				cl.Expires.Unix() != now+ttl || cl.Issuer != "" {
				t.Errorf("claims %+v", cl)
			}
			if _, err := issV.Verify(tok, at(now)); !errors.Is(err, ErrIssuerMismatch) {
				t.Errorf("no iss against a required issuer: %v", err)
			}

			// With an issuer, and through the msgpack entry point.
			withIss, err := kr.IssueAlg(c.alg, request(allocID, aud), iss, at(now))
			if err != nil {
				t.Fatal(err)
			}
			if cl, err := issV.Verify(withIss, at(now)); err != nil || cl.Issuer != iss {
				t.Errorf("with issuer: %v %+v", err, cl)
			}
			raw, err := EncodeIssueRequest(request(allocID, aud))
			if err != nil {
				t.Fatal(err)
			}
			mp, err := kr.IssueMsgpackAlg(c.alg, raw, iss, at(now))
			if err != nil {
				t.Fatalf("IssueMsgpackAlg: %v", err)
			}
			if alg, kid := header(t, mp); alg != c.alg.String() || kid != c.kid {
				t.Errorf("msgpack token header %q %q", alg, kid)
			}
			if _, err := issV.Verify(mp, at(now)); err != nil {
				t.Errorf("msgpack token: %v", err)
			}

			// Tampering is caught for every algorithm.
			parts := strings.Split(tok, ".")
			forged := strings.Replace(string(mustB64(t, parts[1])), allocID, "00000000-0000-0000-0000-000000000000", 1)
			_, err = v.Verify(parts[0]+"."+base64.RawURLEncoding.EncodeToString([]byte(forged))+"."+parts[2], at(now))
			wantCode(t, err, ErrBadSignature)
		})
	}
	// Issue and IssueWithIssuer still mean EdDSA.
	if alg, kid := header(t, issue(t, kr, request(allocID, aud), now)); alg != "EdDSA" || kid != "key-1" {
		t.Errorf("Issue signed with %s/%s", alg, kid)
	}
}

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A token's alg must be the algorithm of the key its kid names.
func TestAlgPinnedByKey(t *testing.T) {
	kr := newAlgKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	for _, alg := range []Alg{AlgEdDSA, AlgES256, AlgRS256} {
		tok, err := kr.IssueAlg(alg, request(allocID, aud), "", at(now))
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(tok, ".")
		_, kid := header(t, tok)
		for _, other := range []string{"EdDSA", "ES256", "RS256", "PS256", "HS256", "ES384", "none", "Ed25519"} {
			if other == alg.String() || (alg == AlgEdDSA && other == "Ed25519") {
				continue
			}
			h := fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"JWT"}`, other, kid)
			_, err := v.Verify(base64.RawURLEncoding.EncodeToString([]byte(h))+"."+parts[1]+"."+parts[2], at(now))
			wantCode(t, err, ErrUnsupportedAlgorithm)
		}
	}
}

func TestRotateAlg(t *testing.T) {
	kr := newAlgKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	old := map[Alg]string{}
	for _, alg := range []Alg{AlgEdDSA, AlgES256, AlgRS256} {
		tok, err := kr.IssueAlg(alg, request(allocID, aud), "", at(now))
		if err != nil {
			t.Fatal(err)
		}
		old[alg] = tok
	}

	for _, alg := range []Alg{AlgES256, AlgRS256} {
		id, err := kr.RotateAlg(alg, at(now+10))
		if err != nil {
			t.Fatalf("RotateAlg(%v): %v", alg, err)
		}
		if id == "" || id == "es-1" || id == "rs-1" {
			t.Fatalf("RotateAlg(%v): new key id %q", alg, id)
		}
		tok, err := kr.IssueAlg(alg, request(allocID, aud), "", at(now+10))
		if err != nil {
			t.Fatal(err)
		}
		if a, kid := header(t, tok); a != alg.String() || kid != id {
			t.Errorf("after RotateAlg(%v): signed with %s/%s, want %q", alg, a, kid, id)
		}
		if _, err := v.Verify(tok, at(now+20)); err != nil {
			t.Errorf("new %v token: %v", alg, err)
		}
	}
	// The previous keys still verify; EdDSA was left alone.
	for alg, tok := range old {
		if _, err := v.Verify(tok, at(now+20)); err != nil {
			t.Errorf("%v token from before the rotation: %v", alg, err)
		}
	}
	if _, kid := header(t, issue(t, kr, request(allocID, aud), now+10)); kid != "key-1" {
		t.Errorf("rotating ES256 and RS256 changed the EdDSA key to %q", kid)
	}
	// RotateAlg(AlgEdDSA) is Rotate.
	id, err := kr.RotateAlg(AlgEdDSA, at(now+30))
	if err != nil {
		t.Fatal(err)
	}
	if got := kid(t, issue(t, kr, request(allocID, aud), now+30)); got != id {
		t.Errorf("EdDSA signs with %q after RotateAlg, want %q", got, id)
	}

	// A keyring with no key of an algorithm gets one by rotating.
	fresh, _ := NewKeyring()
	defer fresh.Close()
	id, err = fresh.RotateAlg(AlgES256, at(now))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := fresh.IssueAlg(AlgES256, request(allocID, aud), "", at(now))
	if err != nil {
		t.Fatal(err)
	}
	if _, kid := header(t, tok); kid != id {
		t.Errorf("kid %q, want %q", kid, id)
	}
	_, err = fresh.Issue(request(allocID, aud), at(now))
	wantCode(t, err, ErrNoActiveKey)
}

func TestAlgJWKS(t *testing.T) {
	kr := newAlgKeyring(t)
	k2048, _, _ := testRSAKeys(t)
	jwks, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []map[string]interface{} `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatalf("JWKS is not JSON: %v: %s", err, jwks)
	}
	byKid := map[string]map[string]interface{}{}
	for _, k := range set.Keys {
		byKid[k["kid"].(string)] = k
		for _, private := range []string{"d", "p", "q", "dp", "dq", "qi"} {
			if _, ok := k[private]; ok {
				t.Errorf("JWK %v has private member %q", k["kid"], private)
			}
		}
	}
	if len(byKid) != 3 {
		t.Fatalf("%d keys: %s", len(byKid), jwks)
	}
	ec := byKid["es-1"]
	if ec["kty"] != "EC" || ec["crv"] != "P-256" || ec["alg"] != "ES256" || ec["use"] != "sig" ||
		len(mustB64(t, ec["x"].(string))) != 32 || len(mustB64(t, ec["y"].(string))) != 32 {
		t.Errorf("EC JWK %v", ec)
	}
	rs := byKid["rs-1"]
	if rs["kty"] != "RSA" || rs["alg"] != "RS256" || rs["use"] != "sig" || rs["e"] != "AQAB" ||
		!bytes.Equal(mustB64(t, rs["n"].(string)), k2048.N.Bytes()) {
		t.Errorf("RSA JWK %v", rs)
	}

	// A replica verifies every algorithm from the imported JWKS, and cannot sign.
	replica, _ := NewKeyring()
	defer replica.Close()
	if n, err := replica.ImportJWKS(jwks); err != nil || n != 3 {
		t.Fatalf("ImportJWKS: %d %v", n, err)
	}
	v := newVerifier(t, replica, aud, liveStore(), noWait)
	for _, alg := range []Alg{AlgEdDSA, AlgES256, AlgRS256} {
		tok, err := kr.IssueAlg(alg, request(allocID, aud), "", at(now))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok, at(now)); err != nil {
			t.Errorf("%v token against the imported JWKS: %v", alg, err)
		}
		_, err = replica.IssueAlg(alg, request(allocID, aud), "", at(now))
		wantCode(t, err, ErrNoActiveKey)
	}
}

func TestAlgSaveLoad(t *testing.T) {
	kr := newAlgKeyring(t)
	path := filepath.Join(t.TempDir(), "keyring.json")
	if err := kr.Save(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadKeyring(path)
	if err != nil {
		t.Fatalf("LoadKeyring: %v", err)
	}
	defer loaded.Close()
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	for _, alg := range []Alg{AlgEdDSA, AlgES256, AlgRS256} {
		tok, err := loaded.IssueAlg(alg, request(allocID, aud), "", at(now))
		if err != nil {
			t.Fatalf("loaded keyring, %v: %v", alg, err)
		}
		if _, err := v.Verify(tok, at(now)); err != nil {
			t.Errorf("%v token of the loaded keyring, verified by the original: %v", alg, err)
		}
	}
	a, _ := kr.JWKS()
	b, _ := loaded.JWKS()
	if !bytes.Equal(a, b) {
		t.Errorf("JWKS differ:\n%s\n%s", a, b)
	}
}

func TestAlgErrors(t *testing.T) {
	const unknown = Alg(99)
	kr := newKeyring(t) // EdDSA only

	// Unknown algorithm: INVALID_ARGUMENT from every entry point.
	_, err := kr.IssueAlg(unknown, request(allocID, aud), "", at(now))
	e := wantCode(t, err, ErrInvalidArgument)
	t.Logf("IssueAlg(99): %v", e)
	raw, _ := EncodeIssueRequest(request(allocID, aud))
	_, err = kr.IssueMsgpackAlg(unknown, raw, "", at(now))
	wantCode(t, err, ErrInvalidArgument)
	_, err = kr.RotateAlg(unknown, at(now))
	e = wantCode(t, err, ErrInvalidArgument)
	t.Logf("RotateAlg(99): %v", e)
	e = wantCode(t, kr.InsertAlg(unknown, "k-99", material(1), DerivationHKDFV1, KeyStateInactive, at(now)), ErrInvalidArgument)
	t.Logf("InsertAlg(99): %v", e)
	_, err = kr.RotateAlg(Alg(0), at(now))
	wantCode(t, err, ErrInvalidArgument)

	// No active key of the algorithm: NO_ACTIVE_KEY (EdDSA's key does not stand in).
	for _, alg := range []Alg{AlgES256, AlgRS256} {
		_, err := kr.IssueAlg(alg, request(allocID, aud), "", at(now))
		e := wantCode(t, err, ErrNoActiveKey)
		t.Logf("IssueAlg(%v) without a key: %v", alg, e)
	}
	// An inactive key does not sign either.
	if err := kr.InsertAlg(AlgES256, "es-old", material(4), DerivationHKDFV1, KeyStateInactive, at(now)); err != nil {
		t.Fatal(err)
	}
	_, err = kr.IssueAlg(AlgES256, request(allocID, aud), "", at(now))
	wantCode(t, err, ErrNoActiveKey)

	// Material and derivation must fit the algorithm.
	k2048, k1024, e3 := testRSAKeys(t)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		alg      Alg
		material []byte
		d        Derivation
	}{
		"ES256 raw seed":        {AlgES256, material(5), DerivationNomadRawSeed},
		"ES256 PKCS8":           {AlgES256, pkcs8(t, ecKey), DerivationPKCS8},
		"ES256 31 bytes":        {AlgES256, material(5)[:31], DerivationHKDFV1},
		"RS256 HKDF":            {AlgRS256, material(5), DerivationHKDFV1},
		"RS256 raw seed":        {AlgRS256, material(5), DerivationNomadRawSeed},
		"RS256 1024-bit":        {AlgRS256, pkcs8(t, k1024), DerivationPKCS8},
		"RS256 e=3":             {AlgRS256, pkcs8(t, e3), DerivationPKCS8},
		"RS256 P-256 PKCS8":     {AlgRS256, pkcs8(t, ecKey), DerivationPKCS8},
		"RS256 PKCS1 not PKCS8": {AlgRS256, x509.MarshalPKCS1PrivateKey(k2048), DerivationPKCS8},
		"RS256 empty":           {AlgRS256, nil, DerivationPKCS8},
		"EdDSA PKCS8":           {AlgEdDSA, pkcs8(t, k2048), DerivationPKCS8},
		"EdDSA PKCS8 32 bytes":  {AlgEdDSA, material(5), DerivationPKCS8},
		"RS256 unknown deriv.":  {AlgRS256, pkcs8(t, k2048), Derivation(9)},
		"ES256 unknown deriv.":  {AlgES256, material(5), Derivation(0)},
		"RS256 truncated PKCS8": {AlgRS256, pkcs8(t, k2048)[:100], DerivationPKCS8},
	} {
		t.Run(name, func(t *testing.T) {
			err := kr.InsertAlg(c.alg, "bad-key", c.material, c.d, KeyStateInactive, at(now))
			e := wantCode(t, err, ErrInvalidArgument)
			t.Logf("%v", e)
		})
	}

	// DER with a trailing byte: the material must be exactly one DER SEQUENCE
	// (bytes a parser skips would be stored and carried along unchecked).
	e = wantCode(t, kr.InsertAlg(AlgRS256, "rs-trailing", append(pkcs8(t, k2048), 0), DerivationPKCS8, KeyStateInactive, at(now)), ErrInvalidArgument)
	if !strings.Contains(e.Error(), "trailing") {
		t.Fatalf("the refusal should say why: %v", e)
	}

	// One active key per algorithm; key IDs are unique across algorithms.
	if err := kr.InsertAlg(AlgES256, "es-1", material(6), DerivationHKDFV1, KeyStateActive, at(now)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, kr.InsertAlg(AlgES256, "es-2", material(6), DerivationHKDFV1, KeyStateActive, at(now)), ErrInvalidArgument)
	wantCode(t, kr.InsertAlg(AlgES256, "key-1", material(6), DerivationHKDFV1, KeyStateInactive, at(now)), ErrDuplicateKey)
	wantCode(t, kr.InsertAlg(AlgRS256, "es-1", pkcs8(t, k2048), DerivationPKCS8, KeyStateInactive, at(now)), ErrDuplicateKey)
	if err := kr.InsertAlg(AlgRS256, "rs-1", pkcs8(t, k2048), DerivationPKCS8, KeyStateActive, at(now)); err != nil {
		t.Fatalf("an active RS256 key beside active EdDSA and ES256 keys: %v", err)
	}

	// A closed keyring.
	closed, _ := NewKeyring()
	closed.Close()
	wantCode(t, closed.InsertAlg(AlgES256, "es-1", material(6), DerivationHKDFV1, KeyStateActive, at(now)), ErrNullArgument)
	_, err = closed.RotateAlg(AlgES256, at(now))
	wantCode(t, err, ErrNullArgument)
	_, err = closed.IssueAlg(AlgES256, request(allocID, aud), "", at(now))
	wantCode(t, err, ErrNullArgument)
	_, err = kr.IssueAlg(AlgES256, nil, "", at(now))
	wantCode(t, err, ErrNullArgument)
}

// A negative duration the library cannot take is refused, the message
// naming the option or argument.
func TestNegativeDurationsNameTheOption(t *testing.T) {
	kr := newKeyring(t)
	key, err := GenerateWorkloadKey(AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	for name, f := range map[string]func() error{
		"VerifierOptions.MaxProofLifetime": func() error {
			_, err := NewVerifier(kr, aud, liveStore(), &VerifierOptions{MaxProofLifetime: -time.Second})
			return err
		},
		"RemoteJWKSOptions.MinRefresh": func() error {
			_, err := NewRemoteJWKS("https://issuer.example.com/jwks.json",
				&RemoteJWKSOptions{MinRefresh: -time.Second, MaxRefresh: time.Hour})
			return err
		},
		"RemoteJWKSOptions.Timeout": func() error {
			_, err := NewRemoteJWKS("https://issuer.example.com/jwks.json", &RemoteJWKSOptions{Timeout: -time.Second})
			return err
		},
		"WorkloadKey.Prove: ttl": func() error {
			_, err := key.Prove("a.b.c", "https://vault.example.com", "", -time.Second, at(now))
			return err
		},
		"Keyring.SpiffeBundle: refreshHint": func() error { _, err := kr.SpiffeBundle(-time.Second); return err },
	} {
		if e := wantCode(t, f(), ErrInvalidArgument); !strings.Contains(e.Message, name) {
			t.Errorf("%s: %v", name, e)
		}
	}
}
