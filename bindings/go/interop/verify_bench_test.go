package interop

import (
	"testing"
	"time"

	"gopkg.in/square/go-jose.v2/jwt"

	"workload-identity/wid"
)

// trivialStore is the cheapest StateStore: every allocation is live.
var trivialStore = wid.StateStoreFunc(func(string, wid.Consistency) (wid.AllocState, error) {
	return wid.Live, nil
})

func benchFixture(b *testing.B) (*fixture, *wid.Verifier) {
	f := newFixture(b, 1, wid.DerivationHKDFV1)
	v, err := wid.NewVerifier(f.kr, "vault.io", trivialStore, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(v.Close)
	if _, err := v.Verify(f.token, now); err != nil {
		b.Fatal(err)
	}
	if _, _, err := joseVerify(f.token, f.key.Key, "vault.io", now); err != nil {
		b.Fatal(err)
	}
	return f, v
}

// BenchmarkVerifyBinding: wid.Verifier.Verify (signature, claims, a Go
// StateStore callback, claims JSON decoded into wid.Claims).
func BenchmarkVerifyBinding(b *testing.B) {
	f, v := benchFixture(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.Verify(f.token, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyGoJose: go-jose v2 ParseSigned + Claims (signature) +
// Validate (audience, time) of the same token with the same key.
func BenchmarkVerifyGoJose(b *testing.B) {
	f, _ := benchFixture(b)
	key := f.key.Key
	expected := jwt.Expected{Audience: jwt.Audience{"vault.io"}, Time: time.Unix(now, 0)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok, err := jwt.ParseSigned(f.token)
		if err != nil {
			b.Fatal(err)
		}
		var claims jwt.Claims
		var nomad nomadClaims
		if err := tok.Claims(key, &claims, &nomad); err != nil {
			b.Fatal(err)
		}
		if err := claims.Validate(expected); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyBindingParallel: Verify from GOMAXPROCS goroutines.
func BenchmarkVerifyBindingParallel(b *testing.B) {
	f, v := benchFixture(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.Verify(f.token, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkVerifyBindingBatch: VerifyBatch of 64 tokens; ns/token is the
// cost per token.
func BenchmarkVerifyBindingBatch(b *testing.B) {
	f, v := benchFixture(b)
	const n = 64
	tokens := make([]string, n)
	for i := range tokens {
		tok, err := f.kr.Issue(request("vault.io"), now)
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = tok
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, err := range v.VerifyBatch(tokens, now) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*n), "ns/token")
}

// BenchmarkIssueBinding: Keyring.Issue (go-msgpack encoding + signing).
func BenchmarkIssueBinding(b *testing.B) {
	f, _ := benchFixture(b)
	req := request("vault.io")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.kr.Issue(req, now); err != nil {
			b.Fatal(err)
		}
	}
}
