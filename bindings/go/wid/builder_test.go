package wid

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// The proof options of VerifierOptions (built through wid_verifier_builder):
// RequireProof, MaxProofLifetime and ProofReplayCapacity.
func TestVerifierProofOptions(t *testing.T) {
	kr := newWITKeyring(t)
	key := newWorkloadKey(t, AlgES256)
	wit := issueWIT(t, kr, AlgEdDSA, witRequest(t, key))
	bearer, err := kr.IssueAlg(AlgEdDSA, request(allocID, aud), "", at(now))
	if err != nil {
		t.Fatal(err)
	}

	strict := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{
		KeyWait:             -1,
		RequireProof:        true,
		MaxProofLifetime:    30 * time.Second,
		ProofReplayCapacity: 16, // one proof per workload key (16/64, at least 1)
	})
	_, err = strict.Verify(bearer, at(now))
	wantCode(t, err, ErrProofRequired)
	errs := strict.VerifyBatch([]string{bearer}, at(now))
	wantCode(t, errs[0], ErrProofRequired)

	long := prove(t, key, wit, target, "", 200*time.Second, nowTime) // past 30 s and the leeway
	_, err = strict.VerifyProof(wit, long, target, "", nowTime)
	wantCode(t, err, ErrProofInvalid)
	short := prove(t, key, wit, target, "", 20*time.Second, nowTime)
	if _, err := strict.VerifyProof(wit, short, target, "", nowTime); err != nil {
		t.Fatalf("a 20 s proof: %v", err)
	}
	next := prove(t, key, wit, target, "", 20*time.Second, nowTime)
	_, err = strict.VerifyProof(wit, next, target, "", nowTime)
	wantCode(t, err, ErrProofReplayed)

	// The defaults: bearer tokens, 5-minute proofs, room for many.
	lax := newVerifier(t, kr, aud, liveStore(), noWait)
	if _, err := lax.Verify(bearer, at(now)); err != nil {
		t.Fatal(err)
	}
	for _, wpt := range []string{long, next} {
		if _, err := lax.VerifyProof(wit, wpt, target, "", nowTime); err != nil {
			t.Fatalf("default verifier: %v", err)
		}
	}

	for name, o := range map[string]*VerifierOptions{
		"negative lifetime":   {MaxProofLifetime: -time.Second},
		"negative capacity":   {ProofReplayCapacity: -1},
		"capacity under 16":   {ProofReplayCapacity: 15},
		"issuer not UTF-8":    {Issuer: "\xff"},
		"issuer over 4096":    {Issuer: strings.Repeat("i", 4097)},
		"max token bytes < 0": {MaxTokenBytes: -5},
		"cache entries < 0":   {CacheEntries: -5},
	} {
		_, err := NewVerifier(kr, aud, liveStore(), o)
		e := wantCode(t, err, ErrInvalidArgument)
		if e != nil && e.Message == "" {
			t.Errorf("%s: no message", name)
		}
	}
}

// Explain: the steps and the verdict, for accepted and rejected tokens;
// Stats: what verification did.
func TestExplainAndStats(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	store := liveStore()
	v := newVerifier(t, kr, aud, store, noWait)

	x, err := v.Explain(tok, at(now))
	if err != nil {
		t.Fatal(err)
	}
	if !x.Accepted || x.Code != ResultOK || x.Err() != nil || x.Failed() != nil {
		t.Fatalf("accepted token: %+v", x)
	}
	var names []string
	for _, s := range x.Steps {
		names = append(names, s.Name)
		if !s.Passed || s.Detail == "" {
			t.Errorf("step %+v", s)
		}
	}
	want := "length structure key algorithm signature claims times audience issuer allocation"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("steps %q, want %q", got, want)
	}

	x, err = v.Explain(tok, at(now+2*ttl))
	if err != nil {
		t.Fatal(err)
	}
	if x.Accepted || x.Code != ResultExpired {
		t.Fatalf("expired token: %+v", x)
	}
	if f := x.Failed(); f == nil || f.Name != "times" || f != &x.Steps[len(x.Steps)-1] {
		t.Fatalf("failed step %+v", f)
	}
	if !errors.Is(x.Err(), ErrExpired) {
		t.Errorf("Err() = %v", x.Err())
	}
	// The explanation's verdict is Verify's.
	_, verr := v.Verify(tok, at(now+2*ttl))
	wantCode(t, verr, ErrExpired)

	// A terminal allocation; garbage; an over-long token (length alone).
	store.mu.Lock()
	store.states[allocID] = Terminal
	store.mu.Unlock()
	x, _ = v.Explain(tok, at(now))
	if x.Code != ResultAllocationTerminal || x.Failed().Name != "allocation" {
		t.Errorf("terminal: %+v", x)
	}
	x, _ = v.Explain("not.a.token", at(now))
	if x.Code != ResultMalformedToken || x.Failed().Name != "structure" {
		t.Errorf("garbage: %+v", x)
	}
	x, _ = v.Explain(strings.Repeat("A", 9000), at(now))
	if x.Code != ResultMalformedToken || len(x.Steps) != 1 || x.Steps[0].Name != "length" {
		t.Errorf("over-long: %+v", x)
	}
	_, err = v.Explain("\xff\xfe", at(now))
	wantCode(t, err, ErrMalformedToken)

	// A store that fails: the step says so in Go's words, Err has the
	// store's error as its Cause, and nothing is left behind.
	errNoLeader := errors.New("raft: no leader")
	failing := newVerifier(t, kr, aud, StateStoreFunc(func(string, Consistency) (AllocState, error) {
		return Missing, errNoLeader
	}), noWait)
	x, err = failing.Explain(tok, at(now))
	if err != nil || x.Code != ResultStoreUnavailable {
		t.Fatalf("failing store: %+v %v", x, err)
	}
	if d := x.Failed().Detail; !strings.HasPrefix(d, "the StateStore failed for allocation") ||
		!strings.HasSuffix(d, ": raft: no leader") || strings.Contains(d, "callback") || strings.Contains(d, "WID_RESULT") {
		t.Errorf("failing store's step: %q", d)
	}
	if xerr := x.Err(); !errors.Is(xerr, errNoLeader) || !errors.Is(xerr, ErrStoreUnavailable) {
		t.Errorf("Explanation.Err: %v", xerr)
	}
	failing.state.log.mu.Lock()
	left := len(failing.state.log.byThread)
	failing.state.log.mu.Unlock()
	if left != 0 {
		t.Errorf("the store's failure was left behind for %d threads", left)
	}

	// Stats: Verify counts, Explain does not.
	s, err := v.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s != (VerifierStats{Rejected: 1}) {
		t.Errorf("stats %+v", s)
	}
	store.mu.Lock()
	store.states[allocID] = Live
	store.mu.Unlock()
	for i := 0; i < 3; i++ {
		if _, err := v.Verify(tok, at(now)); err != nil {
			t.Fatal(err)
		}
	}
	s, _ = v.Stats()
	if s.Accepted != 3 || s.Rejected != 1 {
		t.Errorf("stats %+v", s)
	}
	cached := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{CacheEntries: 8, KeyWait: -1})
	for i := 0; i < 2; i++ {
		if _, err := cached.Verify(tok, at(now)); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := cached.Stats(); s.CacheHits != 1 || s.CacheEntries != 1 {
		t.Errorf("cached stats %+v", s)
	}
	missing := newVerifier(t, kr, aud, newMemStore(map[string]AllocState{}), noWait)
	_, err = missing.Verify(tok, at(now))
	wantCode(t, err, ErrAllocationNotFound)
	if s, _ := missing.Stats(); s.ConsistentFallbacks != 1 {
		t.Errorf("fallbacks %+v", s)
	}

	v.Close()
	_, err = v.Explain(tok, at(now))
	wantCode(t, err, ErrNullArgument)
	_, err = v.Stats()
	wantCode(t, err, ErrNullArgument)
}

// Explain, Stats and Verify from many goroutines at once (run with -race).
func TestExplainStatsConcurrently(t *testing.T) {
	kr := newKeyring(t)
	tok := issue(t, kr, request(allocID, aud), now)
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{CacheEntries: 64, KeyWait: -1})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				switch g % 3 {
				case 0:
					if _, err := v.Verify(tok, at(now)); err != nil {
						t.Error(err)
					}
				case 1:
					if x, err := v.Explain(tok, at(now)); err != nil || !x.Accepted {
						t.Error(x, err)
					}
				default:
					if _, err := v.Stats(); err != nil {
						t.Error(err)
					}
				}
			}
		}(g)
	}
	wg.Wait()
	s, _ := v.Stats()
	if s.Accepted != 3*50 {
		t.Errorf("accepted %d, want 150", s.Accepted)
	}
}
