package interop

import (
	"errors"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
)

// nodeClaims are the private claims of a node identity (Nomad 1.11).
type nodeClaims struct {
	NodeID         string `json:"nomad_node_id"`
	NodePool       string `json:"nomad_node_pool"`
	NodeClass      string `json:"nomad_node_class"`
	NodeDatacenter string `json:"nomad_node_datacenter"`
	AllocationID   string `json:"nomad_allocation_id"`
}

// A node identity token from the binding is a standard JWT: go-jose v4
// verifies it with the key of the exported JWKS and reads Nomad's node
// claims, and the registered claims (sub, aud, exp) are checked as usual.
func TestNodeTokensVerifyWithGoJose(t *testing.T) {
	f := newFixture(t, 4, wid.DerivationHKDFV1)
	const node = "da86421c-7de9-85e4-2f50-3b2bf95102c1"
	token, err := f.kr.IssueNode(wid.AlgEdDSA, &wid.NodeIdentityRequest{
		Region: "global",
		Node: &wid.Node{
			ID:         node,
			Name:       "client-1",
			Datacenter: "dc1",
			NodeClass:  "gpu",
			NodePool:   "default",
			Status:     "ready",
		},
	}, "https://nomad.example.com", at(now))
	if err != nil {
		t.Fatalf("IssueNode: %v", err)
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatalf("ParseSigned: %v", err)
	}
	var claims jwt.Claims
	var nc nodeClaims
	if err := tok.Claims(f.key.Key, &claims, &nc); err != nil {
		t.Fatalf("go-jose rejects a node token: %v", err)
	}
	if err := claims.Validate(jwt.Expected{
		AnyAudience: jwt.Audience{"nomadproject.io"},
		Subject:     "node:global:default:" + node + ":default",
		Issuer:      "https://nomad.example.com",
		Time:        time.Unix(now, 0),
	}); err != nil {
		t.Fatalf("registered claims %+v: %v", claims, err)
	}
	if claims.Expiry == nil || claims.Expiry.Time().Unix() != now+24*3600 || len(claims.ID) != 36 {
		t.Errorf("registered claims %+v", claims)
	}
	if nc.NodeID != node || nc.NodePool != "default" || nc.NodeClass != "gpu" ||
		nc.NodeDatacenter != "dc1" || nc.AllocationID != "" {
		t.Errorf("node claims %+v", nc)
	}
	// A day later it has expired for go-jose too.
	if err := claims.Validate(jwt.Expected{Time: time.Unix(now+24*3600+61, 0)}); !errors.Is(err, jwt.ErrExpired) {
		t.Errorf("expired: got %v, want ErrExpired", err)
	}
}
