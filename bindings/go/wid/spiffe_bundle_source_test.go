package wid

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const peerTD = "peer.example.org"

// bundleServer serves a SPIFFE bundle at /bundle on loopback and counts
// the requests.
type bundleServer struct {
	*httptest.Server
	mu   sync.Mutex
	body string
	hits int64
}

func newBundleServer(t testing.TB) *bundleServer {
	t.Helper()
	s := &bundleServer{body: `{"keys":[]}`}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bundle" {
			http.NotFound(w, r)
			return
		}
		atomic.AddInt64(&s.hits, 1)
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) set(body string) {
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

// peerBundle is kr's SPIFFE bundle (a 300 s refresh hint) with an
// x509-svid entry, as SPIRE's bundles carry, and spiffe_sequence seq (< 0:
// left out).
func peerBundle(t testing.TB, kr *Keyring, seq int64) string {
	t.Helper()
	raw, err := kr.SpiffeBundle(300 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var b map[string]interface{}
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		t.Fatal(err)
	}
	keys := b["keys"].([]interface{})
	jwt := keys[0].(map[string]interface{})
	if jwt["use"] != "jwt-svid" {
		t.Fatalf("bundle %s", raw)
	}
	b["keys"] = append(keys, map[string]interface{}{
		"kty": "EC", "crv": "P-256", "use": "x509-svid",
		"x": jwt["x"], "y": jwt["y"], "x5c": []string{"MIIB"},
	})
	delete(b, "spiffe_sequence")
	if seq >= 0 {
		b["spiffe_sequence"] = seq
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// peerKeyring is a keyring with one active ES256 key, "peer-es-1".
func peerKeyring(t testing.TB) *Keyring {
	t.Helper()
	kr := newKeyring(t)
	if err := kr.InsertAlg(AlgES256, "peer-es-1", material(21), DerivationHKDFV1, KeyStateActive, at(now-100)); err != nil {
		t.Fatal(err)
	}
	return kr
}

// jwtSVID is a JWT-SVID of peerTD that kr signs now (ES256).
func jwtSVID(t testing.TB, kr *Keyring) string {
	t.Helper()
	iss := newIssuer(t, kr, IssuerOptions{Alg: AlgES256, SpiffeTrustDomain: peerTD})
	tok, err := iss.Issue(request(allocID, aud), at(now))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func newBundleSource(t testing.TB, url string, opts *RemoteJWKSOptions) *SpiffeBundleSource {
	t.Helper()
	s, err := NewSpiffeBundleSource(peerTD, url, opts)
	if err != nil {
		t.Fatalf("NewSpiffeBundleSource: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// The bundle's jwt-svid key verifies the peer's JWT-SVIDs in a trust set
// (its x509-svid entry skipped); a rotation with a higher sequence is
// followed; a lower sequence, or none once one was held, is refused with
// the held keys kept and counted, until ResetSequence.
func TestSpiffeBundleSourceVerifiesAndRefusesRollbacks(t *testing.T) {
	peer := peerKeyring(t)
	oldTok := jwtSVID(t, peer)
	oldBundle, oldUnsequenced := peerBundle(t, peer, 5), peerBundle(t, peer, -1)
	srv := newBundleServer(t)
	srv.set(oldBundle)
	src := newBundleSource(t, srv.URL+"/bundle", &RemoteJWKSOptions{AllowHTTPLoopback: true})
	if src.TrustDomain() != peerTD {
		t.Errorf("TrustDomain %q", src.TrustDomain())
	}
	st, err := src.Stats()
	if err != nil || st.Fetches != 0 || st.Keys != 0 || st.HasSequence || st.TrustDomain != peerTD || st.BundleURL != srv.URL+"/bundle" {
		t.Fatalf("before the first fetch: %+v %v", st, err)
	}

	rep, err := src.Refresh()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Keys) != 1 || rep.Keys[0] != "peer-es-1" || rep.Skipped != 1 || !rep.HasSequence || rep.Sequence != 5 ||
		!rep.HasRefreshHint || rep.RefreshHint != 300*time.Second || rep.NextRefreshIn != 300*time.Second {
		t.Fatalf("report %+v", rep)
	}
	kr, err := src.Keyring()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kr.Close)
	ts, err := NewTrustSet([]TrustedIssuer{{TrustDomain: peerTD, Keyring: kr, Audience: aud, Store: liveStore()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	verify := func(tok string) error {
		t.Helper()
		c, issuer, err := ts.Verify(tok, at(now))
		if err == nil && (issuer != "spiffe://"+peerTD || !strings.HasPrefix(c.Subject, "spiffe://"+peerTD+"/")) {
			t.Errorf("issuer %q, claims %+v", issuer, c)
		}
		return err
	}
	if err := verify(oldTok); err != nil {
		t.Fatalf("the peer's JWT-SVID: %v", err)
	}

	// The peer rotates and raises its sequence.
	if _, err := peer.RotateAlg(AlgES256, at(now-10)); err != nil {
		t.Fatal(err)
	}
	newTok := jwtSVID(t, peer)
	srv.set(peerBundle(t, peer, 7))
	if rep, err := src.Refresh(); err != nil || rep.Sequence != 7 || len(rep.Added) != 1 {
		t.Fatalf("rotation: %+v %v", rep, err)
	}
	if err := verify(newTok); err != nil {
		t.Fatalf("the rotated key: %v", err)
	}

	// Rollbacks: a lower sequence, then none at all.
	for i, body := range []string{oldBundle, oldUnsequenced} {
		srv.set(body)
		_, err := src.Refresh()
		wantCode(t, err, ErrDecodeError)
		st, _ := src.Stats()
		if !st.HasSequence || st.Sequence != 7 || st.SequenceRefusals != uint64(i+1) || st.Keys != 2 || !st.Stale || st.LastError == "" {
			t.Errorf("after rollback %d: %+v", i, st)
		}
		if err := verify(newTok); err != nil {
			t.Errorf("after rollback %d: %v", i, err)
		}
	}

	// The operator's reset: the unsequenced bundle is taken.
	if prev, had, err := src.ResetSequence(); err != nil || !had || prev != 7 {
		t.Fatalf("ResetSequence: %d %v %v", prev, had, err)
	}
	rep, err = src.Refresh()
	if err != nil || rep.HasSequence || len(rep.Keys) != 1 || len(rep.Removed) != 1 {
		t.Fatalf("after the reset: %+v %v", rep, err)
	}
	if err := verify(oldTok); err != nil {
		t.Errorf("after the reset: %v", err)
	}
	if prev, had, err := src.ResetSequence(); err != nil || had || prev != 0 {
		t.Errorf("ResetSequence with none held: %d %v %v", prev, had, err)
	}

	// Closed: the keyring keeps its keys; the source refuses calls.
	src.Close()
	src.Close()
	if err := verify(oldTok); err != nil {
		t.Errorf("after Close: %v", err)
	}
	_, err = src.Refresh()
	wantCode(t, err, ErrNullArgument)
	_, _, err = src.ResetSequence()
	wantCode(t, err, ErrNullArgument)
	_, err = src.Stats()
	wantCode(t, err, ErrNullArgument)
	_, err = src.Keyring()
	wantCode(t, err, ErrNullArgument)
	wantCode(t, src.StartRefresher(), ErrNullArgument)
}

func TestSpiffeBundleSourceRefresher(t *testing.T) {
	srv := newBundleServer(t)
	srv.set(peerBundle(t, peerKeyring(t), 1))
	src := newBundleSource(t, srv.URL+"/bundle", &RemoteJWKSOptions{
		AllowHTTPLoopback: true,
		MinRefresh:        20 * time.Millisecond,
		MaxRefresh:        50 * time.Millisecond, // the 300 s hint clamped
	})
	if err := src.StartRefresher(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadInt64(&srv.hits) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the refresher did not refetch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, _ := src.Stats(); st.Keys != 1 || st.Sequence != 1 || st.LastSuccess.IsZero() {
		t.Errorf("stats %+v", st)
	}
	src.Close()
	after := atomic.LoadInt64(&srv.hits)
	time.Sleep(200 * time.Millisecond)
	if got := atomic.LoadInt64(&srv.hits); got != after {
		t.Errorf("%d requests after Close", got-after)
	}
}

func TestSpiffeBundleSourceArgumentsAreChecked(t *testing.T) {
	const url = "https://peer.example.org/bundle"
	for _, c := range []struct {
		td, url, says string
		opts          *RemoteJWKSOptions
	}{
		{"", url, "trust_domain", nil},
		{"Peer.example.org", url, "trust_domain", nil},
		{"spiffe://peer.example.org", url, "trust_domain", nil},
		{peerTD, "", "bundle_url", nil},
		{peerTD, "http://peer.example.org/bundle", "bundle_url", nil},
		{peerTD, "https://u:p@peer.example.org/bundle", "bundle_url", nil},
		{peerTD, "http://127.0.0.1:9/bundle", "http", nil},
		{peerTD, url, "Timeout", &RemoteJWKSOptions{Timeout: -1}},
		{peerTD, url, "MinRefresh", &RemoteJWKSOptions{MinRefresh: time.Hour}},
		{peerTD, url, "ca_bundle_pem", &RemoteJWKSOptions{CABundlePEM: []byte("nope")}},
		{peerTD, url, "max", &RemoteJWKSOptions{MaxBodyBytes: 16<<20 + 1}},
	} {
		s, err := NewSpiffeBundleSource(c.td, c.url, c.opts)
		if s != nil {
			s.Close()
		}
		if e := wantCode(t, err, ErrInvalidArgument); !strings.Contains(e.Message, c.says) {
			t.Errorf("%q %q: %q does not name %q", c.td, c.url, e.Message, c.says)
		}
	}
	_, err := NewSpiffeBundleSource(peerTD, "https://peer.example.org/b?secret=1#x", nil)
	if e := wantCode(t, err, ErrInvalidArgument); strings.Contains(e.Message, "secret") {
		t.Errorf("the query reached the message: %v", e)
	}
	// Nothing listens: a fetch fails, counted, the source usable.
	src := newBundleSource(t, "http://127.0.0.1:9/bundle", &RemoteJWKSOptions{AllowHTTPLoopback: true, Timeout: 2 * time.Second})
	_, err = src.Refresh()
	wantCode(t, err, ErrIOError)
	if st, _ := src.Stats(); st.Failures != 1 || st.SequenceRefusals != 0 {
		t.Errorf("stats %+v", st)
	}
}
