package interop

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

const (
	now     = int64(1700000000)
	allocID = "5f8c7d2e-3b1a-4c6d-9e0f-123456789abc"
)

// at is the time.Time of Unix seconds unix: the tests count in seconds from
// now, the API takes time.Time.
func at(unix int64) time.Time { return time.Unix(unix, 0) }

// nomadClaims are the private claims of a workload identity.
type nomadClaims struct {
	Namespace    string `json:"nomad_namespace"`
	JobID        string `json:"nomad_job_id"`
	AllocationID string `json:"nomad_allocation_id"`
	Task         string `json:"nomad_task"`
	Service      string `json:"nomad_service"`
}

func request(audiences ...string) *wid.IssueRequest {
	return &wid.IssueRequest{
		Region: "global",
		Allocation: &wid.Allocation{
			ID:        allocID,
			Namespace: "default",
			JobID:     "web",
			TaskGroup: "frontend",
		},
		Task: "server",
		Identity: &wid.WorkloadIdentity{
			Name:     "vault_default",
			Audience: audiences,
			TTL:      time.Hour,
		},
	}
}

// fixture is a keyring with one active key, a token it signed for
// "vault.io", and that key as go-jose reads it from the exported JWKS.
type fixture struct {
	kr    *wid.Keyring
	token string
	key   jose.JSONWebKey
}

func newFixture(t testing.TB, seed byte, derivation wid.Derivation, audiences ...string) *fixture {
	t.Helper()
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kr.Close)
	material := make([]byte, 32)
	for i := range material {
		material[i] = seed + byte(i)
	}
	if err := kr.Insert("key-1", material, derivation, wid.KeyStateActive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	if len(audiences) == 0 {
		audiences = []string{"vault.io"}
	}
	token, err := kr.Issue(request(audiences...), at(now))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{kr: kr, token: token, key: jwksKey(t, kr, "key-1")}
}

// jwksKey unmarshals the keyring's exported JWKS with go-jose and returns
// the key with this kid.
func jwksKey(t testing.TB, kr *wid.Keyring, kid string) jose.JSONWebKey {
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
	if _, ok := k.Key.(ed25519.PublicKey); !ok {
		t.Fatalf("JWKS key is a %T, want ed25519.PublicKey", k.Key)
	}
	if !k.IsPublic() || !k.Valid() {
		t.Fatalf("JWKS key public=%v valid=%v", k.IsPublic(), k.Valid())
	}
	if k.Algorithm != "" && k.Algorithm != string(jose.EdDSA) {
		t.Fatalf("JWKS key alg %q", k.Algorithm)
	}
	return k
}

// joseVerify verifies token with go-jose v4 as a relying party configured
// for one algorithm does: the header's alg must be alg (go-jose v4 refuses
// any other at parse time), then the signature with key, then the
// registered claims for the audience at the given time.
func joseVerify(token string, alg jose.SignatureAlgorithm, key interface{}, audience string, at int64) (*jwt.Claims, *nomadClaims, error) {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{alg})
	if err != nil {
		return nil, nil, err
	}
	var claims jwt.Claims
	var nomad nomadClaims
	if err := tok.Claims(key, &claims, &nomad); err != nil {
		return nil, nil, err
	}
	if err := claims.Validate(jwt.Expected{AnyAudience: jwt.Audience{audience}, Time: time.Unix(at, 0)}); err != nil {
		return nil, nil, err
	}
	return &claims, &nomad, nil
}

// otherAlgs are the signature algorithms go-jose knows other than alg: a
// relying party expecting only those must refuse a token of alg unread.
func otherAlgs(alg jose.SignatureAlgorithm) []jose.SignatureAlgorithm {
	var out []jose.SignatureAlgorithm
	for _, a := range []jose.SignatureAlgorithm{jose.EdDSA, jose.HS256, jose.HS384, jose.HS512,
		jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512,
		jose.PS256, jose.PS384, jose.PS512} {
		if a != alg {
			out = append(out, a)
		}
	}
	return out
}

func TestBindingTokensVerifyWithGoJose(t *testing.T) {
	f := newFixture(t, 1, wid.DerivationHKDFV1)

	tok, err := jwt.ParseSigned(f.token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatalf("ParseSigned: %v", err)
	}
	if len(tok.Headers) != 1 || tok.Headers[0].KeyID != "key-1" || tok.Headers[0].Algorithm != string(jose.EdDSA) {
		t.Fatalf("headers %+v", tok.Headers)
	}
	// A relying party that does not allow EdDSA does not read the token.
	if _, err := jwt.ParseSigned(f.token, otherAlgs(jose.EdDSA)); err == nil {
		t.Error("go-jose parsed an EdDSA token with EdDSA not allowed")
	}

	claims, nomad, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "vault.io", now)
	if err != nil {
		t.Fatalf("go-jose rejects a binding token: %v", err)
	}
	if claims.Subject != "global:default:web:frontend:server:vault_default" ||
		claims.Expiry == nil || claims.Expiry.Time().Unix() != now+3600 ||
		claims.IssuedAt == nil || claims.IssuedAt.Time().Unix() != now ||
		claims.NotBefore == nil || claims.NotBefore.Time().Unix() != now ||
		len(claims.ID) != 36 || !claims.Audience.Contains("vault.io") {
		t.Errorf("registered claims %+v", claims)
	}
	if nomad.Namespace != "default" || nomad.JobID != "web" || nomad.AllocationID != allocID ||
		nomad.Task != "server" || nomad.Service != "" {
		t.Errorf("nomad claims %+v", nomad)
	}

	// The audience is really checked.
	if _, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "consul.io", now); !errors.Is(err, jwt.ErrInvalidAudience) {
		t.Errorf("wrong audience: got %v, want ErrInvalidAudience", err)
	}
	// So is the time (go-jose's leeway is one minute, like the library's).
	if _, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "vault.io", now+3600+61); !errors.Is(err, jwt.ErrExpired) {
		t.Errorf("expired: got %v, want ErrExpired", err)
	}
	if _, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "vault.io", now-61); !errors.Is(err, jwt.ErrNotValidYet) {
		t.Errorf("not yet valid: got %v, want ErrNotValidYet", err)
	}
}

func TestMultipleAudiences(t *testing.T) {
	f := newFixture(t, 2, wid.DerivationHKDFV1, "consul.io", "vault.io")
	for _, aud := range []string{"vault.io", "consul.io"} {
		claims, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, aud, now)
		if err != nil {
			t.Fatalf("audience %s: %v", aud, err)
		}
		if len(claims.Audience) != 2 {
			t.Errorf("aud %v", claims.Audience)
		}
	}
	if _, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "nomad.io", now); !errors.Is(err, jwt.ErrInvalidAudience) {
		t.Errorf("wrong audience: %v", err)
	}
}

func TestTamperedTokensFailWithGoJose(t *testing.T) {
	f := newFixture(t, 3, wid.DerivationHKDFV1)
	parts := strings.Split(f.token, ".")

	// A payload claiming another allocation, under the original signature.
	payload, err := jose.ParseSignedCompact(f.token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	body := payload.UnsafePayloadWithoutVerification()
	forged := strings.Replace(string(body), allocID, "00000000-0000-0000-0000-000000000000", 1)
	if forged == string(body) {
		t.Fatal("allocation ID not in the payload")
	}
	forgedToken := parts[0] + "." + b64(forged) + "." + parts[2]

	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	other := newFixture(t, 4, wid.DerivationHKDFV1)

	cases := map[string]struct {
		token string
		key   interface{}
	}{
		"forged payload":        {forgedToken, f.key.Key},
		"flipped signature":     {parts[0] + "." + parts[1] + "." + flip(parts[2], 10), f.key.Key},
		"flipped payload":       {parts[0] + "." + flip(parts[1], 10) + "." + parts[2], f.key.Key},
		"another keyring's key": {f.token, other.key.Key},
		// The RS256 -> HS256 confusion on an Ed25519 key: HS256 keyed with
		// the public key's bytes. go-jose v4 refuses it before any key is
		// used, since the relying party allows EdDSA alone.
		"HS256 keyed with the public key": {hs256(parts[1], "key-1", f.key.Key.(ed25519.PublicKey)), f.key.Key},
	}
	for name, c := range cases {
		if _, _, err := joseVerify(c.token, jose.EdDSA, c.key, "vault.io", now); err == nil {
			t.Errorf("%s: go-jose accepted it", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}

	// The binding rejects them too.
	v, err := wid.NewVerifier(f.kr, "vault.io", wid.StateStoreFunc(func(string, wid.Consistency) (wid.AllocState, error) {
		return wid.Live, nil
	}), &wid.VerifierOptions{KeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.Verify(forgedToken, at(now)); !errors.Is(err, wid.ErrBadSignature) {
		t.Errorf("binding on the forged token: %v", err)
	}
	if _, err := v.Verify(f.token, at(now)); err != nil {
		t.Errorf("binding on the original: %v", err)
	}
}

// The other direction: a token go-jose signs with the seed of a
// Nomad-compatible (raw seed) key verifies through the binding.
func TestGoJoseTokensVerifyWithBinding(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(100 + i)
	}
	priv := ed25519.NewKeyFromSeed(seed)

	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if err := kr.Insert("nomad-key", seed, wid.DerivationNomadRawSeed, wid.KeyStateActive, at(now)); err != nil {
		t.Fatal(err)
	}
	jk := jwksKey(t, kr, "nomad-key")
	if !priv.Public().(ed25519.PublicKey).Equal(jk.Key.(ed25519.PublicKey)) {
		t.Fatal("the raw-seed key's JWKS entry is not ed25519.NewKeyFromSeed(seed)'s public key")
	}

	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "nomad-key"))
	if err != nil {
		t.Fatal(err)
	}
	registered := jwt.Claims{
		Subject:   "global:default:web:frontend:server:vault_default",
		Audience:  jwt.Audience{"vault.io"},
		IssuedAt:  jwt.NewNumericDate(time.Unix(now, 0)),
		NotBefore: jwt.NewNumericDate(time.Unix(now, 0)),
		Expiry:    jwt.NewNumericDate(time.Unix(now+3600, 0)),
		ID:        "0c5e5c1e-7d1b-4c1e-9a43-5b0e0b3c2f11",
	}
	private := map[string]interface{}{
		"nomad_namespace":     "default",
		"nomad_job_id":        "web",
		"nomad_allocation_id": allocID,
		"nomad_task":          "server",
	}
	token, err := jwt.Signed(signer).Claims(registered).Claims(private).Serialize()
	if err != nil {
		t.Fatal(err)
	}

	v, err := wid.NewVerifier(kr, "vault.io", wid.StateStoreFunc(func(string, wid.Consistency) (wid.AllocState, error) {
		return wid.Live, nil
	}), &wid.VerifierOptions{KeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c, err := v.Verify(token, at(now))
	if err != nil {
		t.Fatalf("the binding rejects a go-jose token: %v\n%s", err, token)
	}
	if c.AllocationID != allocID || c.Subject != registered.Subject || c.Expires.Unix() != now+3600 {
		t.Errorf("claims %+v", c)
	}
	// And tokens the library signs with that key verify with the seed's
	// public key in go-jose.
	ours, err := kr.Issue(request("vault.io"), at(now))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := joseVerify(ours, jose.EdDSA, priv.Public(), "vault.io", now); err != nil {
		t.Errorf("go-jose with the seed's public key: %v", err)
	}
}

// hs256 is a compact JWS of payload (already base64url) with alg HS256
// under kid, keyed with secret.
func hs256(payload, kid string, secret []byte) string {
	input := b64(fmt.Sprintf(`{"alg":"HS256","kid":%q,"typ":"JWT"}`, kid)) + "." + payload
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func b64(s string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}
