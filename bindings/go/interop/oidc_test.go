package interop

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
)

// go-oidc v3 against a running `wid serve`, as Vault, Consul and most Go
// relying parties use it: oidc.NewProvider reads the discovery document at
// the issuer, provider.Verifier verifies with the keys of its jwks_uri (a
// RemoteKeySet, fetched again when a token names a kid it has not seen),
// and the algorithms allowed are the config's, else the discovery
// document's, else RS256 alone.

const oidcAud = "vault.io"

// oidcServer is a keystore with one bearer key of each algorithm, tokens
// of each, and `wid serve` with the http loopback issuer that names its own
// port (go-oidc requires the discovered issuer to be the URL it was given).
type oidcServer struct {
	ks, req, issuer string
	srv             *served
	tokens          map[string]string // alg -> token
}

func newOIDCServer(t *testing.T) *oidcServer {
	t.Helper()
	dir := t.TempDir()
	o := &oidcServer{ks: widKeystore(t, dir, 0), req: issueRequest(t, dir, oidcAud), tokens: map[string]string{}}
	o.srv = serveOn(t, func(port int) []string {
		o.issuer = "http://127.0.0.1:" + strconv.Itoa(port)
		return []string{"--keystore", o.ks, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--issuer", o.issuer}
	})
	if o.srv.base != o.issuer {
		t.Fatalf("wid serve listens on %s, not the issuer %s", o.srv.base, o.issuer)
	}
	for _, alg := range []string{"EdDSA", "ES256", "RS256"} {
		o.tokens[alg] = o.issue(t, alg)
	}
	return o
}

func (o *oidcServer) issue(t *testing.T, alg string) string {
	t.Helper()
	return widIssue(t, o.ks, o.req, alg, "--issuer", o.issuer)
}

// providerFor is oidc.NewProvider for the server's issuer, over a bounded
// client (kept for the provider's RemoteKeySet).
func providerFor(t *testing.T, issuer string) (context.Context, *oidc.Provider) {
	t.Helper()
	ctx := oidc.ClientContext(context.Background(), httpClient())
	p, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		t.Fatalf("oidc.NewProvider(%s): %v", issuer, err)
	}
	return ctx, p
}

// verifyAccepted verifies token and checks what go-oidc read from it.
func verifyAccepted(t *testing.T, ctx context.Context, v *oidc.IDTokenVerifier, issuer, alg, token string) {
	t.Helper()
	id, err := v.Verify(ctx, token)
	if err != nil {
		t.Fatalf("%s: go-oidc refused our token: %v\n%s", alg, err, token)
	}
	var nomad nomadClaims
	if err := id.Claims(&nomad); err != nil {
		t.Fatal(err)
	}
	if id.Issuer != issuer || id.Subject != "global:default:web:frontend:server:default" ||
		!reflect.DeepEqual(id.Audience, []string{oidcAud}) || nomad.AllocationID != allocID ||
		nomad.Task != "server" || id.Expiry.Sub(id.IssuedAt) != 10*time.Minute {
		t.Errorf("%s: IDToken %+v, claims %+v", alg, id, nomad)
	}
}

// verifyRefusedAlg checks that v refuses token for its algorithm: at parse
// time ("malformed jwt", go-jose's "unexpected signature algorithm"),
// before any key is fetched or tried.
func verifyRefusedAlg(t *testing.T, ctx context.Context, v *oidc.IDTokenVerifier, what, alg, token string) {
	t.Helper()
	_, err := v.Verify(ctx, token)
	if err == nil {
		t.Fatalf("%s accepted a %s token", what, alg)
	}
	if !strings.Contains(err.Error(), "malformed jwt") || !strings.Contains(err.Error(), "unexpected signature algorithm") {
		t.Errorf("%s refused the %s token, but not for its algorithm: %v", what, alg, err)
	}
}

// Discovery, and the algorithms each configuration accepts.
func TestGoOIDCDiscoversAndVerifiesWidServe(t *testing.T) {
	o := newOIDCServer(t)
	ctx, p := providerFor(t, o.issuer)

	var doc struct {
		Issuer  string   `json:"issuer"`
		JWKSURI string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&doc); err != nil {
		t.Fatal(err)
	}
	// Every algorithm with a published key (DESIGN.md), which go-oidc takes
	// as the provider's algorithms.
	if doc.Issuer != o.issuer || doc.JWKSURI != o.issuer+"/.well-known/jwks.json" ||
		!reflect.DeepEqual(doc.Algs, []string{"EdDSA", "ES256", "RS256"}) {
		t.Fatalf("discovery document %+v", doc)
	}

	// The default config through the provider: no SupportedSigningAlgs, so
	// go-oidc allows the discovery document's algorithms, all three of ours.
	byDiscovery := p.Verifier(&oidc.Config{ClientID: oidcAud})
	for alg, token := range o.tokens {
		verifyAccepted(t, ctx, byDiscovery, o.issuer, alg, token)
	}

	// The default config without a discovery document's list (a verifier
	// made over the same JWKS by hand, as a client that skips discovery
	// does): go-oidc's default, RS256 alone. EdDSA and ES256 are refused.
	keys := oidc.NewRemoteKeySet(ctx, doc.JWKSURI)
	byDefault := oidc.NewVerifier(o.issuer, keys, &oidc.Config{ClientID: oidcAud})
	verifyAccepted(t, ctx, byDefault, o.issuer, "RS256", o.tokens["RS256"])
	verifyRefusedAlg(t, ctx, byDefault, "go-oidc's default (RS256)", "EdDSA", o.tokens["EdDSA"])
	verifyRefusedAlg(t, ctx, byDefault, "go-oidc's default (RS256)", "ES256", o.tokens["ES256"])

	// Explicit lists: only what they name.
	for _, allowed := range [][]string{{oidc.EdDSA}, {oidc.ES256}, {oidc.RS256}, {oidc.EdDSA, oidc.ES256}} {
		what := fmt.Sprintf("SupportedSigningAlgs %v", allowed)
		v := p.Verifier(&oidc.Config{ClientID: oidcAud, SupportedSigningAlgs: allowed})
		for alg, token := range o.tokens {
			if containsString(allowed, alg) {
				verifyAccepted(t, ctx, v, o.issuer, alg, token)
			} else {
				verifyRefusedAlg(t, ctx, v, what, alg, token)
			}
		}
	}

	// The other checks go-oidc makes, on tokens it verified above.
	token := o.tokens["ES256"]
	if _, err := p.Verifier(&oidc.Config{ClientID: "consul.io"}).Verify(ctx, token); err == nil ||
		!strings.Contains(err.Error(), "expected audience") {
		t.Errorf("another client ID: %v", err)
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	var expired *oidc.TokenExpiredError
	if _, err := p.Verifier(&oidc.Config{ClientID: oidcAud, Now: later}).Verify(ctx, token); !errors.As(err, &expired) {
		t.Errorf("an hour later: %v, want TokenExpiredError", err)
	}
	// Signed by the same keys for another issuer: not this provider's.
	other := widIssue(t, o.ks, o.req, "ES256", "--issuer", "https://other.example.com")
	if _, err := byDiscovery.Verify(ctx, other); err == nil || !strings.Contains(err.Error(), "different provider") {
		t.Errorf("another issuer's token: %v", err)
	}
	// A signature that does not verify, under a kid the JWKS has.
	parts := strings.Split(token, ".")
	forged := parts[0] + "." + b64(`{"iss":"`+o.issuer+`","aud":"vault.io","sub":"x","exp":4102444800}`) + "." + parts[2]
	if _, err := byDiscovery.Verify(ctx, forged); err == nil || !strings.Contains(err.Error(), "failed to verify") {
		t.Errorf("a forged payload: %v", err)
	}

	// A provider for an issuer the document does not name is refused.
	var mismatch *oidc.IssuerMismatchError
	if _, err := oidc.NewProvider(ctx, o.issuer+"/"); !errors.As(err, &mismatch) {
		t.Errorf("issuer with a trailing slash: %v, want IssuerMismatchError", err)
	}
}

// A rotation seen through the provider's RemoteKeySet: the new key's token
// names a kid go-oidc has not cached, so it fetches the JWKS again (wid
// serve re-reads the keystore when it changes) and verifies; the old key's
// token still verifies (the key is inactive, still published).
func TestGoOIDCFollowsARotationThroughItsRemoteKeySet(t *testing.T) {
	o := newOIDCServer(t)
	ctx, p := providerFor(t, o.issuer)
	client := httpClient()

	for _, c := range []struct {
		alg string
		v   *oidc.IDTokenVerifier
	}{
		{"RS256", p.Verifier(&oidc.Config{ClientID: oidcAud, SupportedSigningAlgs: []string{oidc.RS256}})},
		{"EdDSA", p.Verifier(&oidc.Config{ClientID: oidcAud, SupportedSigningAlgs: []string{oidc.EdDSA}})},
	} {
		old := o.tokens[c.alg]
		verifyAccepted(t, ctx, c.v, o.issuer, c.alg, old) // the keys are cached now
		before := o.srv.requestsCounted(t, client, "jwks")
		// Verifying again is served from the cache.
		verifyAccepted(t, ctx, c.v, o.issuer, c.alg, old)
		if n := o.srv.requestsCounted(t, client, "jwks"); n != before {
			t.Errorf("%s: a cached kid fetched the JWKS again (%d -> %d)", c.alg, before, n)
		}

		kid := widRotate(t, o.ks, c.alg, 0)
		fresh := o.issue(t, c.alg)
		tok, err := jose.ParseSignedCompact(fresh, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(c.alg)})
		if err != nil || tok.Signatures[0].Header.KeyID != kid {
			t.Fatalf("%s: the token after the rotation is not the new key's %s: %v", c.alg, kid, err)
		}
		verifyAccepted(t, ctx, c.v, o.issuer, c.alg, fresh)
		if n := o.srv.requestsCounted(t, client, "jwks"); n <= before {
			t.Errorf("%s: the new kid verified without a JWKS fetch (%d -> %d)", c.alg, before, n)
		}
		verifyAccepted(t, ctx, c.v, o.issuer, c.alg, old)
	}
	// The verifier with the discovery document's list shares the key set.
	byDiscovery := p.Verifier(&oidc.Config{ClientID: oidcAud})
	for _, alg := range []string{"RS256", "EdDSA", "ES256"} {
		verifyAccepted(t, ctx, byDiscovery, o.issuer, alg, o.issue(t, alg))
	}
}
