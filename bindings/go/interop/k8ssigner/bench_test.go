package k8ssigner

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkSignOverSocket is kube-apiserver's cost of a token: one Sign
// call over the Unix socket (gRPC, one connection, calls in sequence), with
// the p50 and p99 latencies of the calls reported beside ns/op, for each
// algorithm the purpose allows.
func BenchmarkSignOverSocket(b *testing.B) {
	for _, alg := range []string{"ES256", "RS256"} {
		b.Run(alg, func(b *testing.B) { benchSign(b, alg) })
	}
}

func benchSign(b *testing.B, alg string) {
	dir := shortDir(b)
	st := newKeystore(b, dir, "kubernetes", "1h", alg)
	s := startSigner(b, st, testIssuer, filepath.Join(dir, "s.sock"), "--alg", alg)
	raw, err := json.Marshal(saClaims(testIssuer, 30*time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	claims := base64.RawURLEncoding.EncodeToString(raw)
	if _, err := s.signRaw(claims); err != nil { // connect, warm up
		b.Fatalf("Sign: %v; stderr:\n%s", err, s.stderr.String())
	}
	durations := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := s.signRaw(claims); err != nil {
			b.Fatalf("Sign %d: %v", i, err)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	pct := func(p float64) float64 {
		return float64(durations[int(p*float64(len(durations)-1))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
}
