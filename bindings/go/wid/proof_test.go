package wid

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	trustDomain = "nomad.example.com"
	witIssuer   = "https://nomad.example.com"
	target      = "https://vault.example.com/v1/auth/jwt/login"
)

var nowTime = time.Unix(now, 0)

// newWITKeyring returns a keyring with an active EdDSA and an active ES256 key.
func newWITKeyring(t testing.TB) *Keyring {
	t.Helper()
	kr, err := NewKeyring()
	if err != nil {
		t.Fatalf("NewKeyring: %v", err)
	}
	t.Cleanup(kr.Close)
	// WITs are signed only by WIT keys, bearer tokens only by bearer keys.
	if err := kr.InsertPurpose(PurposeWIT, AlgEdDSA, "wit-ed", material(11), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertPurpose EdDSA: %v", err)
	}
	if err := kr.InsertPurpose(PurposeWIT, AlgES256, "wit-es", material(12), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertPurpose ES256: %v", err)
	}
	if err := kr.InsertAlg(AlgEdDSA, "bearer-ed", material(13), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg EdDSA: %v", err)
	}
	if err := kr.InsertAlg(AlgES256, "bearer-es", material(14), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg ES256: %v", err)
	}
	return kr
}

// WIT keys are published apart from the JWKS, sign WITs only, and a
// verifier that imported only the JWKS cannot accept a WIT.
func TestWITKeysArePublishedApart(t *testing.T) {
	kr := newWITKeyring(t)
	jwks, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	witSet, err := kr.JWKSPurpose(PurposeWIT)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(jwks), "wit-") || !strings.Contains(string(jwks), "bearer-ed") {
		t.Fatalf("JWKS %s", jwks)
	}
	if !strings.Contains(string(witSet), `"kid":"wit-es"`) || strings.Contains(string(witSet), "bearer-") {
		t.Fatalf("WIT key set %s", witSet)
	}
	if _, err := kr.JWKSPurpose(KeyPurpose(7)); err == nil {
		t.Fatal("JWKSPurpose(7) succeeded")
	}
	key := newWorkloadKey(t, AlgES256)
	wit := issueWIT(t, kr, AlgES256, witRequest(t, key))
	if h := segment(t, wit, 0); h["kid"] != "wit-es" {
		t.Fatalf("WIT signed by %v, want wit-es", h["kid"])
	}
	if c := segment(t, wit, 1); c["aud"] != nil {
		t.Fatalf("a WIT carries aud %v", c["aud"])
	}
	wpt := prove(t, key, wit, "https://svc.example.com/x", "", time.Minute, nowTime)
	for _, tc := range []struct {
		purpose KeyPurpose
		set     []byte
		want    *Error
	}{{PurposeBearer, jwks, ErrUnknownKey}, {PurposeWIT, witSet, nil}} {
		rp, err := NewKeyring()
		if err != nil {
			t.Fatal(err)
		}
		defer rp.Close()
		if n, err := rp.ImportJWKSPurpose(tc.purpose, tc.set); err != nil || n != 2 {
			t.Fatalf("ImportJWKSPurpose: %d, %v", n, err)
		}
		v := newVerifier(t, rp, aud, liveStore(), &VerifierOptions{KeyWait: -1, Issuer: witIssuer})
		_, err = v.VerifyProof(wit, wpt, "https://svc.example.com/x", "", nowTime)
		if tc.want == nil && err != nil {
			t.Fatalf("the WIT key set's verifier refused: %v", err)
		}
		if tc.want != nil {
			wantCode(t, err, tc.want)
		}
	}
	// A keyring with bearer keys only signs no WIT, and says how to fix it.
	bearerOnly := newKeyring(t)
	_, err = bearerOnly.IssueWIT(AlgEdDSA, witRequest(t, key), "", trustDomain, nowTime)
	if e := wantCode(t, err, ErrNoActiveKey); !strings.Contains(e.Message, "--purpose wit") {
		t.Fatalf("message %q does not name the fix", e.Message)
	}
	if _, err := bearerOnly.RotatePurpose(PurposeWIT, AlgEdDSA, at(now)); err != nil {
		t.Fatal(err)
	}
	if _, err := bearerOnly.IssueWIT(AlgEdDSA, witRequest(t, key), "", trustDomain, nowTime); err != nil {
		t.Fatalf("IssueWIT after RotatePurpose: %v", err)
	}
}

func newWorkloadKey(t testing.TB, alg Alg) *WorkloadKey {
	t.Helper()
	k, err := GenerateWorkloadKey(alg)
	if err != nil {
		t.Fatalf("GenerateWorkloadKey(%v): %v", alg, err)
	}
	t.Cleanup(k.Close)
	return k
}

// witRequest is the sample task request carrying key's ProofKey, encoded
// with go-msgpack as Nomad would.
func witRequest(t testing.TB, key *WorkloadKey) []byte {
	t.Helper()
	pk, err := key.ProofKey()
	if err != nil {
		t.Fatalf("ProofKey: %v", err)
	}
	req := request(allocID, aud, "consul.io")
	req.ProofKey = pk
	b, err := EncodeIssueRequest(req)
	if err != nil {
		t.Fatalf("EncodeIssueRequest: %v", err)
	}
	return b
}

func issueWIT(t testing.TB, kr *Keyring, alg Alg, req []byte) string {
	t.Helper()
	wit, err := kr.IssueWIT(alg, req, witIssuer, trustDomain, nowTime)
	if err != nil {
		t.Fatalf("IssueWIT: %v", err)
	}
	return wit
}

func prove(t testing.TB, key *WorkloadKey, wit, targetURI, accessToken string, ttl time.Duration, at time.Time) string {
	t.Helper()
	wpt, err := key.Prove(wit, targetURI, accessToken, ttl, at)
	if err != nil {
		t.Fatalf("Prove: %v", err)
	}
	return wpt
}

// segment decodes part i (0 header, 1 claims) of a compact JWS.
func segment(t testing.TB, token string, i int) map[string]interface{} {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("%d segments", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[i])
	if err != nil {
		t.Fatalf("segment %d: %v", i, err)
	}
	var m map[string]interface{}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("segment %d: %v", i, err)
	}
	return m
}

func sha256B64(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

func TestProofRoundTrip(t *testing.T) {
	kr := newWITKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{KeyWait: -1, Issuer: witIssuer})
	for _, keyAlg := range []Alg{AlgEdDSA, AlgES256} {
		key := newWorkloadKey(t, keyAlg)
		jwk, err := key.PublicJWK()
		if err != nil {
			t.Fatalf("PublicJWK: %v", err)
		}
		pk, err := key.ProofKey()
		if err != nil {
			t.Fatal(err)
		}
		want := map[Alg]ProofKey{
			AlgEdDSA: {Alg: "EdDSA", Crv: "Ed25519", Kty: "OKP"},
			AlgES256: {Alg: "ES256", Crv: "P-256", Kty: "EC"},
		}[keyAlg]
		if pk.Alg != want.Alg || pk.Kty != want.Kty || pk.Crv != want.Crv || len(pk.X) != 43 ||
			(keyAlg == AlgES256) != (len(pk.Y) == 43) || strings.Contains(jwk, `"d"`) {
			t.Fatalf("public key %s -> %+v", jwk, pk)
		}
		req := witRequest(t, key)
		for _, signer := range []Alg{AlgEdDSA, AlgES256} {
			wit := issueWIT(t, kr, signer, req)
			if h := segment(t, wit, 0); h["typ"] != "wit+jwt" || h["alg"] != signer.String() {
				t.Errorf("WIT header %v", h)
			}
			wpt := prove(t, key, wit, target+"?role=web#f", "access-1", 0, nowTime)
			wh, wc := segment(t, wpt, 0), segment(t, wpt, 1)
			if !reflect.DeepEqual(wh, map[string]interface{}{"alg": keyAlg.String(), "typ": "wpt+jwt"}) {
				t.Errorf("WPT header %v", wh)
			}
			if wc["aud"] != target || wc["exp"] != float64(now+60) || wc["wth"] != sha256B64(wit) ||
				wc["ath"] != sha256B64("access-1") {
				t.Errorf("WPT claims %v", wc)
			}
			c, err := v.VerifyProof(wit, wpt, target, "access-1", nowTime)
			if err != nil {
				t.Fatalf("VerifyProof (%v key, %v signer): %v", keyAlg, signer, err)
			}
			if c.AllocationID != allocID || c.Task != "server" || c.Issuer != witIssuer ||
				c.Subject != "wimse://"+trustDomain+"/global/default/web/frontend/server/default" ||
				c.Expires.Unix() != now+ttl {
				t.Errorf("claims %+v", c)
			}
			if c.Confirmation == nil || !reflect.DeepEqual(c.Confirmation.JWK, pk) {
				t.Errorf("cnf %+v, want jwk %+v", c.Confirmation, pk)
			}
		}
	}
}

func TestProofReplayIsRefused(t *testing.T) {
	kr := newWITKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	key := newWorkloadKey(t, AlgES256)
	wit := issueWIT(t, kr, AlgEdDSA, witRequest(t, key))
	wpt := prove(t, key, wit, target, "", 0, nowTime)
	if _, err := v.VerifyProof(wit, wpt, target, "", nowTime); err != nil {
		t.Fatalf("first use: %v", err)
	}
	_, err := v.VerifyProof(wit, wpt, target, "", nowTime.Add(time.Second))
	if e := wantCode(t, err, ErrProofReplayed); !strings.Contains(e.Message, "jti") {
		t.Errorf("message %q", e.Message)
	}
	// A fresh proof for the same WIT is fine.
	again := prove(t, key, wit, target, "", 0, nowTime.Add(time.Second))
	if _, err := v.VerifyProof(wit, again, target, "", nowTime.Add(time.Second)); err != nil {
		t.Fatalf("fresh proof: %v", err)
	}

	// From many goroutines at once, one proof is accepted exactly once.
	once := prove(t, key, wit, target, "", 0, nowTime)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, replayed := 0, 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := v.VerifyProof(wit, once, target, "", nowTime)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrProofReplayed):
				replayed++
			default:
				t.Errorf("concurrent VerifyProof: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok != 1 || replayed != 7 {
		t.Errorf("%d accepted, %d replayed; want 1 and 7", ok, replayed)
	}
}

func TestWITIsNeverABearerToken(t *testing.T) {
	kr := newWITKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	key := newWorkloadKey(t, AlgEdDSA)
	wit := issueWIT(t, kr, AlgES256, witRequest(t, key))
	_, err := v.Verify(wit, at(now))
	wantCode(t, err, ErrProofRequired)
	errs := v.VerifyBatch([]string{wit}, at(now))
	wantCode(t, errs[0], ErrProofRequired)

	// A bearer token where the WIT belongs.
	bearer, err := kr.Issue(request(allocID, aud), at(now))
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.VerifyProof(bearer, prove(t, key, bearer, target, "", 0, nowTime), target, "", nowTime)
	wantCode(t, err, ErrProofInvalid)

	// The proof must match the request: its target, its access token.
	wpt := prove(t, key, wit, target, "access-1", 0, nowTime)
	for _, c := range []struct{ target, token string }{
		{"https://vault.example.com/v1/other", "access-1"},
		{"https://evil.example.com/v1/auth/jwt/login", "access-1"},
		{target, ""},
		{target, "access-2"},
	} {
		_, err := v.VerifyProof(wit, wpt, c.target, c.token, nowTime)
		wantCode(t, err, ErrProofInvalid)
	}
	// A proof from another key, for this WIT.
	thief := newWorkloadKey(t, AlgEdDSA)
	_, err = v.VerifyProof(wit, prove(t, thief, wit, target, "", 0, nowTime), target, "", nowTime)
	wantCode(t, err, ErrProofInvalid)
	// None of the refusals used the proof up.
	if _, err := v.VerifyProof(wit, wpt, target, "access-1", nowTime); err != nil {
		t.Fatalf("VerifyProof: %v", err)
	}
	// The WIT's own checks keep their codes.
	late := nowTime.Add((ttl + 61) * time.Second)
	_, err = v.VerifyProof(wit, prove(t, key, wit, target, "", 0, late), target, "", late)
	wantCode(t, err, ErrExpired)
	dead := newVerifier(t, kr, aud, newMemStore(map[string]AllocState{allocID: Terminal}), noWait)
	_, err = dead.VerifyProof(wit, prove(t, key, wit, target, "", 0, nowTime), target, "", nowTime)
	wantCode(t, err, ErrAllocationTerminal)
}

func TestProveTTL(t *testing.T) {
	kr := newWITKeyring(t)
	v := newVerifier(t, kr, aud, liveStore(), noWait)
	key := newWorkloadKey(t, AlgES256)
	wit := issueWIT(t, kr, AlgEdDSA, witRequest(t, key))
	for _, c := range []struct {
		ttl time.Duration
		exp int64
	}{{0, now + 60}, {90 * time.Second, now + 90}, {1500 * time.Millisecond, now + 2}, {time.Nanosecond, now + 1}} {
		wpt := prove(t, key, wit, target, "", c.ttl, nowTime)
		if got := segment(t, wpt, 1)["exp"]; got != float64(c.exp) {
			t.Errorf("ttl %v: exp %v, want %d", c.ttl, got, c.exp)
		}
	}
	for _, ttl := range []time.Duration{-time.Second, -time.Nanosecond} {
		_, err := key.Prove(wit, target, "", ttl, nowTime)
		wantCode(t, err, ErrInvalidArgument)
	}
	// A 5 s proof is refused once it (and the 60 s leeway) has passed.
	short := prove(t, key, wit, target, "", 5*time.Second, nowTime)
	_, err := v.VerifyProof(wit, short, target, "", nowTime.Add(66*time.Second))
	wantCode(t, err, ErrProofInvalid)
	// No access token: no ath.
	if _, ok := segment(t, short, 1)["ath"]; ok {
		t.Error("ath without an access token")
	}
}

func TestIssueWITErrors(t *testing.T) {
	kr := newWITKeyring(t)
	key := newWorkloadKey(t, AlgEdDSA)
	req := witRequest(t, key)

	// Without ProofKey: a bearer request, refused (use IssueMsgpackAlg).
	bearer, err := EncodeIssueRequest(request(allocID, aud))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bearer, []byte("ProofKey")) {
		t.Fatal("a request without ProofKey encodes a ProofKey key")
	}
	_, err = kr.IssueWIT(AlgEdDSA, bearer, "", trustDomain, nowTime)
	if e := wantCode(t, err, ErrInvalidArgument); !strings.Contains(e.Message, "ProofKey") {
		t.Errorf("message %q", e.Message)
	}
	for _, td := range []string{"", "Nomad.Example.com", "a..b", "wimse://x"} {
		_, err := kr.IssueWIT(AlgEdDSA, req, "", td, nowTime)
		wantCode(t, err, ErrInvalidArgument)
	}
	_, err = kr.IssueWIT(AlgRS256, req, "", trustDomain, nowTime)
	wantCode(t, err, ErrNoActiveKey)
	_, err = kr.IssueWIT(Alg(9), req, "", trustDomain, nowTime)
	wantCode(t, err, ErrInvalidArgument)
	_, err = kr.IssueWIT(AlgEdDSA, req[:len(req)-1], "", trustDomain, nowTime)
	wantCode(t, err, ErrDecodeError)
	// A WIT must expire.
	noTTL := request(allocID, aud)
	noTTL.Identity.TTL = 0
	noTTL.ProofKey, _ = key.ProofKey()
	b, _ := EncodeIssueRequest(noTTL)
	_, err = kr.IssueWIT(AlgEdDSA, b, "", trustDomain, nowTime)
	wantCode(t, err, ErrInvalidArgument)
	// An unusable key.
	bad := request(allocID, aud)
	bad.ProofKey = &ProofKey{Alg: "EdDSA", Crv: "Ed25519", Kty: "OKP", X: "AAAA"}
	b, _ = EncodeIssueRequest(bad)
	_, err = kr.IssueWIT(AlgEdDSA, b, "", trustDomain, nowTime)
	wantCode(t, err, ErrInvalidArgument)
	// No issuer: no iss.
	wit, err := kr.IssueWIT(AlgEdDSA, req, "", trustDomain, nowTime)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := segment(t, wit, 1)["iss"]; ok {
		t.Error("iss without an issuer")
	}
	kr.Close()
	_, err = kr.IssueWIT(AlgEdDSA, req, "", trustDomain, nowTime)
	wantCode(t, err, ErrNullArgument)
}

func TestWorkloadKeyErrorsAndClose(t *testing.T) {
	_, err := GenerateWorkloadKey(AlgRS256)
	wantCode(t, err, ErrUnsupportedAlgorithm)
	_, err = GenerateWorkloadKey(Alg(0))
	wantCode(t, err, ErrInvalidArgument)
	a, b := newWorkloadKey(t, AlgEdDSA), newWorkloadKey(t, AlgEdDSA)
	ja, _ := a.PublicJWK()
	jb, _ := b.PublicJWK()
	if ja == jb || ja == "" {
		t.Fatalf("two keys, public keys %s and %s", ja, jb)
	}
	kr := newWITKeyring(t)
	wit := issueWIT(t, kr, AlgEdDSA, witRequest(t, a))
	_, err = a.Prove("", target, "", 0, nowTime)
	wantCode(t, err, ErrInvalidArgument)
	_, err = a.Prove(wit, "", "", 0, nowTime)
	wantCode(t, err, ErrInvalidArgument)
	_, err = a.Prove("\xff\xfe", target, "", 0, nowTime)
	wantCode(t, err, ErrMalformedToken)

	a.Close()
	a.Close()
	_, err = a.PublicJWK()
	wantCode(t, err, ErrNullArgument)
	_, err = a.ProofKey()
	wantCode(t, err, ErrNullArgument)
	_, err = a.Prove(wit, target, "", 0, nowTime)
	wantCode(t, err, ErrNullArgument)

	v := newVerifier(t, kr, aud, liveStore(), noWait)
	wpt := prove(t, b, wit, target, "", 0, nowTime)
	v.Close()
	_, err = v.VerifyProof(wit, wpt, target, "", nowTime)
	wantCode(t, err, ErrNullArgument)
}

// The committed vector Go's go-msgpack wrote (tests/vectors/msgpack/
// issue_request_proof_key.msgpack) decodes into IssueRequest with its
// ProofKey, and its raw bytes sign a WIT bound to that key.
func TestWITFromGoVector(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(vectorsDir(), "issue_request_proof_key.msgpack"))
	if err != nil {
		t.Fatalf("committed vector: %v", err)
	}
	req, err := DecodeIssueRequest(raw)
	if err != nil {
		t.Fatalf("DecodeIssueRequest: %v", err)
	}
	want := &ProofKey{Alg: "ES256", Crv: "P-256", Kty: "EC",
		X: "Y6bejJX5OVzmFs_wlgXJc20GiGPjQavixp0fdgkQKEo", Y: "inaCvw7j3XRbcAKrBotHiA1rL06As33rDwfAArxVjo0"}
	if !reflect.DeepEqual(req.ProofKey, want) || req.Task != "server" || req.Allocation == nil ||
		req.Allocation.ID != allocID {
		t.Fatalf("decoded %+v, ProofKey %+v", req, req.ProofKey)
	}
	kr := newWITKeyring(t)
	wit, err := kr.IssueWIT(AlgES256, raw, witIssuer, trustDomain, nowTime)
	if err != nil {
		t.Fatalf("IssueWIT: %v", err)
	}
	cnf, _ := segment(t, wit, 1)["cnf"].(map[string]interface{})
	jwk, _ := cnf["jwk"].(map[string]interface{})
	if jwk["x"] != want.X || jwk["y"] != want.Y || jwk["alg"] != "ES256" {
		t.Errorf("cnf %v", cnf)
	}
	// Re-encoded through our structs: the same ProofKey bytes reach the
	// library, the same cnf comes out.
	b, err := EncodeIssueRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	wit2, err := kr.IssueWIT(AlgES256, b, witIssuer, trustDomain, nowTime)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(segment(t, wit2, 1)["cnf"], segment(t, wit, 1)["cnf"]) {
		t.Error("re-encoded request: another cnf")
	}
	v := newVerifier(t, kr, "vault.io", liveStore(), noWait)
	_, err = v.Verify(wit, at(now))
	wantCode(t, err, ErrProofRequired)
}
