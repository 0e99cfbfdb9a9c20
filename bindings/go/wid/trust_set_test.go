package wid

import (
	"errors"
	"strings"
	"testing"
)

// A trust set routes each token to the issuer it claims and names it; a key
// of one issuer never verifies a token claiming another (same kid, other
// material); an unknown issuer is ErrIssuerMismatch naming it; a store's
// error is the failure's cause; builds that cannot route are refused.
func TestTrustSet(t *testing.T) {
	east := newKeyring(t)
	west, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(west.Close)
	if err := west.Insert("key-1", material(8), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	const e, w = "https://east.example", "https://west.example"
	storeErr := errors.New("store down")
	broken := StateStoreFunc(func(string, Consistency) (AllocState, error) { return Missing, storeErr })
	ts, err := NewTrustSet([]TrustedIssuer{
		{Iss: e, Keyring: east, Audience: aud, Store: liveStore()},
		{Iss: w, Keyring: west, Audience: aud}, // foreign: no store
		{Iss: "https://broken.example", Keyring: east, Audience: aud, Store: broken},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	tok := func(kr *Keyring, iss string) string {
		s, err := kr.IssueWithIssuer(request(allocID, aud), iss, at(now))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		kr  *Keyring
		iss string
	}{{east, e}, {west, w}} {
		claims, issuer, err := ts.Verify(tok(c.kr, c.iss), at(now))
		if err != nil || issuer != c.iss || claims.AllocationID != allocID {
			t.Fatalf("%s: %v %q %+v", c.iss, err, issuer, claims)
		}
	}
	if _, _, err := ts.Verify(tok(west, e), at(now)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("west's key claiming east: want ErrBadSignature, got %v", err)
	}
	_, _, err = ts.Verify(tok(east, "https://evil.example"), at(now))
	if !errors.Is(err, ErrIssuerMismatch) || !strings.Contains(err.Error(), "https://evil.example") {
		t.Fatalf("an unknown issuer: want ErrIssuerMismatch naming it, got %v", err)
	}
	if _, _, err := ts.Verify(tok(east, "https://broken.example"), at(now)); !errors.Is(err, storeErr) {
		t.Fatalf("a failing store: want its error as the cause, got %v", err)
	}
	if _, err := NewTrustSet(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no issuer: %v", err)
	}
	if _, err := NewTrustSet([]TrustedIssuer{{Iss: e, TrustDomain: "td", Keyring: east, Audience: aud}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("both Iss and TrustDomain: %v", err)
	}
	if _, err := NewTrustSet([]TrustedIssuer{{Iss: e, Keyring: east, Audience: aud}, {Iss: e, Keyring: west, Audience: aud}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("two issuers under one iss: %v", err)
	}
	ts.Close()
	if _, _, err := ts.Verify(tok(east, e), at(now)); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("after Close: %v", err)
	}
}
