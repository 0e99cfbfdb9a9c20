package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
)

// What scripts/spiffe-bundle-interop.sh hands to the Rust test, checked on
// the Go side on every `go test ./...`: the files are a SPIFFE bundle
// (jwt-svid keys with kids, the sequence and hint) and the tokens go-spiffe
// validates with it, for our audience only.
func TestWriteGoSpiffeBundle(t *testing.T) {
	dir := t.TempDir()
	m, err := write(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "bundle.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Keys []struct {
			Use string `json:"use"`
			Kid string `json:"kid"`
			Kty string `json:"kty"`
		} `json:"keys"`
		Sequence    *uint64 `json:"spiffe_sequence"`
		RefreshHint *int64  `json:"spiffe_refresh_hint"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range doc.Keys {
		if k.Use != "jwt-svid" || (k.Kty != "EC" && k.Kty != "RSA") {
			t.Errorf("bundle entry %+v", k)
		}
		kids = append(kids, k.Kid)
	}
	sort.Strings(kids)
	if !reflect.DeepEqual(kids, []string{"go-es256", "go-es384", "go-es512", "go-rs256"}) ||
		doc.Sequence == nil || *doc.Sequence != sequence || doc.RefreshHint == nil || *doc.RefreshHint != 120 {
		t.Fatalf("bundle.json %s", raw)
	}

	var back meta
	text, err := os.ReadFile(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(text, &back); err != nil || !reflect.DeepEqual(&back, m) {
		t.Fatalf("tokens.json %s (%v)", text, err)
	}
	var algs []string
	for alg := range back.Tokens {
		algs = append(algs, alg)
	}
	sort.Strings(algs)
	if !reflect.DeepEqual(algs, []string{"ES256", "ES384", "ES512", "RS256"}) {
		t.Fatalf("tokens %v", algs)
	}

	b, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString(back.TrustDomain), raw)
	if err != nil {
		t.Fatal(err)
	}
	for alg, token := range back.Tokens {
		svid, err := jwtsvid.ParseAndValidate(token, b, []string{back.Audience})
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if !strings.HasPrefix(svid.ID.String(), "spiffe://"+trustDomain+"/") || svid.Claims["nomad_allocation_id"] != allocID {
			t.Errorf("%s: SVID %+v", alg, svid)
		}
		if _, err := jwtsvid.ParseAndValidate(token, b, []string{"vault.io"}); err == nil {
			t.Errorf("%s: validated for another audience", alg)
		}
	}
	// Each token is its own key's: with another build's bundle (fresh keys
	// under the same kids) none validates.
	otherRaw, _, err := build(back.Now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := spiffebundle.Parse(spiffeid.RequireTrustDomainFromString(back.TrustDomain), otherRaw)
	if err != nil {
		t.Fatal(err)
	}
	for alg, token := range back.Tokens {
		if _, err := jwtsvid.ParseAndValidate(token, other, []string{back.Audience}); err == nil {
			t.Errorf("%s: validated with another bundle's key of the same kid", alg)
		}
	}
}
