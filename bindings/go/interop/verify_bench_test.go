package interop

import (
	"crypto/ed25519"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/workload-identity/workload-identity/bindings/go/wid"
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
	if _, err := v.Verify(f.token, at(now)); err != nil {
		b.Fatal(err)
	}
	if _, _, err := joseVerify(f.token, jose.EdDSA, f.key.Key, "vault.io", now); err != nil {
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
		if _, err := v.Verify(f.token, at(now)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRawC: the same token through the C ABI alone (wid_verify
// with the claims JSON wanted and freed, a C lookup answering "live", one
// cgo crossing), over the fixture's keys loaded into their own keyring. The
// binding's own cost is BenchmarkVerifyBinding minus this.
func BenchmarkVerifyRawC(b *testing.B) {
	f, _ := benchFixture(b)
	path := filepath.Join(b.TempDir(), "keyring.json")
	if err := f.kr.Save(path); err != nil {
		b.Fatal(err)
	}
	r, err := newRawVerifier(path, "vault.io")
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	token := []byte(f.token)
	if err := r.verify(token, now); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := r.verify(token, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyGoJose: go-jose v4 ParseSigned (the one algorithm
// allowed) + Claims (signature) + Validate (audience, time) of the same
// token with the same key.
func BenchmarkVerifyGoJose(b *testing.B) {
	f, _ := benchFixture(b)
	benchGoJoseVerify(b, f.token, jose.EdDSA, f.key.Key)
}

func benchGoJoseVerify(b *testing.B, token string, alg jose.SignatureAlgorithm, key interface{}) {
	expected := jwt.Expected{AnyAudience: jwt.Audience{"vault.io"}, Time: time.Unix(now, 0)}
	algs := []jose.SignatureAlgorithm{alg}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tok, err := jwt.ParseSigned(token, algs)
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
			if _, err := v.Verify(f.token, at(now)); err != nil {
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
		tok, err := f.kr.Issue(request("vault.io"), at(now))
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = tok
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for _, err := range v.VerifyBatch(tokens, at(now)) {
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
		if _, err := f.kr.Issue(req, at(now)); err != nil {
			b.Fatal(err)
		}
	}
}

// algBenchFixture is newAlgFixture with a verifier, both sides checked to
// accept alg's token first.
func algBenchFixture(b *testing.B, alg wid.Alg) (*algFixture, *wid.Verifier) {
	f := newAlgFixture(b)
	v, err := wid.NewVerifier(f.kr, "vault.io", trivialStore, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(v.Close)
	if _, err := v.Verify(f.tokens[alg], at(now)); err != nil {
		b.Fatal(err)
	}
	if _, _, err := joseVerify(f.tokens[alg], jose.SignatureAlgorithm(alg.String()), f.keys[alg].Key, "vault.io", now); err != nil {
		b.Fatal(err)
	}
	return f, v
}

func benchVerifyBinding(b *testing.B, alg wid.Alg) {
	f, v := algBenchFixture(b, alg)
	token := f.tokens[alg]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.Verify(token, at(now)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyBindingES256, ...RS256: BenchmarkVerifyBinding for a token
// signed by the keyring's ES256 (RS256, 2048-bit) key.
func BenchmarkVerifyBindingES256(b *testing.B) { benchVerifyBinding(b, wid.AlgES256) }
func BenchmarkVerifyBindingRS256(b *testing.B) { benchVerifyBinding(b, wid.AlgRS256) }

// BenchmarkVerifyGoJoseES256, ...RS256: BenchmarkVerifyGoJose for the same
// tokens, with the keys of the exported JWKS.
func BenchmarkVerifyGoJoseES256(b *testing.B) {
	f, _ := algBenchFixture(b, wid.AlgES256)
	benchGoJoseVerify(b, f.tokens[wid.AlgES256], jose.ES256, f.keys[wid.AlgES256].Key)
}

func BenchmarkVerifyGoJoseRS256(b *testing.B) {
	f, _ := algBenchFixture(b, wid.AlgRS256)
	benchGoJoseVerify(b, f.tokens[wid.AlgRS256], jose.RS256, f.keys[wid.AlgRS256].Key)
}

func benchIssueBinding(b *testing.B, alg wid.Alg) {
	f, _ := algBenchFixture(b, alg)
	req := request("vault.io")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.kr.IssueAlg(alg, req, "", at(now)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIssueBindingES256, ...RS256: Keyring.IssueAlg (go-msgpack
// encoding + signing).
func BenchmarkIssueBindingES256(b *testing.B) { benchIssueBinding(b, wid.AlgES256) }
func BenchmarkIssueBindingRS256(b *testing.B) { benchIssueBinding(b, wid.AlgRS256) }

// benchSignGoJose: a go-jose signer (made once) signs the same claims per
// iteration: JSON encoding + signing + compact serialization.
func benchSignGoJose(b *testing.B, alg jose.SignatureAlgorithm, key interface{}) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "key-1"))
	if err != nil {
		b.Fatal(err)
	}
	registered, private := goJoseClaims()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := jwt.Signed(signer).Claims(registered).Claims(private).Serialize(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignGoJoseEdDSA, ...ES256, ...RS256: go-jose v4 signing, beside
// BenchmarkIssueBinding*.
func BenchmarkSignGoJoseEdDSA(b *testing.B) {
	benchSignGoJose(b, jose.EdDSA, ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)))
}

func BenchmarkSignGoJoseES256(b *testing.B) {
	benchSignGoJose(b, jose.ES256, deriveP256(b, esMaterial(), esKid))
}

func BenchmarkSignGoJoseRS256(b *testing.B) { benchSignGoJose(b, jose.RS256, testRSAKey(b)) }
