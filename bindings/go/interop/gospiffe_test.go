package interop

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/federation"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// go-spiffe v2, the SPIFFE project's Go library, against our JWT-SVIDs and
// bundles: jwtsvid.ParseAndValidate (RS/ES/PS only, kid, sub, exp, aud;
// with the wall clock) accepts the binding's and `wid issue`'s ES256 and
// RS256 JWT-SVIDs and refuses EdDSA ones and other audiences;
// federation.FetchBundle reads `wid serve`'s bundle endpoint over HTTPS
// (https_web, our private CA as the only root) before and after a
// rotation. The reverse direction, a bundle go-spiffe builds for our Rust
// SpiffeBundleSource to read, is cmd/gospiffebundle.

const (
	svidAud = "spiffe-validator"
	svidTD  = "example.org"
)

// svidFixture is a keyring with active EdDSA, ES256 (esKid) and RS256
// (rsKid) bearer keys, and a SPIFFE issuer per JWT-SVID algorithm.
type svidFixture struct {
	kr      *wid.Keyring
	issuers map[wid.Alg]*wid.Issuer
}

func newSvidFixture(t *testing.T) *svidFixture {
	t.Helper()
	f := newAlgFixture(t) // ES256 and RS256
	if _, err := f.kr.Rotate(at(now - 100)); err != nil {
		t.Fatal(err)
	}
	s := &svidFixture{kr: f.kr, issuers: map[wid.Alg]*wid.Issuer{}}
	for _, alg := range []wid.Alg{wid.AlgES256, wid.AlgRS256} {
		iss, err := wid.NewIssuer(f.kr, wid.IssuerOptions{Alg: alg, SpiffeTrustDomain: svidTD})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(iss.Close)
		s.issuers[alg] = iss
	}
	return s
}

// bundle is the keyring's SPIFFE bundle as go-spiffe parses it.
func (s *svidFixture) bundle(t *testing.T, td string) *spiffebundle.Bundle {
	t.Helper()
	raw, err := s.kr.SpiffeBundle(5 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	b, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString(td), []byte(raw))
	if err != nil {
		t.Fatalf("go-spiffe cannot parse our bundle: %v\n%s", err, raw)
	}
	return b
}

// issueNow signs a JWT-SVID at the wall clock's second: ParseAndValidate
// checks exp and nbf against time.Now.
func (s *svidFixture) issueNow(t *testing.T, alg wid.Alg, aud string) string {
	t.Helper()
	tok, err := s.issuers[alg].Issue(request(aud), time.Now().Truncate(time.Second))
	if err != nil {
		t.Fatalf("Issue(%v): %v", alg, err)
	}
	return tok
}

// authorityKids are a bundle's JWT authorities' kids, sorted.
func authorityKids(m map[string]crypto.PublicKey) []string {
	var kids []string
	for kid := range m {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	return kids
}

func TestGoSpiffeValidatesBindingJWTSVIDs(t *testing.T) {
	s := newSvidFixture(t)
	b := s.bundle(t, svidTD)
	// ES256 and RS256 only: the EdDSA key is no JWT-SVID authority.
	if kids := authorityKids(b.JWTAuthorities()); !reflect.DeepEqual(kids, []string{esKid, rsKid}) {
		t.Fatalf("JWT authorities %v", kids)
	}
	if hint, ok := b.RefreshHint(); !ok || hint != 5*time.Minute {
		t.Errorf("refresh hint %v %v", hint, ok)
	}
	if len(b.X509Authorities()) != 0 || len(b.WITAuthorities()) != 0 {
		t.Errorf("X.509 authorities %d, WIT authorities %d", len(b.X509Authorities()), len(b.WITAuthorities()))
	}

	wantID := "spiffe://" + svidTD + "/global/default/web/frontend/server/vault_default"
	for _, alg := range []wid.Alg{wid.AlgES256, wid.AlgRS256} {
		token := s.issueNow(t, alg, svidAud)
		svid, err := jwtsvid.ParseAndValidate(token, b, []string{svidAud})
		if err != nil {
			t.Fatalf("%v: go-spiffe refuses our JWT-SVID: %v\n%s", alg, err, token)
		}
		if svid.ID.String() != wantID || !reflect.DeepEqual(svid.Audience, []string{svidAud}) ||
			svid.Claims["nomad_allocation_id"] != allocID || svid.Marshal() != token ||
			time.Until(svid.Expiry) <= 0 || time.Until(svid.Expiry) > time.Hour {
			t.Errorf("%v: SVID %+v", alg, svid)
		}
		// One of several audiences is enough, as the spec says; none is not.
		if _, err := jwtsvid.ParseAndValidate(token, b, []string{"other", svidAud}); err != nil {
			t.Errorf("%v: with our audience among others: %v", alg, err)
		}
		for _, aud := range [][]string{{"other"}, {"spiffe-validator2"}} {
			if _, err := jwtsvid.ParseAndValidate(token, b, aud); err == nil || !strings.Contains(err.Error(), "expected audience") {
				t.Errorf("%v: audience %v: %v", alg, aud, err)
			}
		}
		// The same keys as another trust domain's bundle: no bundle for
		// example.org, refused.
		if _, err := jwtsvid.ParseAndValidate(token, s.bundle(t, "other.example.org"), []string{svidAud}); err == nil ||
			!strings.Contains(err.Error(), "no bundle found") {
			t.Errorf("%v: another trust domain's bundle: %v", alg, err)
		}
	}
	// A bundle of another keyring (the same kid, another key): refused.
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if err := kr.InsertAlg(wid.AlgES256, esKid, make([]byte, 32), wid.DerivationHKDFV1, wid.KeyStateActive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	stranger := &svidFixture{kr: kr}
	token := s.issueNow(t, wid.AlgES256, svidAud)
	if _, err := jwtsvid.ParseAndValidate(token, stranger.bundle(t, svidTD), []string{svidAud}); err == nil {
		t.Error("go-spiffe validated our JWT-SVID with another keyring's bundle")
	}
	// Expired for go-spiffe once exp (and its minute of leeway) is past: an
	// SVID issued 65 minutes ago with a one-hour TTL.
	old, err := s.issuers[wid.AlgES256].Issue(request(svidAud), time.Now().Add(-65*time.Minute).Truncate(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jwtsvid.ParseAndValidate(old, b, []string{svidAud}); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("an expired JWT-SVID: %v", err)
	}
}

// EdDSA JWT-SVIDs: the library does not mint them, and go-spiffe refuses
// one made anyway, even with the key in its bundle: EdDSA is no JWT-SVID
// algorithm (DESIGN.md, SPIFFE JWT-SVIDs).
func TestGoSpiffeRefusesEdDSAJWTSVIDs(t *testing.T) {
	s := newSvidFixture(t)
	eddsa, err := wid.NewIssuer(s.kr, wid.IssuerOptions{SpiffeTrustDomain: svidTD}) // EdDSA: the default
	if err != nil {
		t.Fatal(err)
	}
	defer eddsa.Close()
	if tok, err := eddsa.Issue(request(svidAud), time.Now().Truncate(time.Second)); !errors.Is(err, wid.ErrInvalidArgument) {
		t.Fatalf("an EdDSA JWT-SVID was issued (%v): %s", err, tok)
	}

	// The JWT-SVID the library refused to make, by hand: go-jose signs it
	// with a raw-seed Ed25519 key the keyring holds (so the key is ours and
	// in our JWKS); go-spiffe is given that key as a JWT authority.
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(200 + i)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	if err := s.kr.Insert("ed-key", seed, wid.DerivationNomadRawSeed, wid.KeyStateInactive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	edKey := jwksKey(t, s.kr, "ed-key")
	b := s.bundle(t, svidTD)
	if _, ok := b.FindJWTAuthority("ed-key"); ok {
		t.Fatal("our SPIFFE bundle carries an Ed25519 key")
	}
	if err := b.AddJWTAuthority("ed-key", edKey.Key); err != nil {
		t.Fatal(err)
	}
	claims := svidClaimsNow("spiffe://" + svidTD + "/global/default/web/frontend/server/vault_default")
	edToken := signSvid(t, jose.EdDSA, priv, "ed-key", claims)
	if _, err := jwtsvid.ParseAndValidate(edToken, b, []string{svidAud}); err == nil {
		t.Fatal("go-spiffe validated an EdDSA JWT-SVID")
	} else {
		t.Logf("EdDSA JWT-SVID: %v", err)
	}
	// The same claims signed ES256 by the key our bundle publishes (the
	// HKDF-derived key of esKid): accepted, so the refusal is the algorithm.
	esToken := signSvid(t, jose.ES256, deriveP256(t, esMaterial(), esKid), esKid, claims)
	if _, err := jwtsvid.ParseAndValidate(esToken, b, []string{svidAud}); err != nil {
		t.Fatalf("the ES256 control: %v", err)
	}
}

// svidClaimsNow are a JWT-SVID's claims for sub, valid from a minute ago
// for an hour, with the Nomad claims our Rust verifier checks.
func svidClaimsNow(sub string) map[string]interface{} {
	n := time.Now().Unix()
	return map[string]interface{}{
		"aud":                 svidAud,
		"iat":                 n - 60,
		"nbf":                 n - 60,
		"exp":                 n + 3600,
		"sub":                 sub,
		"nomad_allocation_id": allocID,
		"nomad_job_id":        "web",
		"nomad_namespace":     "default",
		"nomad_task":          "server",
	}
}

// signSvid is a compact JWS of claims by go-jose v4: {"alg","kid","typ":"JWT"}.
func signSvid(t testing.TB, alg jose.SignatureAlgorithm, key interface{}, kid string, claims map[string]interface{}) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// federation.FetchBundle against `wid serve --tls-cert`: the https_web
// profile with our test CA as the only root. The bundle validates `wid
// issue`'s JWT-SVIDs; after `wid keyring rotate` the sequence is higher and
// the new key's JWT-SVID validates with the bundle fetched again, not with
// the one before. As tests/python/spiffe_bundle_interop.py (endpoint) does
// with py-spiffe.
func TestGoSpiffeFederationFetchesWidServeBundle(t *testing.T) {
	const td = "peer.example.org"
	dir := t.TempDir()
	start := time.Now().Unix()
	ks := widKeystore(t, dir, start-120)
	// A WIT key too: its wit-svid entry must land among the WIT
	// authorities, never among the JWT-SVID ones.
	runWid(t, "keyring", "rotate", "--keystore", ks, "--purpose", "wit", "--alg", "ES256", "--now", strconv.FormatInt(start-120, 10))
	req := issueRequest(t, dir, svidAud)
	pki := newTestPKI(t, dir, "peer")
	srv, err := startServe(t, "--keystore", ks, "--listen", "127.0.0.1:0", "--spiffe-refresh-hint", "90s",
		"--tls-cert", pki.certFile, "--tls-key", pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.base, "https://") {
		t.Fatalf("wid serve --tls-cert listens on %s", srv.base)
	}
	url := srv.base + "/spiffe/bundle.json"
	trustDomain := spiffeid.RequireTrustDomainFromString(td)
	ctx, cancel := context.WithTimeout(context.Background(), widWait)
	defer cancel()
	fetch := func() *spiffebundle.Bundle {
		t.Helper()
		b, err := federation.FetchBundle(ctx, trustDomain, url, federation.WithWebPKIRoots(pki.caPool))
		if err != nil {
			t.Fatalf("federation.FetchBundle(%s): %v\nwid serve stderr:\n%s", url, err, srv.stderr.String())
		}
		return b
	}

	// Web PKI: another CA's roots (and so any root but ours) are refused.
	other := newTestPKI(t, dir, "other")
	if _, err := federation.FetchBundle(ctx, trustDomain, url, federation.WithWebPKIRoots(other.caPool)); err == nil {
		t.Fatal("FetchBundle trusted wid serve's certificate with another CA's roots")
	} else {
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("another CA's roots: %v, want x509.UnknownAuthorityError", err)
		}
	}

	first := fetch()
	seq, ok := first.SequenceNumber()
	// The keys made at start-120, then the WIT key added in the same second:
	// the bundle changed, so its stored sequence rose by one past that moment.
	if want := uint64(start - 119); !ok || seq != want {
		t.Errorf("spiffe_sequence %d %v, want %d", seq, ok, want)
	}
	if hint, ok := first.RefreshHint(); !ok || hint != 90*time.Second {
		t.Errorf("spiffe_refresh_hint %v %v", hint, ok)
	}
	jwtKeys := first.JWTAuthorities()
	if len(jwtKeys) != 2 {
		t.Fatalf("JWT authorities %v, want the ES256 and RS256 keys", authorityKids(jwtKeys))
	}
	var types []string
	for _, k := range jwtKeys {
		switch k.(type) {
		case *ecdsa.PublicKey:
			types = append(types, "EC")
		case *rsa.PublicKey:
			types = append(types, "RSA")
		default:
			types = append(types, "other")
		}
	}
	sort.Strings(types)
	if !reflect.DeepEqual(types, []string{"EC", "RSA"}) {
		t.Errorf("JWT authority key types %v", types)
	}
	witKeys := first.WITAuthorities()
	if len(witKeys) != 1 {
		t.Fatalf("WIT authorities %v, want the WIT key", authorityKids(witKeys))
	}
	for kid := range witKeys {
		if _, ok := first.FindJWTAuthority(kid); ok {
			t.Fatalf("the WIT key %s is a JWT-SVID authority", kid)
		}
	}

	issue := func(alg string) string {
		t.Helper()
		return widIssue(t, ks, req, alg, "--spiffe-trust-domain", td)
	}
	for _, alg := range []string{"ES256", "RS256"} {
		token := issue(alg)
		svid, err := jwtsvid.ParseAndValidate(token, first, []string{svidAud})
		if err != nil {
			t.Fatalf("%s: go-spiffe refuses `wid issue`'s JWT-SVID with the fetched bundle: %v\n%s", alg, err, token)
		}
		if svid.ID.String() != "spiffe://"+td+"/global/default/web/frontend/server/default" {
			t.Errorf("%s: SPIFFE ID %s", alg, svid.ID)
		}
		if _, err := jwtsvid.ParseAndValidate(token, first, []string{"vault.io"}); err == nil {
			t.Errorf("%s: validated for another audience", alg)
		}
	}
	// `wid issue` refuses an EdDSA JWT-SVID (usage: exit 2).
	if out, stderr, err := widRun(t, "issue", "--keystore", ks, "--request", req, "--alg", "EdDSA",
		"--spiffe-trust-domain", td); err == nil {
		t.Errorf("wid issue made an EdDSA JWT-SVID: %s", out)
	} else {
		var exit interface{ ExitCode() int }
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("wid issue --alg EdDSA --spiffe-trust-domain: %v, want exit 2\n%s", err, stderr)
		}
	}

	// A rotation: a higher sequence, the new key in the bundle fetched
	// again, its JWT-SVID valid with that bundle only.
	newKid := widRotate(t, ks, "ES256", start)
	second := fetch()
	if seq2, ok := second.SequenceNumber(); !ok || seq2 != uint64(start) || seq2 <= seq {
		t.Errorf("spiffe_sequence after the rotation %d %v, want %d (> %d)", seq2, ok, start, seq)
	}
	if _, ok := second.FindJWTAuthority(newKid); !ok || len(second.JWTAuthorities()) != 3 {
		t.Fatalf("JWT authorities after the rotation %v, want the new %s among 3", authorityKids(second.JWTAuthorities()), newKid)
	}
	token := issue("ES256")
	if _, err := jwtsvid.ParseAndValidate(token, second, []string{svidAud}); err != nil {
		t.Fatalf("the new key's JWT-SVID with the bundle fetched again: %v", err)
	}
	if _, err := jwtsvid.ParseAndValidate(token, first, []string{svidAud}); err == nil ||
		!strings.Contains(err.Error(), newKid) {
		t.Errorf("the new key's JWT-SVID with the bundle from before the rotation: %v", err)
	}
}
