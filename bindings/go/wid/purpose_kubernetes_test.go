package wid

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Kubernetes keys through the binding: ES256 and RS256 only, in their own
// key set, never in the JWKS or the WIT key set.
func TestKubernetesKeysAreTheirOwnPurpose(t *testing.T) {
	kr, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	now := time.Unix(1_800_000_000, 0)
	_, err = kr.RotatePurpose(PurposeKubernetes, AlgEdDSA, now)
	e := wantCode(t, err, ErrInvalidArgument)
	if !strings.Contains(e.Error(), "ES256 or RS256") {
		t.Fatalf("EdDSA refused without saying which algorithms: %v", e)
	}
	kid, err := kr.RotatePurpose(PurposeKubernetes, AlgES256, now)
	if err != nil {
		t.Fatal(err)
	}
	count := func(p KeyPurpose) (n int, has bool) {
		t.Helper()
		raw, err := kr.JWKSPurpose(p)
		if err != nil {
			t.Fatal(err)
		}
		var set struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(raw, &set); err != nil {
			t.Fatal(err)
		}
		for _, k := range set.Keys {
			has = has || k.Kid == kid
		}
		return len(set.Keys), has
	}
	if n, has := count(PurposeKubernetes); n != 1 || !has {
		t.Fatalf("kubernetes key set: %d keys, holds %s: %v", n, kid, has)
	}
	for _, p := range []KeyPurpose{PurposeBearer, PurposeWIT} {
		if n, _ := count(p); n != 0 {
			t.Fatalf("purpose %d publishes %d keys: a kubernetes key leaked", p, n)
		}
	}
}
