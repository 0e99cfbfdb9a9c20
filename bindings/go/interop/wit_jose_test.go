package interop

import (
	"encoding/json"
	"testing"
	"time"

	"gopkg.in/square/go-jose.v2"
	"gopkg.in/square/go-jose.v2/jwt"

	"workload-identity/wid"
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
// would trust for bearer tokens, and verifies it with the WIT key set.
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
	key, err := wid.GenerateWorkloadKey(wid.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	defer key.Close()
	req := request("vault.io")
	if req.ProofKey, err = key.ProofKey(); err != nil {
		t.Fatal(err)
	}
	b, err := wid.EncodeIssueRequest(req)
	if err != nil {
		t.Fatal(err)
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
	for _, alg := range []wid.Alg{wid.AlgEdDSA, wid.AlgES256} {
		wit, err := kr.IssueWIT(alg, b, "https://nomad.example.com", "nomad.example.com", time.Unix(now, 0))
		if err != nil {
			t.Fatalf("IssueWIT(%v): %v", alg, err)
		}
		tok, err := jwt.ParseSigned(wit)
		if err != nil {
			t.Fatalf("go-jose cannot parse our WIT: %v", err)
		}
		kid := tok.Headers[0].KeyID
		if len(bearerSet.Key(kid)) != 0 {
			t.Fatalf("%v: the WIT's key %s is in the JWKS", alg, kid)
		}
		// Every key of the JWKS, whatever its kid: none verifies the WIT.
		for _, k := range bearerSet.Keys {
			var c map[string]interface{}
			if err := tok.Claims(k.Key, &c); err == nil {
				t.Fatalf("%v: go-jose verified the WIT with JWKS key %s", alg, k.KeyID)
			}
		}
		keys := witSet.Key(kid)
		if len(keys) != 1 {
			t.Fatalf("%v: %d keys %s in the WIT key set %s", alg, len(keys), kid, witJWKS)
		}
		var std jwt.Claims
		var raw map[string]interface{}
		if err := tok.Claims(keys[0].Key, &std, &raw); err != nil {
			t.Fatalf("%v: go-jose refused the WIT with the WIT key set: %v", alg, err)
		}
		if err := std.ValidateWithLeeway(jwt.Expected{
			Issuer: "https://nomad.example.com",
			Time:   time.Unix(now, 0),
		}, 0); err != nil {
			t.Fatalf("%v: %v", alg, err)
		}
		if _, ok := raw["aud"]; ok || len(std.Audience) != 0 {
			t.Fatalf("%v: a WIT carries aud %v", alg, raw["aud"])
		}
		if tok.Headers[0].ExtraHeaders["typ"] != "wit+jwt" {
			t.Fatalf("%v: typ %v", alg, tok.Headers[0].ExtraHeaders["typ"])
		}
	}
}
