package wid

// Fuzz targets for what the binding decodes from the C library and from the
// wire (go test -fuzz; the seeds are under testdata/fuzz/<target>/: the
// library's own output, and the committed msgpack vectors). The C side is
// not instrumented; everything these targets call is Go.
// Health, Restore and Explain decode the library's documents with
// decodeHealth, decodeRestoreReport and decodeExplanation (library_json.go),
// which the targets call.

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// FuzzDecodeClaims: decodeClaimsString (Verify's and TrustSet.Verify's
// decoder of the library's claims JSON) never panics; it fails on anything
// that is not JSON, with a ResultDecodeError and no claims; whatever it
// decodes marshals (Claims.MarshalJSON) back to JSON that decodes to the
// same claims, through the fast path and encoding/json alike.
func FuzzDecodeClaims(f *testing.F) {
	f.Add(`{"nomad_namespace":"default","nomad_job_id":"web","nomad_allocation_id":"a","nomad_task":"server","sub":"s","aud":"vault.io","iat":1700000000,"nbf":1700000000,"exp":1700003600,"jti":"j"}`)
	f.Add(`{"aud":[],"extra_claims":{},"cnf":{"jwk":null},"exp":-62135596800}`)
	f.Add(`{"sub":"x"`)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := decodeClaimsString(raw)
		if err != nil {
			wantDecodeError(t, err)
			if c != nil {
				t.Fatalf("an error (%v) with claims %+v", err, c)
			}
			return
		}
		if c == nil {
			t.Fatal("no error and no claims")
		}
		if !json.Valid([]byte(raw)) {
			t.Fatalf("decoded claims from input that is not JSON: %q -> %+v", raw, c)
		}
		again, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("Claims.MarshalJSON: %v (claims %+v)", err, c)
		}
		fast, err := decodeClaimsString(string(again))
		if err != nil {
			t.Fatalf("the claims' own JSON does not decode: %v\n%s", err, again)
		}
		slow, err := decodeClaims(again)
		if err != nil {
			t.Fatalf("encoding/json refuses the claims' own JSON: %v\n%s", err, again)
		}
		if !sameClaims(c, fast) || !sameClaims(fast, slow) {
			t.Fatalf("round trip:\n in  %q\n got %+v\n out %s\n back %+v\n json %+v", raw, c, again, fast, slow)
		}
	})
}

// sameClaims is c == d up to what JSON cannot tell apart: times as instants
// (the zero time.Time and the NumericDate -62135596800 are one), and an
// empty aud or extra_claims as absent (omitempty).
func sameClaims(c, d *Claims) bool {
	norm := func(c *Claims) Claims {
		n := *c
		n.IssuedAt, n.NotBefore, n.Expires = time.Time{}, time.Time{}, time.Time{}
		if len(n.Audience) == 0 {
			n.Audience = nil
		}
		if len(n.ExtraClaims) == 0 {
			n.ExtraClaims = nil
		}
		return n
	}
	return c.IssuedAt.Equal(d.IssuedAt) && c.NotBefore.Equal(d.NotBefore) && c.Expires.Equal(d.Expires) &&
		reflect.DeepEqual(norm(c), norm(d))
}

func wantDecodeError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != ResultDecodeError || e.Message == "" {
		t.Fatalf("want an *Error with ResultDecodeError and a message, got %#v", err)
	}
}

// FuzzExplanationJSON: Explain's decoding of the library's explanation
// never panics, fails on what is not JSON, and what it decodes is
// consistent the way Explain's callers rely on: Failed is the first step
// that did not pass (nil when all did), Err is nil exactly when Accepted,
// else an *Error with the verdict's code and the failed step's detail; and
// it marshals back to JSON that decodes to the same Explanation.
func FuzzExplanationJSON(f *testing.F) {
	f.Add([]byte(`{"accepted":false,"code":"WID_RESULT_EXPIRED","result":14,"steps":[{"detail":"ok","name":"length","passed":true},{"detail":"token expired","name":"times","passed":false}]}`))
	f.Add([]byte(`{"accepted":true,"result":0,"steps":null}`))
	f.Add([]byte(`{"result":-1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		x, err := decodeExplanation(raw)
		if err != nil {
			wantDecodeError(t, err)
			if x != nil {
				t.Fatalf("an error (%v) with an explanation %+v", err, x)
			}
			return
		}
		if x == nil {
			t.Fatal("no error and no explanation")
		}
		if !json.Valid(raw) {
			t.Fatalf("decoded an explanation from input that is not JSON: %q -> %+v", raw, x)
		}
		var first *VerificationStep
		for i := range x.Steps {
			if !x.Steps[i].Passed {
				first = &x.Steps[i]
				break
			}
		}
		if got := x.Failed(); got != first {
			t.Fatalf("Failed() = %+v, want the first failed step %+v", got, first)
		}
		if x.Accepted != (x.Code == ResultOK) {
			t.Fatalf("decoded a verdict at odds with itself: accepted %v, result %v", x.Accepted, x.Code)
		}
		verdict := x.Err()
		if x.Accepted != (verdict == nil) {
			t.Fatalf("Accepted %v but Err() = %v", x.Accepted, verdict)
		}
		if verdict != nil {
			var e *Error
			if !errors.As(verdict, &e) || e.Code != x.Code || !errors.Is(verdict, &Error{Code: x.Code}) {
				t.Fatalf("Err() = %#v, want an *Error with code %v", verdict, x.Code)
			}
			want := ""
			if first != nil {
				want = first.Detail
			}
			if e.Message != want {
				t.Fatalf("Err() message %q, failed step %+v", e.Message, first)
			}
		}
		again, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeExplanation(again)
		if err != nil || !reflect.DeepEqual(x, back) {
			t.Fatalf("round trip: %v\n in  %+v\n out %s\n back %+v", err, x, again, back)
		}
	})
}

// FuzzHealthJSON: Health's decoding of wid_identity_manager_health_json
// never panics, fails on what is not JSON with a ResultDecodeError and a
// zero IdentityManagerHealth, keeps every identity and exchange in order
// with its times (absent: the zero time.Time), and re-encoded as the
// library's document decodes to the same health.
func FuzzHealthJSON(f *testing.F) {
	f.Add([]byte(`{"alloc_id":"a","at_risk":false,"exchanges":[{"failures":0,"has_secret":true,"held_back":false,"identity":"vault_default","last_error":null,"name":"vault","next_attempt_ms":1700000600000,"workload":"server"}],"identities":[{"expires_at":1700003600,"expires_in_ms":3600000,"identity":"vault_default","valid":true,"workload":"server"}],"last_sign_error":null,"next_signing_ms":1700001917631,"sign_failures":0}`))
	f.Add([]byte(`{"identities":[{"expires_at":null,"expires_in_ms":-1}],"exchanges":null}`))
	f.Add([]byte(`{"sign_failures":-1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := decodeHealth(raw)
		if err != nil {
			wantDecodeError(t, err)
			if !reflect.DeepEqual(h, IdentityManagerHealth{}) {
				t.Fatalf("an error (%v) with health %+v", err, h)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("decoded health from input that is not JSON: %q -> %+v", raw, h)
		}
		var j healthJSON
		if err := json.Unmarshal(raw, &j); err != nil {
			t.Fatal(err)
		}
		if len(h.Identities) != len(j.Identities) || len(h.Exchanges) != len(j.Exchanges) || h.AllocID != j.AllocID ||
			h.AtRisk != j.AtRisk || h.SignFailures != j.SignFailures || h.LastSignError != str(j.LastSignError) ||
			!sameMs(h.NextSigning, j.NextSigningMs) {
			t.Fatalf("health %+v from %s", h, raw)
		}
		inRange := true // every expires_in_ms a time.Duration can hold
		for i, id := range j.Identities {
			got := h.Identities[i]
			if got.Identity != (IdentityID{Workload: id.Workload, Name: id.Identity}) || got.Valid != id.Valid ||
				id.ExpiresAt == nil && !got.ExpiresAt.IsZero() ||
				id.ExpiresAt != nil && got.ExpiresAt.Unix() != *id.ExpiresAt ||
				id.ExpiresInMs == nil && got.ExpiresIn != 0 {
				t.Fatalf("identity %d: %+v from %s", i, got, raw)
			}
			if id.ExpiresInMs != nil {
				if ms := *id.ExpiresInMs; ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
					// Beyond a Duration's ~292 years: saturated, never wrapped.
					inRange = false // the round trip below would not give these ms back
					if (ms > 0 && got.ExpiresIn != math.MaxInt64) || (ms < 0 && got.ExpiresIn != math.MinInt64) {
						t.Fatalf("identity %d: ExpiresIn %v from %d ms, want it saturated", i, got.ExpiresIn, ms)
					}
				} else if got.ExpiresIn != time.Duration(ms)*time.Millisecond {
					t.Fatalf("identity %d: ExpiresIn %v from %d ms", i, got.ExpiresIn, ms)
				}
			}
		}
		for i, x := range j.Exchanges {
			got := h.Exchanges[i]
			if got.Name != x.Name || got.Identity != (IdentityID{Workload: x.Workload, Name: x.Identity}) ||
				got.HasSecret != x.HasSecret || got.HeldBack != x.HeldBack || got.Failures != x.Failures ||
				got.LastError != str(x.LastError) || !sameMs(got.NextAttempt, x.NextAttemptMs) {
				t.Fatalf("exchange %d: %+v from %s", i, got, raw)
			}
		}
		if !inRange {
			return
		}
		back, err := decodeHealth(encodeHealth(t, h))
		if err != nil || !sameHealth(h, back) {
			t.Fatalf("round trip: %v\n in  %+v\n back %+v", err, h, back)
		}
	})
}

// sameMs: t is the Unix milliseconds *ms, or the zero time for nil.
func sameMs(t time.Time, ms *int64) bool {
	if ms == nil {
		return t.IsZero()
	}
	return t.UnixMilli() == *ms
}

// encodeHealth writes h as wid_identity_manager_health_json does.
func encodeHealth(t *testing.T, h IdentityManagerHealth) []byte {
	t.Helper()
	ms := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		n := t.UnixMilli()
		return &n
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	var j healthJSON
	j.AllocID, j.SignFailures, j.LastSignError, j.NextSigningMs, j.AtRisk =
		h.AllocID, h.SignFailures, opt(h.LastSignError), ms(h.NextSigning), h.AtRisk
	for _, id := range h.Identities {
		var at, in *int64
		if !id.ExpiresAt.IsZero() {
			s := id.ExpiresAt.Unix()
			at = &s
		}
		if id.ExpiresIn != 0 {
			n := id.ExpiresIn.Milliseconds()
			in = &n
		}
		j.Identities = append(j.Identities, struct {
			Workload    string `json:"workload"`
			Identity    string `json:"identity"`
			Valid       bool   `json:"valid"`
			ExpiresAt   *int64 `json:"expires_at"`
			ExpiresInMs *int64 `json:"expires_in_ms"`
		}{id.Identity.Workload, id.Identity.Name, id.Valid, at, in})
	}
	for _, x := range h.Exchanges {
		j.Exchanges = append(j.Exchanges, struct {
			Name          string  `json:"name"`
			Workload      string  `json:"workload"`
			Identity      string  `json:"identity"`
			HasSecret     bool    `json:"has_secret"`
			HeldBack      bool    `json:"held_back"`
			Failures      uint32  `json:"failures"`
			NextAttemptMs *int64  `json:"next_attempt_ms"`
			LastError     *string `json:"last_error"`
		}{x.Name, x.Identity.Workload, x.Identity.Name, x.HasSecret, x.HeldBack, x.Failures, ms(x.NextAttempt), opt(x.LastError)})
	}
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameHealth is h == g with times compared as instants.
func sameHealth(h, g IdentityManagerHealth) bool {
	if !h.NextSigning.Equal(g.NextSigning) || len(h.Identities) != len(g.Identities) || len(h.Exchanges) != len(g.Exchanges) {
		return false
	}
	for i := range h.Identities {
		a, b := h.Identities[i], g.Identities[i]
		if !a.ExpiresAt.Equal(b.ExpiresAt) {
			return false
		}
		a.ExpiresAt, b.ExpiresAt = time.Time{}, time.Time{}
		if a != b {
			return false
		}
	}
	for i := range h.Exchanges {
		a, b := h.Exchanges[i], g.Exchanges[i]
		if !a.NextAttempt.Equal(b.NextAttempt) {
			return false
		}
		a.NextAttempt, b.NextAttempt = time.Time{}, time.Time{}
		if a != b {
			return false
		}
	}
	h.NextSigning, g.NextSigning = time.Time{}, time.Time{}
	h.Identities, g.Identities, h.Exchanges, g.Exchanges = nil, nil, nil, nil
	return reflect.DeepEqual(h, g)
}

// FuzzRestoreReportJSON: Restore's decoding of the library's report never
// panics, fails on what is not JSON with a ResultDecodeError and a zero
// report, and what it decodes marshals back to the same report.
func FuzzRestoreReportJSON(f *testing.F) {
	f.Add([]byte(`{"reason":"","rederived":["vault"],"reused":true}`))
	f.Add([]byte(`{"reused":"yes"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := decodeRestoreReport(raw)
		if err != nil {
			wantDecodeError(t, err)
			if !reflect.DeepEqual(r, RestoreReport{}) {
				t.Fatalf("an error (%v) with a report %+v", err, r)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("decoded a report from input that is not JSON: %q -> %+v", raw, r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeRestoreReport(again)
		if err != nil || !reflect.DeepEqual(r, back) {
			t.Fatalf("round trip: %v\n in  %+v\n out %s\n back %+v", err, r, again, back)
		}
	})
}

// FuzzIssueRequestRoundTrip: DecodeIssueRequest of arbitrary bytes never
// panics and returns a request exactly when it returns no error; a request
// it decodes encodes (EncodeIssueRequest) to bytes that decode to an equal
// request, and no strict prefix of those bytes decodes.
func FuzzIssueRequestRoundTrip(f *testing.F) {
	if b, err := EncodeIssueRequest(request(allocID, aud)); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0x80}) // {}
	f.Add([]byte{0xc0}) // nil
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := DecodeIssueRequest(raw)
		if (req == nil) == (err == nil) {
			t.Fatalf("request %+v with error %v", req, err)
		}
		if err != nil {
			return
		}
		b, err := EncodeIssueRequest(req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v (%+v)", err, req)
		}
		back, err := DecodeIssueRequest(b)
		if err != nil || !reflect.DeepEqual(req, back) {
			t.Fatalf("round trip: %v\n in  %#v\n back %#v", err, req, back)
		}
		wantPrefixesRefused(t, b, func(p []byte) error { _, err := DecodeIssueRequest(p); return err })
	})
}

// FuzzNodeIdentityRequestRoundTrip is FuzzIssueRequestRoundTrip for
// DecodeNodeIdentityRequest and EncodeNodeIdentityRequest.
func FuzzNodeIdentityRequestRoundTrip(f *testing.F) {
	if b, err := EncodeNodeIdentityRequest(&NodeIdentityRequest{Region: "global", Audience: []string{"nomadproject.io"},
		Node: &Node{ID: "n1", Datacenter: "dc1", NodePool: "default", Status: "ready"}, TTL: 24 * time.Hour}); err == nil {
		f.Add(b)
	}
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := DecodeNodeIdentityRequest(raw)
		if (req == nil) == (err == nil) {
			t.Fatalf("request %+v with error %v", req, err)
		}
		if err != nil {
			return
		}
		b, err := EncodeNodeIdentityRequest(req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v (%+v)", err, req)
		}
		back, err := DecodeNodeIdentityRequest(b)
		if err != nil || !reflect.DeepEqual(req, back) {
			t.Fatalf("round trip: %v\n in  %#v\n back %#v", err, req, back)
		}
		wantPrefixesRefused(t, b, func(p []byte) error { _, err := DecodeNodeIdentityRequest(p); return err })
	})
}

// wantPrefixesRefused: msgpack values are self-delimiting, so a strict
// prefix of a whole encoding is truncated input, and must be an error (a
// few cuts: every one would make the target quadratic).
func wantPrefixesRefused(t *testing.T, b []byte, decode func([]byte) error) {
	t.Helper()
	for _, n := range []int{0, 1, len(b) / 2, len(b) - 1} {
		if n < 0 || n >= len(b) {
			continue
		}
		if decode(b[:n]) == nil {
			t.Fatalf("the first %d of %d bytes decode: % x", n, len(b), b)
		}
	}
}
