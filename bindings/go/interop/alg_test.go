package interop

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// ES256 and RS256 against go-jose v4, both directions, plus a Nomad-shaped
// RS256 JWKS and token built by hand and the algorithm-confusion attacks.

const (
	esKid = "es-key-1"
	rsKid = "rs-key-1"
)

// esMaterial is the ES256 key's 32 bytes of root material.
func esMaterial() []byte {
	m := make([]byte, 32)
	for i := range m {
		m[i] = byte(0xa0 + i)
	}
	return m
}

// deriveP256 is the DESIGN.md contract, written here independently of the
// library: okm = HKDF-SHA256(salt "workload-identity/p256/v1", IKM material,
// info kid), 48 bytes; d = (OS2IP(okm) mod (n - 1)) + 1. HKDF is the
// standard library's (crypto/hkdf, Go 1.24+), not the library's.
func deriveP256(t testing.TB, material []byte, kid string) *ecdsa.PrivateKey {
	t.Helper()
	okm, err := hkdf.Key(sha256.New, material, []byte("workload-identity/p256/v1"), kid, 48)
	if err != nil {
		t.Fatal(err)
	}
	curve := elliptic.P256()
	one := big.NewInt(1)
	d := new(big.Int).Mod(new(big.Int).SetBytes(okm), new(big.Int).Sub(curve.Params().N, one))
	d.Add(d, one)
	// The scalar as crypto/ecdsa takes it (32 bytes, big-endian); it
	// computes the public point itself.
	k, err := ecdsa.ParseRawPrivateKey(curve, d.FillBytes(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rsaKey2048 is one RSA-2048 key for the whole package (generation is slow
// under -race).
var rsaKey2048 = struct {
	once sync.Once
	key  *rsa.PrivateKey
	err  error
}{}

func testRSAKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	rsaKey2048.once.Do(func() { rsaKey2048.key, rsaKey2048.err = rsa.GenerateKey(rand.Reader, 2048) })
	if rsaKey2048.err != nil {
		t.Fatal(rsaKey2048.err)
	}
	return rsaKey2048.key
}

// algFixture is a keyring with an active ES256 key (esKid, derived from
// esMaterial) and an active RS256 key (rsKid, testRSAKey inserted as
// PKCS#8), a token of each for "vault.io", and the keys as go-jose reads
// them from the exported JWKS.
type algFixture struct {
	kr     *wid.Keyring
	esPriv *ecdsa.PrivateKey
	rsPriv *rsa.PrivateKey
	tokens map[wid.Alg]string
	keys   map[wid.Alg]jose.JSONWebKey
}

func newAlgFixture(t testing.TB) *algFixture {
	t.Helper()
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kr.Close)
	f := &algFixture{
		kr:     kr,
		esPriv: deriveP256(t, esMaterial(), esKid),
		rsPriv: testRSAKey(t),
		tokens: map[wid.Alg]string{},
		keys:   map[wid.Alg]jose.JSONWebKey{},
	}
	if err := kr.InsertAlg(wid.AlgES256, esKid, esMaterial(), wid.DerivationHKDFV1, wid.KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg(ES256): %v", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(f.rsPriv)
	if err != nil {
		t.Fatal(err)
	}
	if err := kr.InsertAlg(wid.AlgRS256, rsKid, der, wid.DerivationPKCS8, wid.KeyStateActive, at(now-100)); err != nil {
		t.Fatalf("InsertAlg(RS256): %v", err)
	}
	for alg, kid := range map[wid.Alg]string{wid.AlgES256: esKid, wid.AlgRS256: rsKid} {
		tok, err := kr.IssueAlg(alg, request("vault.io"), "", at(now))
		if err != nil {
			t.Fatalf("IssueAlg(%v): %v", alg, err)
		}
		f.tokens[alg] = tok
		f.keys[alg] = jwksKeyAny(t, kr, kid)
	}
	return f
}

// jwksKeyAny unmarshals the keyring's JWKS with go-jose's JSONWebKeySet and
// returns the public key with this kid, whatever its type.
func jwksKeyAny(t testing.TB, kr *wid.Keyring, kid string) jose.JSONWebKey {
	t.Helper()
	raw, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("go-jose cannot read the JWKS: %v\n%s", err, raw)
	}
	keys := set.Key(kid)
	if len(keys) != 1 {
		t.Fatalf("%d keys with kid %q in %s", len(keys), kid, raw)
	}
	k := keys[0]
	if !k.IsPublic() || !k.Valid() || k.Use != "sig" {
		t.Fatalf("JWKS key %q: public=%v valid=%v use=%q", kid, k.IsPublic(), k.Valid(), k.Use)
	}
	return k
}

func liveVerifier(t testing.TB, kr *wid.Keyring, audience string) *wid.Verifier {
	t.Helper()
	v, err := wid.NewVerifier(kr, audience, trivialStore, &wid.VerifierOptions{KeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

// (a) go-jose verifies our ES256 and RS256 tokens with the keys of our JWKS.
func TestBindingES256RS256VerifyWithGoJose(t *testing.T) {
	f := newAlgFixture(t)

	// The JWKS entries are the keys we put in: the ES256 one is the contract's
	// derivation (computed here in Go), the RS256 one crypto/rsa's key.
	ec, ok := f.keys[wid.AlgES256].Key.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("ES256 JWKS key is a %T", f.keys[wid.AlgES256].Key)
	}
	if ec.Curve != elliptic.P256() || !ec.Equal(&f.esPriv.PublicKey) {
		t.Fatalf("ES256 JWKS key is not the HKDF-derived key of %q", esKid)
	}
	rs, ok := f.keys[wid.AlgRS256].Key.(*rsa.PublicKey)
	if !ok {
		t.Fatalf("RS256 JWKS key is a %T", f.keys[wid.AlgRS256].Key)
	}
	if rs.N.Cmp(f.rsPriv.N) != 0 || rs.E != 65537 {
		t.Fatal("RS256 JWKS key is not the inserted key")
	}

	for alg, kid := range map[wid.Alg]string{wid.AlgES256: esKid, wid.AlgRS256: rsKid} {
		t.Run(alg.String(), func(t *testing.T) {
			key := f.keys[alg]
			if key.Algorithm != alg.String() {
				t.Errorf("JWKS alg %q", key.Algorithm)
			}
			ja := jose.SignatureAlgorithm(alg.String())
			tok, err := jwt.ParseSigned(f.tokens[alg], []jose.SignatureAlgorithm{ja})
			if err != nil {
				t.Fatalf("ParseSigned: %v", err)
			}
			if len(tok.Headers) != 1 || tok.Headers[0].KeyID != kid || tok.Headers[0].Algorithm != alg.String() {
				t.Fatalf("headers %+v", tok.Headers)
			}
			if _, err := jwt.ParseSigned(f.tokens[alg], otherAlgs(ja)); err == nil {
				t.Errorf("go-jose parsed a %v token with %v not allowed", alg, alg)
			}
			claims, nomad, err := joseVerify(f.tokens[alg], ja, key.Key, "vault.io", now)
			if err != nil {
				t.Fatalf("go-jose rejects a binding %v token: %v", alg, err)
			}
			if claims.Subject != "global:default:web:frontend:server:vault_default" ||
				claims.Expiry == nil || claims.Expiry.Time().Unix() != now+3600 ||
				nomad.AllocationID != allocID || nomad.Task != "server" {
				t.Errorf("claims %+v %+v", claims, nomad)
			}
			if _, _, err := joseVerify(f.tokens[alg], ja, key.Key, "consul.io", now); !errors.Is(err, jwt.ErrInvalidAudience) {
				t.Errorf("wrong audience: %v", err)
			}
			// Tampered payload, and the other algorithm's key: go-jose refuses.
			parts := strings.Split(f.tokens[alg], ".")
			forged := strings.Replace(string(mustB64(t, parts[1])), allocID, "00000000-0000-0000-0000-000000000000", 1)
			if _, _, err := joseVerify(parts[0]+"."+b64(forged)+"."+parts[2], ja, key.Key, "vault.io", now); err == nil {
				t.Error("go-jose accepted a forged payload")
			}
			other, otherAlg := f.keys[wid.AlgES256], jose.ES256
			if alg == wid.AlgES256 {
				other, otherAlg = f.keys[wid.AlgRS256], jose.RS256
			}
			if _, _, err := joseVerify(f.tokens[alg], ja, other.Key, "vault.io", now); err == nil {
				t.Error("go-jose accepted the token with the other algorithm's key")
			}
			// A relying party set up for the other algorithm (and its key)
			// refuses the token at parse time.
			if _, _, err := joseVerify(f.tokens[alg], otherAlg, other.Key, "vault.io", now); err == nil {
				t.Errorf("go-jose expecting %v accepted a %v token", otherAlg, alg)
			}
		})
	}

	// The JWK encodings DESIGN.md fixes: x, y 32 bytes; n without leading
	// zeros; e AQAB.
	raw, _ := f.kr.JWKS()
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatal(err)
	}
	for _, k := range set.Keys {
		switch k["kty"] {
		case "EC":
			if k["crv"] != "P-256" || len(mustB64(t, k["x"])) != 32 || len(mustB64(t, k["y"])) != 32 {
				t.Errorf("EC JWK %v", k)
			}
		case "RSA":
			if n := mustB64(t, k["n"]); len(n) != 256 || n[0] == 0 || k["e"] != "AQAB" {
				t.Errorf("RSA JWK %v", k)
			}
		default:
			t.Errorf("unexpected JWK %v", k)
		}
	}

	// Keys the library makes itself (RotateAlg: an RSA key from its own
	// generator, a fresh P-256 key) verify with go-jose too.
	for _, alg := range []wid.Alg{wid.AlgES256, wid.AlgRS256} {
		id, err := f.kr.RotateAlg(alg, at(now))
		if err != nil {
			t.Fatalf("RotateAlg(%v): %v", alg, err)
		}
		tok, err := f.kr.IssueAlg(alg, request("vault.io"), "https://nomad.example.com", at(now))
		if err != nil {
			t.Fatal(err)
		}
		claims, _, err := joseVerify(tok, jose.SignatureAlgorithm(alg.String()), jwksKeyAny(t, f.kr, id).Key, "vault.io", now)
		if err != nil {
			t.Fatalf("go-jose rejects a %v token of a rotated key: %v", alg, err)
		}
		if claims.Issuer != "https://nomad.example.com" {
			t.Errorf("iss %q", claims.Issuer)
		}
	}
}

// goJoseToken signs the usual workload identity claims with go-jose.
func goJoseToken(t testing.TB, alg jose.SignatureAlgorithm, key interface{}, kid string) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	registered, private := goJoseClaims()
	token, err := jwt.Signed(signer).Claims(registered).Claims(private).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

func goJoseClaims() (jwt.Claims, map[string]interface{}) {
	return jwt.Claims{
			Subject:   "global:default:web:frontend:server:vault_default",
			Audience:  jwt.Audience{"vault.io"},
			IssuedAt:  jwt.NewNumericDate(time.Unix(now, 0)),
			NotBefore: jwt.NewNumericDate(time.Unix(now, 0)),
			Expiry:    jwt.NewNumericDate(time.Unix(now+3600, 0)),
			ID:        "0c5e5c1e-7d1b-4c1e-9a43-5b0e0b3c2f11",
		}, map[string]interface{}{
			"nomad_namespace":     "default",
			"nomad_job_id":        "web",
			"nomad_allocation_id": allocID,
			"nomad_task":          "server",
		}
}

// (b) We verify go-jose-signed ES256 tokens (with the key derived from the
// material we inserted) and RS256 tokens (with the key we inserted as PKCS#8).
func TestGoJoseES256RS256TokensVerifyWithBinding(t *testing.T) {
	f := newAlgFixture(t)
	v := liveVerifier(t, f.kr, "vault.io")

	rsTok := goJoseToken(t, jose.RS256, f.rsPriv, rsKid)
	c, err := v.Verify(rsTok, at(now))
	if err != nil {
		t.Fatalf("the binding rejects a go-jose RS256 token: %v\n%s", err, rsTok)
	}
	if c.AllocationID != allocID || c.Task != "server" || c.Expires.Unix() != now+3600 {
		t.Errorf("claims %+v", c)
	}

	// ECDSA signatures are randomized and Go does not normalize s: among 32
	// tokens some have s > n/2, which DESIGN.md says verify.
	halfN := new(big.Int).Rsh(elliptic.P256().Params().N, 1)
	highS := 0
	for i := 0; i < 32; i++ {
		tok := goJoseToken(t, jose.ES256, f.esPriv, esKid)
		sig := mustB64(t, strings.Split(tok, ".")[2])
		if len(sig) != 64 {
			t.Fatalf("go-jose ES256 signature of %d bytes", len(sig))
		}
		if new(big.Int).SetBytes(sig[32:]).Cmp(halfN) > 0 {
			highS++
		}
		c, err := v.Verify(tok, at(now))
		if err != nil {
			t.Fatalf("the binding rejects go-jose ES256 token %d: %v\n%s", i, err, tok)
		}
		if c.AllocationID != allocID || c.Subject != "global:default:web:frontend:server:vault_default" {
			t.Errorf("claims %+v", c)
		}
	}
	t.Logf("32 go-jose ES256 tokens verified, %d with high s", highS)
	if highS == 0 {
		t.Error("no high-s signature among 32 (chance 2^-32): is the test signing what it thinks?")
	}

	// Signed with another key under our kid: BAD_SIGNATURE.
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(goJoseToken(t, jose.ES256, stranger, esKid), at(now)); !errors.Is(err, wid.ErrBadSignature) {
		t.Errorf("ES256 token of a stranger's key: %v", err)
	}
	// go-jose's ES384/PS256 under our kids: the kid's key fixes the algorithm.
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{
		"ES384 under the ES256 kid": goJoseToken(t, jose.ES384, p384, esKid),
		"PS256 under the RS256 kid": goJoseToken(t, jose.PS256, f.rsPriv, rsKid),
		"RS384 under the RS256 kid": goJoseToken(t, jose.RS384, f.rsPriv, rsKid),
		"RS256 under the ES256 kid": goJoseToken(t, jose.RS256, f.rsPriv, esKid),
		"ES256 under the RS256 kid": goJoseToken(t, jose.ES256, f.esPriv, rsKid),
	} {
		if _, err := v.Verify(tok, at(now)); !errors.Is(err, wid.ErrUnsupportedAlgorithm) {
			t.Errorf("%s: got %v, want UNSUPPORTED_ALGORITHM", name, err)
		}
	}
}

// nomadJWKS is a JWKS as Nomad's /.well-known/jwks.json serves it (go-jose's
// member order): an RS256 key (Nomad 1.7+) with a UUID kid, and an Ed25519
// key beside it as a cluster with older keys lists.
func nomadJWKS(rsKid string, pub *rsa.PublicKey, edKid string, ed []byte) []byte {
	return []byte(fmt.Sprintf(`{"keys":[`+
		`{"use":"sig","kty":"RSA","kid":%q,"alg":"RS256","n":%q,"e":%q},`+
		`{"use":"sig","kty":"OKP","kid":%q,"crv":"Ed25519","alg":"EdDSA","x":%q}]}`,
		rsKid, base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
		edKid, base64.RawURLEncoding.EncodeToString(ed)))
}

// signRS256ByHand is a compact JWS made with crypto/rsa alone: PKCS#1 v1.5
// over SHA-256 of base64url(header) "." base64url(claims).
func signRS256ByHand(t testing.TB, key *rsa.PrivateKey, header, claims string) string {
	t.Helper()
	input := b64(header) + "." + b64(claims)
	digest := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

const (
	nomadKid     = "3e6bbd67-3bd6-4b26-0c5e-4cdd1a1f0b52"
	nomadEdKid   = "f6a3b3a2-9cc4-a4f0-2b16-3f2c8f1e9d07"
	nomadAllocID = "a9c39a1c-4d7e-7b8f-66a5-7c0b2b9e4f21"
)

func nomadClaimsJSON(aud string) string {
	return fmt.Sprintf(`{"aud":%s,"exp":%d,"iat":%d,"jti":"8f1c6b2e-1d3a-4c5b-9e7f-0a1b2c3d4e5f",`+
		`"nbf":%d,"nomad_allocation_id":%q,"nomad_job_id":"example","nomad_namespace":"default",`+
		`"nomad_task":"redis","sub":"global:default:example:cache:redis:vault_default"}`,
		aud, now+3600, now, now, nomadAllocID)
}

// (c) A Nomad cluster's RS256 identity: JWKS and token built in Go (the
// token signed with crypto/rsa by hand, not go-jose), the JWKS imported into
// an empty keyring, the token verified through the binding.
func TestNomadShapedRS256(t *testing.T) {
	key := testRSAKey(t)
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	edPub := jwksEd25519(t, seed)
	jwks := nomadJWKS(nomadKid, &key.PublicKey, nomadEdKid, edPub)

	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	n, err := kr.ImportJWKS(jwks)
	if err != nil || n != 2 {
		t.Fatalf("ImportJWKS of a Nomad-shaped JWKS: %d %v\n%s", n, err, jwks)
	}
	// go-jose reads our re-export the same way.
	if k := jwksKeyAny(t, kr, nomadKid); k.Key.(*rsa.PublicKey).N.Cmp(key.N) != 0 {
		t.Fatal("re-exported RSA key differs")
	}

	var lookups []string
	var mu sync.Mutex
	store := wid.StateStoreFunc(func(id string, c wid.Consistency) (wid.AllocState, error) {
		mu.Lock()
		lookups = append(lookups, id+"/"+c.String())
		mu.Unlock()
		if id == nomadAllocID {
			return wid.Live, nil
		}
		return wid.Missing, nil
	})
	v, err := wid.NewVerifier(kr, "vault.io", store, &wid.VerifierOptions{KeyWait: -1, RequireExp: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	header := `{"alg":"RS256","kid":"` + nomadKid + `","typ":"JWT"}`
	for _, aud := range []string{`"vault.io"`, `["consul.io","vault.io"]`} {
		token := signRS256ByHand(t, key, header, nomadClaimsJSON(aud))
		c, err := v.Verify(token, at(now+30))
		if err != nil {
			t.Fatalf("aud %s: the binding rejects a Nomad-shaped RS256 token: %v\n%s", aud, err, token)
		}
		if c.Namespace != "default" || c.JobID != "example" || c.AllocationID != nomadAllocID ||
			c.Task != "redis" || c.Subject != "global:default:example:cache:redis:vault_default" ||
			c.JTI != "8f1c6b2e-1d3a-4c5b-9e7f-0a1b2c3d4e5f" ||
			c.IssuedAt.Unix() != now || c.NotBefore.Unix() != now ||
			c.Expires.Unix() != now+3600 || !containsString(c.Audience, "vault.io") {
			t.Errorf("claims %+v", c)
		}
		// go-jose agrees.
		if _, _, err := joseVerify(token, jose.RS256, &key.PublicKey, "vault.io", now+30); err != nil {
			t.Errorf("go-jose rejects the hand-signed token: %v", err)
		}
	}
	if len(lookups) == 0 || lookups[0] != nomadAllocID+"/stale" {
		t.Errorf("store lookups %q", lookups)
	}

	// The checks after the signature still apply.
	token := signRS256ByHand(t, key, header, nomadClaimsJSON(`"vault.io"`))
	if _, err := v.Verify(token, at(now+3600+60)); !errors.Is(err, wid.ErrExpired) {
		t.Errorf("expired: %v", err)
	}
	other := liveVerifier(t, kr, "consul.io")
	if _, err := other.Verify(token, at(now)); !errors.Is(err, wid.ErrAudienceMismatch) {
		t.Errorf("audience: %v", err)
	}
	gone := strings.Replace(nomadClaimsJSON(`"vault.io"`), nomadAllocID, allocID, 1)
	if _, err := v.Verify(signRS256ByHand(t, key, header, gone), at(now)); !errors.Is(err, wid.ErrAllocationNotFound) {
		t.Errorf("missing allocation: %v", err)
	}
	// Signed by another RSA key under Nomad's kid.
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(signRS256ByHand(t, stranger, header, nomadClaimsJSON(`"vault.io"`)), at(now)); !errors.Is(err, wid.ErrBadSignature) {
		t.Errorf("stranger's signature: %v", err)
	}
	// A kid the JWKS does not have.
	otherKid := `{"alg":"RS256","kid":"00000000-0000-0000-0000-000000000000","typ":"JWT"}`
	if _, err := v.Verify(signRS256ByHand(t, key, otherKid, nomadClaimsJSON(`"vault.io"`)), at(now)); !errors.Is(err, wid.ErrUnknownKey) {
		t.Errorf("unknown kid: %v", err)
	}
	// Imported keys verify only.
	if _, err := kr.IssueAlg(wid.AlgRS256, request("vault.io"), "", at(now)); !errors.Is(err, wid.ErrNoActiveKey) {
		t.Errorf("signing with an imported key: %v", err)
	}

	// JWKS that must be refused whole (DESIGN.md): a private member, an alg
	// that does not fit the key type.
	withD := bytes.Replace(jwks, []byte(`"e":"AQAB"`),
		[]byte(`"e":"AQAB","d":"`+base64.RawURLEncoding.EncodeToString(key.D.Bytes())+`"`), 1)
	wrongAlg := bytes.Replace(jwks, []byte(`"alg":"RS256"`), []byte(`"alg":"ES256"`), 1)
	for name, set := range map[string][]byte{"private d": withD, "alg ES256 on an RSA key": wrongAlg} {
		fresh, _ := wid.NewKeyring()
		if n, err := fresh.ImportJWKS(set); err == nil {
			t.Errorf("%s: JWKS imported (%d keys)", name, n)
		} else {
			t.Logf("%s: %v", name, err)
		}
		fresh.Close()
	}
}

// jwksEd25519 returns the Ed25519 public key of seed (for a plausible OKP entry).
func jwksEd25519(t testing.TB, seed []byte) []byte {
	t.Helper()
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if err := kr.Insert("seed", seed, wid.DerivationNomadRawSeed, wid.KeyStateInactive, at(now)); err != nil {
		t.Fatal(err)
	}
	raw, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	var set struct {
		Keys []struct {
			X string `json:"x"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("JWKS %s: %v", raw, err)
	}
	return mustB64(t, set.Keys[0].X)
}

// (d) Algorithm confusion: HS256 (and HS384/HS512) keyed with the public
// key's bytes in every usual encoding (the classic RS256 -> HS256 attack),
// and alg none, are refused with UNSUPPORTED_ALGORITHM, for signing keys and
// for verify-only keys imported from a Nomad-shaped JWKS.
func TestAlgorithmConfusionRefused(t *testing.T) {
	f := newAlgFixture(t)
	imported, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer imported.Close()
	nomadKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imported.ImportJWKS(nomadJWKS(nomadKid, &nomadKey.PublicKey, nomadEdKid, jwksEd25519(t, make([]byte, 32)))); err != nil {
		t.Fatal(err)
	}

	targets := []struct {
		name string
		kr   *wid.Keyring
		kid  string
		alg  string
		pub  crypto.PublicKey
	}{
		{"RS256 signing key", f.kr, rsKid, "RS256", &f.rsPriv.PublicKey},
		{"ES256 signing key", f.kr, esKid, "ES256", &f.esPriv.PublicKey},
		{"imported Nomad RS256 key", imported, nomadKid, "RS256", &nomadKey.PublicKey},
	}
	claims := nomadClaimsJSON(`"vault.io"`)
	hmacs := map[string]func() hash.Hash{"HS256": sha256.New, "HS384": sha512.New384, "HS512": sha512.New}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			v := liveVerifier(t, tg.kr, "vault.io")
			// The genuine article verifies (so a refusal below is about alg).
			if tg.alg == "RS256" {
				priv := f.rsPriv
				if tg.kr == imported {
					priv = nomadKey
				}
				hdr := fmt.Sprintf(`{"alg":"RS256","kid":%q,"typ":"JWT"}`, tg.kid)
				if _, err := v.Verify(signRS256ByHand(t, priv, hdr, claims), at(now)); err != nil {
					t.Fatalf("the genuine RS256 token: %v", err)
				}
			}

			der, err := x509.MarshalPKIXPublicKey(tg.pub)
			if err != nil {
				t.Fatal(err)
			}
			jwk, err := json.Marshal(jose.JSONWebKey{Key: tg.pub, KeyID: tg.kid, Algorithm: tg.alg, Use: "sig"})
			if err != nil {
				t.Fatal(err)
			}
			secrets := map[string][]byte{
				"PKIX DER": der,
				"PKIX PEM": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}),
				"JWK JSON": jwk,
			}
			switch pub := tg.pub.(type) {
			case *rsa.PublicKey:
				pkcs1 := x509.MarshalPKCS1PublicKey(pub)
				secrets["PKCS1 DER"] = pkcs1
				secrets["PKCS1 PEM"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: pkcs1})
				secrets["n"] = pub.N.Bytes()
			case *ecdsa.PublicKey:
				point, err := pub.Bytes() // the uncompressed point, 0x04 || x || y
				if err != nil {
					t.Fatal(err)
				}
				secrets["uncompressed point"] = point
			}

			var tokens, names []string
			for hs, h := range hmacs {
				for enc, secret := range secrets {
					input := b64(fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"JWT"}`, hs, tg.kid)) + "." + b64(claims)
					mac := hmac.New(h, secret)
					mac.Write([]byte(input))
					tokens = append(tokens, input+"."+base64.RawURLEncoding.EncodeToString(mac.Sum(nil)))
					names = append(names, hs+" keyed with the "+enc)
				}
			}
			genuineSig := ""
			if tok, err := tg.kr.IssueAlg(wid.AlgRS256, request("vault.io"), "", at(now)); err == nil {
				genuineSig = strings.Split(tok, ".")[2]
			}
			for _, none := range []string{"none", "None", "NONE", "nOnE"} {
				input := b64(fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"JWT"}`, none, tg.kid)) + "." + b64(claims)
				tokens = append(tokens, input+".")
				names = append(names, "alg "+none+", empty signature")
				tokens = append(tokens, input+"."+b64("x"))
				names = append(names, "alg "+none+", junk signature")
				if genuineSig != "" {
					tokens = append(tokens, input+"."+genuineSig)
					names = append(names, "alg "+none+", a real RS256 signature")
				}
			}
			for i, tok := range tokens {
				_, err := v.Verify(tok, at(now))
				if !errors.Is(err, wid.ErrUnsupportedAlgorithm) {
					t.Errorf("%s: got %v, want UNSUPPORTED_ALGORITHM", names[i], err)
				}
				// go-jose v4, told the key's algorithm as a relying party
				// must tell it, refuses them before any key is used.
				if _, _, err := joseVerify(tok, jose.SignatureAlgorithm(tg.alg), tg.pub, "vault.io", now); err == nil {
					t.Errorf("%s: go-jose v4 expecting %s accepted it", names[i], tg.alg)
				}
			}
			for i, err := range v.VerifyBatch(tokens, at(now)) {
				if !errors.Is(err, wid.ErrUnsupportedAlgorithm) {
					t.Errorf("batch, %s: got %v, want UNSUPPORTED_ALGORITHM", names[i], err)
				}
			}
			t.Logf("%d forged tokens refused", len(tokens))
		})
	}

	// Without a kid to pin the algorithm: refused all the same (the code is logged).
	v := liveVerifier(t, f.kr, "vault.io")
	for _, hdr := range []string{`{"alg":"none","typ":"JWT"}`, `{"alg":"HS256","typ":"JWT"}`, `{"typ":"JWT"}`} {
		input := b64(hdr) + "." + b64(claims)
		mac := hmac.New(sha256.New, []byte("secret"))
		mac.Write([]byte(input))
		for _, tok := range []string{input + ".", input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))} {
			if _, err := v.Verify(tok, at(now)); err == nil {
				t.Errorf("%s accepted", hdr)
			} else {
				t.Logf("%s: %v", hdr, err)
			}
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
