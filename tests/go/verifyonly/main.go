// Command verifyonly writes tokens of the verify-only algorithms made by
// go-jose v4 (github.com/go-jose/go-jose/v4, the version tests/go.mod pins),
// for tests/verify_only_algorithms.rs:
//
//	go run ./go/verifyonly OUT.json    # in tests/ (module mode)
//
// The file has the layout tests/python/verify_only_vectors.py writes: a JWKS
// of fresh keys (EC P-384, P-521, P-256; RSA keys with alg PS256, PS384,
// PS512, RS384, RS512; the PS256 key's modulus again as RS256 and without
// alg), tokens that must verify, and near misses with the result code each
// must get. Keys come from crypto/ecdsa and crypto/rsa; go-jose signs and
// writes the JWKS.
package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/go-jose/go-jose/v4"
)

const joseModule = "github.com/go-jose/go-jose/v4"

// generator names go-jose and the version this program was built with (its
// module's requirement), so a vector file says which go-jose wrote it.
func generator() string {
	version := "(unknown version)"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == joseModule {
				version = dep.Version
				if dep.Replace != nil {
					version += " => " + dep.Replace.Path + " " + dep.Replace.Version
				}
			}
		}
	}
	return "go-jose v4 (" + joseModule + " " + version + ")"
}

const now = 1767225660 // 2026-01-01T00:01:00Z, when the test verifies
const aud = "wid-interop"

var claims = map[string]interface{}{
	"aud":                 aud,
	"exp":                 now + 3600,
	"iat":                 now - 60,
	"nbf":                 now - 60,
	"jti":                 "6c8f3a52-0c5d-4a4e-9f0e-1b2c3d4e5f60",
	"nomad_allocation_id": "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc",
	"nomad_job_id":        "web",
	"nomad_namespace":     "default",
	"nomad_task":          "server",
	"sub":                 "global:default:web:frontend:server:default",
}

type entry struct {
	Name  string `json:"name"`
	Kid   string `json:"kid,omitempty"`
	Token string `json:"token"`
	Code  string `json:"code,omitempty"`
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "verifyonly:", err)
		os.Exit(1)
	}
}

var b64 = base64.RawURLEncoding

func payload(c map[string]interface{}) []byte {
	out, err := json.Marshal(c)
	must(err)
	return out
}

// sign makes a compact JWS with go-jose: header {"alg","kid","typ":"JWT"}.
func sign(key interface{}, alg jose.SignatureAlgorithm, kid string, c map[string]interface{}) string {
	signer, err := jose.NewSigner(
		jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	must(err)
	obj, err := signer.Sign(payload(c))
	must(err)
	out, err := obj.CompactSerialize()
	must(err)
	return out
}

func parts(token string) (string, string, []byte) {
	p := strings.Split(token, ".")
	sig, err := b64.DecodeString(p[2])
	must(err)
	return p[0], p[1], sig
}

func withSig(token string, sig []byte) string {
	h, p, _ := parts(token)
	return h + "." + p + "." + b64.EncodeToString(sig)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: verifyonly OUT.json")
		os.Exit(2)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	must(err)
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	must(err)
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	rsaAlgs := []jose.SignatureAlgorithm{jose.PS256, jose.PS384, jose.PS512, jose.RS384, jose.RS512}
	rsas := map[jose.SignatureAlgorithm]*rsa.PrivateKey{}
	for _, alg := range rsaAlgs {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		rsas[alg] = k
	}
	lower := func(a jose.SignatureAlgorithm) string { return strings.ToLower(string(a)) }

	keys := []jose.JSONWebKey{
		{Key: &p384.PublicKey, KeyID: "es384", Algorithm: "ES384", Use: "sig"},
		{Key: &p521.PublicKey, KeyID: "es512", Algorithm: "ES512", Use: "sig"},
		{Key: &p256.PublicKey, KeyID: "es256", Algorithm: "ES256", Use: "sig"},
	}
	for _, alg := range rsaAlgs {
		keys = append(keys, jose.JSONWebKey{Key: &rsas[alg].PublicKey, KeyID: lower(alg), Algorithm: string(alg), Use: "sig"})
	}
	ps256 := rsas[jose.PS256]
	keys = append(keys,
		jose.JSONWebKey{Key: &ps256.PublicKey, KeyID: "shared-rs256", Algorithm: "RS256", Use: "sig"},
		jose.JSONWebKey{Key: &ps256.PublicKey, KeyID: "shared-noalg", Use: "sig"})

	valid := []entry{
		{Name: "ES384", Kid: "es384", Token: sign(p384, jose.ES384, "es384", claims)},
		{Name: "ES512", Kid: "es512", Token: sign(p521, jose.ES512, "es512", claims)},
	}
	for _, alg := range rsaAlgs {
		valid = append(valid, entry{Name: string(alg), Kid: lower(alg), Token: sign(rsas[alg], alg, lower(alg), claims)})
	}
	for _, kid := range []string{"shared-rs256", "shared-noalg"} {
		valid = append(valid, entry{Name: "RS256 under " + kid, Kid: kid, Token: sign(ps256, jose.RS256, kid, claims)})
	}

	var refused []entry
	refuse := func(name, token, code string) {
		refused = append(refused, entry{Name: name, Token: token, Code: code})
	}
	const unsupported, malformed, badSig = "UnsupportedAlgorithm", "MalformedToken", "BadSignature"
	refuse("RS256 token under the PS256 key", sign(ps256, jose.RS256, "ps256", claims), unsupported)
	refuse("PS256 token under the same modulus published as RS256", sign(ps256, jose.PS256, "shared-rs256", claims), unsupported)
	refuse("PS256 token under the same modulus published without alg", sign(ps256, jose.PS256, "shared-noalg", claims), unsupported)
	refuse("RS384 token under the PS384 key", sign(rsas[jose.PS384], jose.RS384, "ps384", claims), unsupported)
	refuse("PS512 token under the RS512 key", sign(rsas[jose.RS512], jose.PS512, "rs512", claims), unsupported)
	refuse("PS256 token under the PS384 key", sign(rsas[jose.PS384], jose.PS256, "ps384", claims), unsupported)
	refuse("RS512 token under the RS384 key", sign(rsas[jose.RS384], jose.RS512, "rs384", claims), unsupported)
	refuse("ES384 token under the P-256 key", sign(p384, jose.ES384, "es256", claims), unsupported)
	refuse("ES256 token under the P-384 key", sign(p256, jose.ES256, "es384", claims), unsupported)
	refuse("ES512 token under the P-384 key", sign(p521, jose.ES512, "es384", claims), unsupported)
	refuse("ES384 token under the P-521 key", sign(p384, jose.ES384, "es512", claims), unsupported)

	for _, c := range []struct {
		alg  jose.SignatureAlgorithm
		key  *ecdsa.PrivateKey
		kid  string
		hash crypto.Hash
	}{{jose.ES384, p384, "es384", crypto.SHA384}, {jose.ES512, p521, "es512", crypto.SHA512}} {
		good := sign(c.key, c.alg, c.kid, claims)
		h, p, sig := parts(good)
		refuse(string(c.alg)+" signature one byte short", withSig(good, sig[:len(sig)-1]), malformed)
		refuse(string(c.alg)+" signature one byte long", withSig(good, append(append([]byte{}, sig...), 0)), malformed)
		hasher := c.hash.New()
		hasher.Write([]byte(h + "." + p))
		der, err := ecdsa.SignASN1(rand.Reader, c.key, hasher.Sum(nil))
		must(err)
		refuse(string(c.alg)+" signature DER-encoded (not r || s)", withSig(good, der), malformed)
		flipped := append([]byte{}, sig...)
		flipped[len(flipped)-1] ^= 1
		refuse(string(c.alg)+" signature with a bit flipped", withSig(good, flipped), badSig)
	}
	for _, alg := range rsaAlgs {
		good := sign(rsas[alg], alg, lower(alg), claims)
		_, _, sig := parts(good)
		refuse(string(alg)+" signature one byte short", withSig(good, sig[:len(sig)-1]), malformed)
		other := map[string]interface{}{}
		for k, v := range claims {
			other[k] = v
		}
		other["nomad_task"] = "db"
		h, _, _ := parts(good)
		refuse(string(alg)+" token with its claims changed", h+"."+b64.EncodeToString(payload(other))+"."+b64.EncodeToString(sig), badSig)
	}
	// HS384 keyed with a public key (go-jose signs it), and alg none.
	refuse("HS384 keyed with ps256's public key", sign(ps256.PublicKey.N.Bytes(), jose.HS384, "ps256", claims), unsupported)
	point, err := p384.PublicKey.Bytes() // 0x04 || x || y, 48 bytes each
	must(err)
	x384 := point[1:49]
	refuse("HS384 keyed with es384's public key", sign(x384, jose.HS384, "es384", claims), unsupported)
	none := b64.EncodeToString([]byte(`{"alg":"none","kid":"ps256","typ":"JWT"}`)) + "." + b64.EncodeToString(payload(claims)) + "."
	refuse("alg none", none, unsupported)

	doc := map[string]interface{}{
		"generator": generator(),
		"now":       now,
		"aud":       aud,
		"jwks":      jose.JSONWebKeySet{Keys: keys},
		"valid":     valid,
		"refused":   refused,
	}
	out, err := json.MarshalIndent(doc, "", " ")
	must(err)
	must(os.WriteFile(os.Args[1], append(out, '\n'), 0o644))
	fmt.Printf("verifyonly: %d valid, %d refused -> %s\n", len(valid), len(refused), os.Args[1])
}
