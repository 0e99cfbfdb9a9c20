// Command gospiffebundle writes a SPIFFE bundle that go-spiffe v2 builds,
// and JWT-SVIDs signed for it, for tests/remote_jwks.rs
// (spiffe_bundle_written_by_go_spiffe) to read with our SpiffeBundleSource:
//
//	go run ./cmd/gospiffebundle OUT_DIR    # in bindings/go/interop
//
// scripts/spiffe-bundle-interop.sh runs it and points WID_GO_SPIFFE_BUNDLE
// at OUT_DIR. Fresh keys every run (EC P-256, P-384, P-521 from crypto/ecdsa,
// RSA 2048 from crypto/rsa) are given to spiffebundle.New with
// AddJWTAuthority, with a sequence and a refresh hint, and Bundle.Marshal
// writes OUT_DIR/bundle.json; go-jose v4 signs one JWT-SVID per key
// (ES256, ES384, ES512, RS256), OUT_DIR/tokens.json, in the layout
// tests/python/spiffe_bundle_interop.py writes for py-spiffe's bundle.
// Before writing, go-spiffe must read the bundle back as the one it built
// and validate every token with it (jwtsvid.ParseAndValidate). It needs no
// C library: nothing here is the binding.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/spiffe/go-spiffe/v2/bundle/spiffebundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
)

const (
	trustDomain = "peer.example.org"
	audience    = "spiffe-validator"
	sequence    = 7
	refreshHint = 120 * time.Second
	// The allocation of tests/common (ALLOC_ID), live in the Rust test's store.
	allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
)

// meta is tokens.json: what the Rust test checks against bundle.json.
type meta struct {
	TrustDomain string            `json:"trust_domain"`
	Audience    string            `json:"audience"`
	Now         int64             `json:"now"`
	Sequence    uint64            `json:"sequence"`
	RefreshHint int64             `json:"refresh_hint"`
	Tokens      map[string]string `json:"tokens"` // alg -> JWT-SVID
}

// signing is one key of the bundle and the algorithm its JWT-SVID is signed with.
type signing struct {
	kid string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

func freshKeys() ([]signing, error) {
	var keys []signing
	for _, c := range []struct {
		kid   string
		alg   jose.SignatureAlgorithm
		curve elliptic.Curve
	}{
		{"go-es256", jose.ES256, elliptic.P256()},
		{"go-es384", jose.ES384, elliptic.P384()},
		{"go-es512", jose.ES512, elliptic.P521()},
	} {
		k, err := ecdsa.GenerateKey(c.curve, rand.Reader)
		if err != nil {
			return nil, err
		}
		keys = append(keys, signing{c.kid, c.alg, k})
	}
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return append(keys, signing{"go-rs256", jose.RS256, rk}), nil
}

// claims are a JWT-SVID's for the workload of the Rust test's allocation,
// valid from a minute before now for an hour.
func claims(now int64) map[string]interface{} {
	return map[string]interface{}{
		"aud":                 audience,
		"iat":                 now - 60,
		"nbf":                 now - 60,
		"exp":                 now + 3600,
		"sub":                 "spiffe://" + trustDomain + "/global/default/web/frontend/server/default",
		"nomad_allocation_id": allocID,
		"nomad_job_id":        "web",
		"nomad_namespace":     "default",
		"nomad_task":          "server",
	}
}

// sign is a compact JWS of c by go-jose: {"alg","kid","typ":"JWT"}.
func sign(k signing, c map[string]interface{}) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.key, KeyID: k.kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	return jwt.Signed(signer).Claims(c).Serialize()
}

// build makes the bundle and its tokens at now (Unix seconds) and checks
// them with go-spiffe: the marshalled bundle and tokens.json's document.
func build(now int64) ([]byte, *meta, error) {
	td, err := spiffeid.TrustDomainFromString(trustDomain)
	if err != nil {
		return nil, nil, err
	}
	keys, err := freshKeys()
	if err != nil {
		return nil, nil, err
	}
	built := spiffebundle.New(td)
	for _, k := range keys {
		if err := built.AddJWTAuthority(k.kid, k.key.Public()); err != nil {
			return nil, nil, err
		}
	}
	built.SetSequenceNumber(sequence)
	built.SetRefreshHint(refreshHint)
	raw, err := built.Marshal()
	if err != nil {
		return nil, nil, err
	}
	parsed, err := spiffebundle.Parse(td, raw)
	if err != nil {
		return nil, nil, fmt.Errorf("go-spiffe cannot parse the bundle it marshalled: %w\n%s", err, raw)
	}
	if !parsed.Equal(built) {
		return nil, nil, fmt.Errorf("go-spiffe reads back another bundle than it built:\n%s", raw)
	}
	m := &meta{TrustDomain: trustDomain, Audience: audience, Now: now, Sequence: sequence,
		RefreshHint: int64(refreshHint / time.Second), Tokens: map[string]string{}}
	c := claims(now)
	for _, k := range keys {
		token, err := sign(k, c)
		if err != nil {
			return nil, nil, err
		}
		// ParseAndValidate checks exp and nbf against the wall clock,
		// which now is.
		if _, err := jwtsvid.ParseAndValidate(token, parsed, []string{audience}); err != nil {
			return nil, nil, fmt.Errorf("go-spiffe refuses the %s JWT-SVID signed for its bundle: %w", k.alg, err)
		}
		m.Tokens[string(k.alg)] = token
	}
	return raw, m, nil
}

// write builds the bundle and tokens and writes OUT_DIR/bundle.json and
// OUT_DIR/tokens.json.
func write(dir string) (*meta, error) {
	raw, m, err := build(time.Now().Unix())
	if err != nil {
		return nil, err
	}
	tokens, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "bundle.json"), append(raw, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), append(tokens, '\n'), 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprintln(os.Stderr, "usage: gospiffebundle OUT_DIR")
		os.Exit(2)
	}
	m, err := write(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "gospiffebundle:", err)
		os.Exit(1)
	}
	fmt.Printf("gospiffebundle: a go-spiffe bundle and %d JWT-SVIDs, one per key -> %s\n", len(m.Tokens), os.Args[1])
}
