package wid

import (
	"reflect"
	"testing"
)

// TestFastClaimsAgreesWithEncodingJSON: for every input, decodeClaimsString
// gives what json.Unmarshal into Claims gives, and the fast path takes the
// library's own output shape and refuses everything it does not know exactly.
func TestFastClaimsAgreesWithEncodingJSON(t *testing.T) {
	library := `{"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"5f8c7d2e-3b1a-4c6d-9e0f-123456789abc","nomad_task":"api","sub":"global:default:web:api","aud":"vault.io","iat":1700000000,"nbf":1700000000,"exp":1700003600,"jti":"abc","iss":"https://nomad.example"}`
	if _, ok := fastClaims(library); !ok {
		t.Fatalf("the fast path refused the library's own output: %s", library)
	}
	// With extra claims (an extra claims policy), as the library writes them.
	extra := `{"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"a","nomad_task":"api","sub":"spiffe://example.org/x","aud":["a","b"],"iat":1,"nbf":1,"exp":2,"jti":"j","extra_claims":{"dc":"dc:dc1","owner":"team-a"}}`
	if c, ok := fastClaims(extra); !ok {
		t.Fatalf("the fast path refused extra_claims: %s", extra)
	} else if !reflect.DeepEqual(c.ExtraClaims, map[string]string{"dc": "dc:dc1", "owner": "team-a"}) {
		t.Fatalf("fast extra_claims: %#v", c.ExtraClaims)
	}
	// A node token's claims, as the library writes them.
	node := `{"nomad_node_id":"da86421c-7de9-85e4-2f50-3b2bf95102c1","nomad_node_pool":"default","nomad_node_class":"gpu","nomad_node_datacenter":"dc1","sub":"node:global:default:da86421c-7de9-85e4-2f50-3b2bf95102c1:default","aud":"nomadproject.io","iat":1700000000,"nbf":1700000000,"exp":1700086400,"jti":"j"}`
	if c, ok := fastClaims(node); !ok {
		t.Fatalf("the fast path refused a node token's claims: %s", node)
	} else if !c.IsNode() || c.NodeID != "da86421c-7de9-85e4-2f50-3b2bf95102c1" || c.NodePool != "default" ||
		c.NodeClass != "gpu" || c.NodeDatacenter != "dc1" || c.AllocationID != "" {
		t.Fatalf("fast node claims: %+v", c)
	}
	// Nomad 2.x's claims for the logins, in the library's (Nomad's) order.
	exchange := `{"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"a","nomad_task":"api","consul_namespace":"web-team","vault_namespace":"engineering/web","vault_role":"nomad-web","sub":"s","aud":"vault.io","jti":"j"}`
	if c, ok := fastClaims(exchange); !ok {
		t.Fatalf("the fast path refused the exchange claims: %s", exchange)
	} else if c.ConsulNamespace != "web-team" || c.VaultNamespace != "engineering/web" || c.VaultRole != "nomad-web" {
		t.Fatalf("fast exchange claims: %+v", c)
	}
	cases := []string{
		library,
		exchange,
		`{"vault_role":"r","vault_role":"s"}`,
		`{"vault_role":null}`,
		`{"vault_namespace":1}`,
		`{"consul_namespace":"\u0041"}`,
		`{"Vault_Role":"r"}`,
		extra,
		node,
		`{"nomad_node_id":"n1","nomad_node_pool":"default","nomad_node_datacenter":"dc1","sub":"node:global:default:n1:default"}`,
		`{"nomad_node_id":"n1","nomad_node_id":"n2"}`,
		`{"nomad_node_class":"gpu"}`,
		`{"nomad_node_id":null}`,
		`{"nomad_node_id":1}`,
		`{"nomad_node_pool":"\u0041"}`,
		`{"nomad_node_datacenter":["dc1"]}`,
		`{"nomad_node_id":"n1","nomad_allocation_id":"a1"}`,
		`{"Nomad_Node_ID":"n1"}`,
		`{"extra_claims":{}}`,
		`{"extra_claims":{"a":"x"}}`,
		`{"extra_claims":{"a":"x","b":""},"sub":"s"}`,
		`{"extra_claims":null}`,
		`{"extra_claims":{"a":"x","a":"y"}}`,
		`{"extra_claims":{"a":"x"},"extra_claims":{"b":"y"}}`,
		`{"extra_claims":{"a":1}}`,
		`{"extra_claims":{"a":null}}`,
		`{"extra_claims":{"a":"\u0041"}}`,
		`{"extra_claims":{"a":"x",}}`,
		`{"extra_claims":{"a":"x"`,
		`{"extra_claims":{"a" :"x"}}`,
		`{"extra_claims":{"a":"x"}`,
		`{"extra_claims":{,}}`,
		`{"extra_claims":{"a"}}`,
		`{"extra_claims":["a"]}`,
		`{"extra_claims":"a"}`,
		`{"Extra_Claims":{"a":"x"}}`,
		`{"extra_claims":{"a":{"b":"c"}}}`,
		`{}`,
		`{"aud":["a","b"],"exp":-5}`,
		`{"aud":[]}`,
		`{"sub":"a\"b"}`,
		`{"sub":"\u00e9"}`,
		`{"sub":null}`,
		`{"sub":"x","sub":"y"}`,
		`{"exp":01}`,
		`{"exp":1.5}`,
		`{"exp":99999999999999999999}`,
		`{"exp":1e3}`,
		`{"unknown":1}`,
		`{"nomad_service":"s","cnf":{"jwk":{"kty":"OKP","crv":"Ed25519","x":"AAAA"}}}`,
		`{ "sub":"x"}`,
		`{"sub":"x"} `,
		`{"sub":"x"`,
		`{"sub":"x",}`,
		`{"aud":"a","aud":"b"}`,
		`{"aud":["a",]}`,
		"{\"sub\":\"\xff\"}",
		`[]`,
		``,
		`{"iat":-0}`,
		`{"iat":-}`,
	}
	for _, in := range cases {
		got, gotErr := decodeClaimsString(in)
		want, wantErr := decodeClaims([]byte(in))
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%q: error %v, encoding/json says %v", in, gotErr, wantErr)
			continue
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, encoding/json says %+v", in, got, want)
		}
	}
}

// FuzzFastClaims: the same agreement on arbitrary input (go test -fuzz).
func FuzzFastClaims(f *testing.F) {
	f.Add(`{"sub":"x","aud":["a"],"exp":1}`)
	f.Add(`{"sub":"x","extra_claims":{"a":"b","c":"d"}}`)
	f.Add(`{"nomad_node_id":"n","nomad_node_pool":"p","nomad_node_class":"c","nomad_node_datacenter":"d"}`)
	f.Fuzz(func(t *testing.T, in string) {
		got, gotErr := decodeClaimsString(in)
		want, wantErr := decodeClaims([]byte(in))
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: error %v, encoding/json says %v", in, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v, encoding/json says %+v", in, got, want)
		}
	})
}
