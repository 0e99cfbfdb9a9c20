package wid

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// jwksServer serves a JWKS (and an OIDC discovery document) on loopback,
// answers what the test sets, and counts the JWKS requests.
type jwksServer struct {
	*httptest.Server
	mu           sync.Mutex
	status       int
	body         string
	cacheControl string // sent with the JWKS when set
	hits         int64
}

func newJWKSServer(t testing.TB) *jwksServer {
	t.Helper()
	s := &jwksServer{status: http.StatusOK, body: `{"keys":[]}`}
	// Unstarted until s.Server is set: the handler reads s.URL.
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/jwks.json":
			atomic.AddInt64(&s.hits, 1)
			s.mu.Lock()
			status, body, cc := s.status, s.body, s.cacheControl
			s.mu.Unlock()
			if cc != "" {
				w.Header().Set("Cache-Control", cc)
			}
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		case "/.well-known/openid-configuration":
			fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q}`, s.URL, s.URL+"/jwks.json")
		default:
			http.NotFound(w, r)
		}
	}))
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(status int, body string) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

func (s *jwksServer) serve(t testing.TB, kr *Keyring) {
	t.Helper()
	j, err := kr.JWKS()
	if err != nil {
		t.Fatal(err)
	}
	s.set(http.StatusOK, string(j))
}

func newRemote(t testing.TB, url string, opts *RemoteJWKSOptions) *RemoteJWKS {
	t.Helper()
	r, err := NewRemoteJWKS(url, opts)
	if err != nil {
		t.Fatalf("NewRemoteJWKS: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

func remoteKeyring(t testing.TB, r *RemoteJWKS) *Keyring {
	t.Helper()
	kr, err := r.Keyring()
	if err != nil {
		t.Fatalf("Keyring: %v", err)
	}
	t.Cleanup(kr.Close)
	return kr
}

func TestRemoteJWKSVerifiesAndFollowsRotation(t *testing.T) {
	issuer := newKeyring(t)
	srv := newJWKSServer(t)
	srv.serve(t, issuer)
	r := newRemote(t, srv.URL+"/jwks.json", &RemoteJWKSOptions{
		AllowHTTPLoopback:  true,
		UnknownKidCooldown: -1, // none
	})
	kr := remoteKeyring(t, r)
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{KeyWait: 10 * time.Second})

	s, err := r.Stats()
	if err != nil || s.Fetches != 0 || s.Keys != 0 || s.JWKSURI == nil {
		t.Fatalf("before the first fetch: %+v %v", s, err)
	}
	rep, err := r.Refresh()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Keys) != 1 || rep.Keys[0] != "key-1" || len(rep.Added) != 1 || rep.JWKSURI != srv.URL+"/jwks.json" {
		t.Errorf("report %+v", rep)
	}
	if rep.HasMaxAge || rep.MaxAge != 0 || rep.NextRefreshIn != time.Hour {
		t.Errorf("report %+v", rep)
	}
	tok := issue(t, issuer, request(allocID, aud), now)
	if _, err := v.Verify(tok, at(now)); err != nil {
		t.Fatal(err)
	}

	// A rotation: the new kid starts a fetch while Verify waits for it.
	if _, err := issuer.Rotate(at(now + 1)); err != nil {
		t.Fatal(err)
	}
	srv.serve(t, issuer)
	rotated := issue(t, issuer, request(allocID, aud), now)
	if _, err := v.Verify(rotated, at(now)); err != nil {
		t.Fatalf("rotated: %v", err)
	}
	s, _ = r.Stats()
	if s.UnknownKidFetches != 1 || s.Keys != 2 || s.Stale {
		t.Errorf("stats %+v", s)
	}

	// Failures keep the last good set.
	srv.set(http.StatusInternalServerError, "{}")
	_, err = r.Refresh()
	wantCode(t, err, ErrIOError)
	srv.set(http.StatusOK, "not json")
	_, err = r.Refresh()
	wantCode(t, err, ErrDecodeError)
	s, _ = r.Stats()
	if s.Failures != 2 || !s.Stale || s.LastError == "" || s.Keys != 2 {
		t.Errorf("stats %+v", s)
	}
	for _, tk := range []string{tok, rotated} {
		if _, err := v.Verify(tk, at(now)); err != nil {
			t.Errorf("after failures: %v", err)
		}
	}

	// Closed: the keyring keeps its keys; the source refuses calls.
	r.Close()
	r.Close()
	if _, err := v.Verify(rotated, at(now)); err != nil {
		t.Errorf("after Close: %v", err)
	}
	_, err = r.Refresh()
	wantCode(t, err, ErrNullArgument)
	_, err = r.Stats()
	wantCode(t, err, ErrNullArgument)
	_, err = r.Keyring()
	wantCode(t, err, ErrNullArgument)
	wantCode(t, r.StartRefresher(), ErrNullArgument)
}

func TestRemoteJWKSDiscovery(t *testing.T) {
	issuer := newKeyring(t)
	srv := newJWKSServer(t)
	srv.serve(t, issuer)
	r, err := DiscoverRemoteJWKS(srv.URL, &RemoteJWKSOptions{AllowHTTPLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if s, _ := r.Stats(); s.JWKSURI != nil {
		t.Errorf("before discovery: %+v", s)
	}
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if s, _ := r.Stats(); s.JWKSURI == nil || *s.JWKSURI != srv.URL+"/jwks.json" {
		t.Errorf("after discovery: %+v", s)
	}
	v := newVerifier(t, remoteKeyring(t, r), aud, liveStore(), noWait)
	if _, err := v.Verify(issue(t, issuer, request(allocID, aud), now), at(now)); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteJWKSRefresher(t *testing.T) {
	issuer := newKeyring(t)
	srv := newJWKSServer(t)
	srv.serve(t, issuer)
	r := newRemote(t, srv.URL+"/jwks.json", &RemoteJWKSOptions{
		AllowHTTPLoopback: true,
		MinRefresh:        20 * time.Millisecond,
		MaxRefresh:        50 * time.Millisecond,
		DefaultRefresh:    20 * time.Millisecond,
	})
	if err := r.StartRefresher(); err != nil {
		t.Fatal(err)
	}
	if err := r.StartRefresher(); err != nil { // running: nothing more
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadInt64(&srv.hits) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the refresher did not refetch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, _ := r.Stats(); s.Keys != 1 || s.LastSuccess.IsZero() {
		t.Errorf("stats %+v", s)
	}
	r.Close() // stops and waits for the refresher
	after := atomic.LoadInt64(&srv.hits)
	time.Sleep(200 * time.Millisecond)
	if got := atomic.LoadInt64(&srv.hits); got != after {
		t.Errorf("%d requests after Close", got-after)
	}
}

func TestRemoteJWKSOptionsAreChecked(t *testing.T) {
	srv := newJWKSServer(t)
	url := srv.URL + "/jwks.json"
	for name, c := range map[string]struct {
		url  string
		opts *RemoteJWKSOptions
	}{
		"http without loopback allowed": {url, nil},
		"http to another host":          {"http://example.com/jwks", &RemoteJWKSOptions{AllowHTTPLoopback: true}},
		"not a URL":                     {"jwks", nil},
		"a fragment":                    {"https://example.com/jwks#x", nil},
		"user info":                     {"https://u:p@example.com/jwks", nil},
		"not PEM":                       {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, CABundlePEM: []byte("nope")}},
		"negative timeout":              {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, Timeout: -1}},
		"timeout over a week":           {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, Timeout: 8 * 24 * time.Hour}},
		"min over max":                  {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, MinRefresh: time.Hour, MaxRefresh: time.Minute}},
		"min without max":               {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, MinRefresh: time.Hour}},
		"body over 16 MiB":              {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, MaxBodyBytes: 16<<20 + 1}},
		"negative max keys":             {url, &RemoteJWKSOptions{AllowHTTPLoopback: true, MaxKeys: -1}},
	} {
		r, err := NewRemoteJWKS(c.url, c.opts)
		if r != nil {
			r.Close()
		}
		e := wantCode(t, err, ErrInvalidArgument)
		if e != nil && e.Message == "" {
			t.Errorf("%s: no message", name)
		}
	}
	_, err := NewRemoteJWKS("http://example.com/j?secret=1", &RemoteJWKSOptions{AllowHTTPLoopback: true})
	if e := wantCode(t, err, ErrInvalidArgument); e != nil && strings.Contains(e.Message, "secret") {
		t.Errorf("the query reached the message: %v", e)
	}
	_, err = DiscoverRemoteJWKS("https://issuer.example.com?x=1", nil)
	wantCode(t, err, ErrInvalidArgument)

	// Nothing listens: a fetch fails, the source stays usable.
	r := newRemote(t, "http://127.0.0.1:9/jwks.json", &RemoteJWKSOptions{
		AllowHTTPLoopback: true, Timeout: 2 * time.Second, MaxKeys: 5, MaxBodyBytes: 1 << 16,
		UnknownKidCooldown: time.Second,
	})
	_, err = r.Refresh()
	var e *Error
	if !errors.As(err, &e) || e.Code != ResultIOError {
		t.Fatalf("refresh with nothing listening: %v", err)
	}
	if s, _ := r.Stats(); s.Failures != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A source and verifiers over its keyring from many goroutines at once
// (run with -race), with Close racing the calls.
func TestRemoteJWKSConcurrentUse(t *testing.T) {
	issuer := newKeyring(t)
	srv := newJWKSServer(t)
	srv.serve(t, issuer)
	r := newRemote(t, srv.URL+"/jwks.json", &RemoteJWKSOptions{AllowHTTPLoopback: true})
	if _, err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, remoteKeyring(t, r), aud, liveStore(), noWait)
	tok := issue(t, issuer, request(allocID, aud), now)
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				switch g % 3 {
				case 0:
					if _, err := v.Verify(tok, at(now)); err != nil {
						t.Error(err)
					}
				case 1:
					if _, err := r.Refresh(); err != nil && !errors.Is(err, ErrNullArgument) {
						t.Error(err)
					}
				default:
					if _, err := r.Stats(); err != nil && !errors.Is(err, ErrNullArgument) {
						t.Error(err)
					}
				}
			}
		}(g)
	}
	time.Sleep(5 * time.Millisecond)
	r.Close()
	wg.Wait()
}

// A max-age beyond what a time.Duration holds (a server may send any
// number; the library saturates it at u64::MAX ms) is a successful refresh
// whose MaxAge is the longest Duration, never an error or a wrapped,
// negative span.
func TestRemoteJWKSHugeMaxAge(t *testing.T) {
	issuer := newKeyring(t)
	srv := newJWKSServer(t)
	srv.serve(t, issuer)
	for _, age := range []string{"99999999999999999999", "9223372036854"} {
		srv.mu.Lock()
		srv.cacheControl = "max-age=" + age
		srv.mu.Unlock()
		r := newRemote(t, srv.URL+"/jwks.json", &RemoteJWKSOptions{AllowHTTPLoopback: true})
		rep, err := r.Refresh()
		if err != nil {
			t.Fatalf("max-age=%s: %v", age, err)
		}
		if !rep.HasMaxAge || rep.MaxAge <= 0 || rep.NextRefreshIn <= 0 || len(rep.Keys) != 1 {
			t.Errorf("max-age=%s: report %+v", age, rep)
		}
		if age == "99999999999999999999" && rep.MaxAge != time.Duration(math.MaxInt64) {
			t.Errorf("max-age=%s: MaxAge %v, want the longest Duration", age, rep.MaxAge)
		}
	}
}
