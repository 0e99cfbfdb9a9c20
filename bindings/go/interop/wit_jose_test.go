package interop

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// keySet is a JWKS as go-jose reads it.
func keySet(t *testing.T, raw []byte) jose.JSONWebKeySet {
	t.Helper()
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		t.Fatalf("go-jose cannot read %s: %v", raw, err)
	}
	return set
}

// A WIT is never a bearer token (issue 40): go-jose, a relying party that
// does not look at typ, cannot verify our WIT with any key of the JWKS it
// would trust for bearer tokens, and verifies it with the WIT key set. Its
// cnf.jwk is the workload's public key (with alg), and the WPT the workload
// makes for one request verifies with that key alone (draft-ietf-wimse-wpt:
// typ wpt+jwt, alg = cnf.jwk.alg, aud the target URI, wth and ath the
// hashes of the WIT and the access token).
func TestGoJoseVerifiesWITsFromTheWITKeySetOnly(t *testing.T) {
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	for _, p := range []wid.KeyPurpose{wid.PurposeBearer, wid.PurposeWIT} {
		for _, alg := range []wid.Alg{wid.AlgEdDSA, wid.AlgES256} {
			if _, err := kr.RotatePurpose(p, alg, at(now-100)); err != nil {
				t.Fatalf("RotatePurpose(%v, %v): %v", p, alg, err)
			}
		}
	}
	bearerJWKS, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	witJWKS, err := kr.JWKSPurpose(wid.PurposeWIT)
	if err != nil {
		t.Fatal(err)
	}
	bearerSet, witSet := keySet(t, bearerJWKS), keySet(t, witJWKS)
	if len(bearerSet.Keys) != 2 || len(witSet.Keys) != 2 {
		t.Fatalf("JWKS %s, WIT key set %s", bearerJWKS, witJWKS)
	}
	// The workload's key: ES256 (mandatory to implement) and EdDSA.
	for _, keyAlg := range []wid.Alg{wid.AlgES256, wid.AlgEdDSA} {
		key, err := wid.GenerateWorkloadKey(keyAlg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(key.Close)
		req := request("vault.io")
		if req.ProofKey, err = key.ProofKey(); err != nil {
			t.Fatal(err)
		}
		b, err := wid.EncodeIssueRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		publicJWK, err := key.PublicJWK()
		if err != nil {
			t.Fatal(err)
		}
		var workloadJWK jose.JSONWebKey
		if err := json.Unmarshal([]byte(publicJWK), &workloadJWK); err != nil {
			t.Fatalf("go-jose cannot read the workload's public JWK %s: %v", publicJWK, err)
		}
		for _, alg := range []wid.Alg{wid.AlgEdDSA, wid.AlgES256} {
			name := "WIT " + alg.String() + ", workload key " + keyAlg.String()
			wit, err := kr.IssueWIT(alg, b, "https://nomad.example.com", "nomad.example.com", time.Unix(now, 0))
			if err != nil {
				t.Fatalf("%s: IssueWIT: %v", name, err)
			}
			tok, err := jwt.ParseSigned(wit, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(alg.String())})
			if err != nil {
				t.Fatalf("%s: go-jose cannot parse our WIT: %v", name, err)
			}
			kid := tok.Headers[0].KeyID
			if len(bearerSet.Key(kid)) != 0 {
				t.Fatalf("%s: the WIT's key %s is in the JWKS", name, kid)
			}
			// Every key of the JWKS, whatever its kid: none verifies the WIT.
			for _, k := range bearerSet.Keys {
				var c map[string]interface{}
				if err := tok.Claims(k.Key, &c); err == nil {
					t.Fatalf("%s: go-jose verified the WIT with JWKS key %s", name, k.KeyID)
				}
			}
			keys := witSet.Key(kid)
			if len(keys) != 1 {
				t.Fatalf("%s: %d keys %s in the WIT key set %s", name, len(keys), kid, witJWKS)
			}
			var std jwt.Claims
			var raw map[string]interface{}
			var cnf struct {
				Cnf struct {
					JWK jose.JSONWebKey `json:"jwk"`
				} `json:"cnf"`
			}
			if err := tok.Claims(keys[0].Key, &std, &raw, &cnf); err != nil {
				t.Fatalf("%s: go-jose refused the WIT with the WIT key set: %v", name, err)
			}
			if err := std.ValidateWithLeeway(jwt.Expected{
				Issuer: "https://nomad.example.com",
				Time:   time.Unix(now, 0),
			}, 0); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, ok := raw["aud"]; ok || len(std.Audience) != 0 {
				t.Fatalf("%s: a WIT carries aud %v", name, raw["aud"])
			}
			if tok.Headers[0].ExtraHeaders[jose.HeaderType] != "wit+jwt" {
				t.Fatalf("%s: typ %v", name, tok.Headers[0].ExtraHeaders[jose.HeaderType])
			}
			// cnf.jwk: the workload's public key, with its alg, and public.
			jwk := cnf.Cnf.JWK
			if !jwk.Valid() || !jwk.IsPublic() || jwk.Algorithm != keyAlg.String() ||
				!reflect.DeepEqual(jwk.Key, workloadJWK.Key) {
				t.Fatalf("%s: cnf.jwk %+v, want the workload's %s", name, jwk, publicJWK)
			}

			// The WPT for one request, checked with cnf.jwk alone.
			const target = "https://vault.example.com/v1/auth/jwt/login"
			wpt, err := key.Prove(wit, target+"?role=web#x", "access-1", time.Minute, time.Unix(now, 0))
			if err != nil {
				t.Fatalf("%s: Prove: %v", name, err)
			}
			proof, err := jwt.ParseSigned(wpt, []jose.SignatureAlgorithm{jose.SignatureAlgorithm(jwk.Algorithm)})
			if err != nil {
				t.Fatalf("%s: go-jose cannot parse the WPT with cnf.jwk.alg %s: %v", name, jwk.Algorithm, err)
			}
			h := proof.Headers[0]
			if h.ExtraHeaders[jose.HeaderType] != "wpt+jwt" || h.KeyID != "" || h.JSONWebKey != nil {
				t.Fatalf("%s: WPT header %+v", name, h)
			}
			// Signed by the workload's key: no key of ours verifies it.
			for _, k := range append(append([]jose.JSONWebKey{}, bearerSet.Keys...), witSet.Keys...) {
				var c map[string]interface{}
				if err := proof.Claims(k.Key, &c); err == nil {
					t.Fatalf("%s: go-jose verified the WPT with our key %s", name, k.KeyID)
				}
			}
			var pstd jwt.Claims
			var praw map[string]interface{}
			if err := proof.Claims(jwk.Key, &pstd, &praw); err != nil {
				t.Fatalf("%s: go-jose refused the WPT with cnf.jwk: %v", name, err)
			}
			if err := pstd.ValidateWithLeeway(jwt.Expected{
				AnyAudience: jwt.Audience{target},
				Time:        time.Unix(now, 0),
			}, 0); err != nil {
				t.Fatalf("%s: WPT %v", name, err)
			}
			if pstd.Expiry == nil || pstd.Expiry.Time().Unix() != now+60 || len(pstd.Audience) != 1 {
				t.Errorf("%s: WPT exp/aud %+v", name, pstd)
			}
			if praw["wth"] != sha256B64(wit) || praw["ath"] != sha256B64("access-1") {
				t.Errorf("%s: WPT wth %v ath %v", name, praw["wth"], praw["ath"])
			}
			// jti: at least 128 random bits, however it is written.
			if jti, _ := praw["jti"].(string); len(jti) < 22 {
				t.Errorf("%s: WPT jti %q", name, jti)
			}
			for _, c := range []string{"iss", "sub", "iat", "nbf"} {
				if _, ok := praw[c]; ok {
					t.Errorf("%s: the WPT carries %s", name, c)
				}
			}
		}
	}
}

// sha256B64 is base64url (no padding) of SHA-256 over s: wth and ath.
func sha256B64(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
