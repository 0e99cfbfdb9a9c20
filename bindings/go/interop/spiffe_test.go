package interop

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// SPIFFE JWT-SVIDs with extra claims (wid.Issuer) against go-jose v4: the
// token verifies with the key of the exported JWKS and with the key of the
// SPIFFE bundle, its sub is the SPIFFE ID, and extra_claims is an object of
// strings in the payload.

const extraPolicy = `{"namespaces":{"default":{
	"required_extra_claims":{"unique_id":"${job.namespace}:${job.id}"},
	"optional_extra_claims":{"dc":"dc:${node.datacenter}","owner":"${job.meta.owner}"}}}}`

// svidClaims are the private claims a relying party reads from a JWT-SVID
// minted with an extra claims policy.
type svidClaims struct {
	AllocationID string            `json:"nomad_allocation_id"`
	ExtraClaims  map[string]string `json:"extra_claims"`
}

func TestSpiffeJWTSVIDVerifiesWithGoJose(t *testing.T) {
	kr, err := wid.NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if err := kr.InsertAlg(wid.AlgES256, esKid, esMaterial(), wid.DerivationHKDFV1, wid.KeyStateActive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	if _, err := kr.Rotate(at(now - 100)); err != nil { // an EdDSA key too: not in the bundle
		t.Fatal(err)
	}
	iss, err := wid.NewIssuer(kr, wid.IssuerOptions{
		Issuer:                "https://nomad.example.com",
		Alg:                   wid.AlgES256,
		SpiffeTrustDomain:     "example.org",
		ExtraClaimsPolicyJSON: extraPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	req := request("spiffe-validator")
	req.Allocation.Job = &wid.Job{ID: "web", Meta: map[string]string{"owner": "team-a"}}
	req.Node = &wid.Node{Datacenter: "dc1", ID: "n1"}
	req.Identity.ExtraClaims = []string{"dc", "owner"}
	token, err := iss.Issue(req, at(now))
	if err != nil {
		t.Fatal(err)
	}

	bundle, err := kr.SpiffeBundle(5 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var bundleSet jose.JSONWebKeySet
	if err := json.Unmarshal([]byte(bundle), &bundleSet); err != nil {
		t.Fatalf("go-jose cannot read the SPIFFE bundle: %v\n%s", err, bundle)
	}
	if len(bundleSet.Keys) != 1 || bundleSet.Keys[0].Use != "jwt-svid" || bundleSet.Keys[0].KeyID != esKid {
		t.Fatalf("bundle keys %+v", bundleSet.Keys)
	}

	for name, key := range map[string]jose.JSONWebKey{
		"JWKS":          jwksKeyAny(t, kr, esKid),
		"SPIFFE bundle": bundleSet.Keys[0],
	} {
		tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.ES256})
		if err != nil {
			t.Fatalf("ParseSigned: %v", err)
		}
		if len(tok.Headers) != 1 || tok.Headers[0].Algorithm != "ES256" || tok.Headers[0].KeyID != esKid {
			t.Fatalf("headers %+v", tok.Headers)
		}
		var claims jwt.Claims
		var private svidClaims
		if err := tok.Claims(key.Key, &claims, &private); err != nil {
			t.Fatalf("%s: go-jose does not verify the JWT-SVID: %v", name, err)
		}
		if err := claims.Validate(jwt.Expected{
			Issuer:      "https://nomad.example.com",
			AnyAudience: jwt.Audience{"spiffe-validator"},
			Time:        time.Unix(now, 0),
		}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if claims.Subject != "spiffe://example.org/global/default/web/frontend/server/vault_default" ||
			claims.Expiry == nil || claims.Expiry.Time().Unix() != now+3600 {
			t.Errorf("%s: registered claims %+v", name, claims)
		}
		want := map[string]string{"dc": "dc:dc1", "owner": "team-a", "unique_id": "default:web"}
		if private.AllocationID != allocID || !reflect.DeepEqual(private.ExtraClaims, want) {
			t.Errorf("%s: private claims %+v, want extra_claims %v", name, private, want)
		}
	}

	// And the binding's own verifier reads the same.
	v, err := wid.NewVerifier(kr, "spiffe-validator", trivialStore, &wid.VerifierOptions{KeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c, err := v.Verify(token, at(now))
	if err != nil || c.ExtraClaims["owner"] != "team-a" || c.Subject[:9] != "spiffe://" {
		t.Errorf("Verify: %+v %v", c, err)
	}
}
