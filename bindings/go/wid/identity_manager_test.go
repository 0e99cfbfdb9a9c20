package wid

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// imT0 is the fake clock's start: the keyring's key (newKeyring) was made
// 100 s before.
var imT0 = time.Unix(now, 0)

var serverVault = IdentityID{Workload: "server", Name: "vault_default"}

// imRequest asks for identity name of task "server" of allocID, for an hour.
func imRequest(name string) *IssueRequest {
	req := request(allocID, aud)
	req.Identity.Name = name
	return req
}

func newManager(t *testing.T, kr *Keyring, dir string, signer Signer, opts ...ManagerOption) *IdentityManager {
	t.Helper()
	m, err := NewIdentityManager(kr, dir, []*IssueRequest{imRequest("vault_default")}, signer, opts...)
	if err != nil {
		t.Fatalf("NewIdentityManager: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// drain takes every event waiting in ch.
func drain(ch <-chan ManagedEvent) []ManagedEvent {
	var evs []ManagedEvent
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		default:
			return evs
		}
	}
}

// describe is events as "<what>:<name or exchange>:<kind>:<value>".
func describe(evs []ManagedEvent) []string {
	var out []string
	for _, ev := range evs {
		name := ev.Identity.Name
		value := "token"
		if ev.What == ManagedSecret {
			name, value = ev.Exchange, ev.Value
		}
		out = append(out, fmt.Sprintf("%s:%s:%s:%s", ev.What, name, ev.Kind, value))
	}
	return out
}

func wantEvents(t *testing.T, got []ManagedEvent, want ...string) {
	t.Helper()
	if d := describe(got); strings.Join(d, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n got %q\nwant %q", d, want)
	}
}

func TestIdentityManagerInProcessIssuer(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{Issuer: "https://nomad.example.com"})
	dir := t.TempDir()
	m := newManager(t, kr, dir, IssuerSigner(iss))
	iss.Close() // the manager keeps its own reference
	events := m.Watch()

	if _, ok := m.NextDue(); ok {
		t.Fatal("NextDue before Start: ok")
	}
	if _, err := m.Current(serverVault, imT0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Current before Start: %v", err)
	}
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	evs := drain(events)
	wantEvents(t, evs, "identity:vault_default:initial:token")
	first, err := m.Current(serverVault, imT0)
	if err != nil || first != evs[0].Value || evs[0].Identity != serverVault {
		t.Fatalf("Current: %q %v (event %v)", first, err, evs[0])
	}
	v := newVerifier(t, kr, aud, liveStore(), &VerifierOptions{Issuer: "https://nomad.example.com"})
	if c, err := v.Verify(first, at(now)); err != nil || c.Task != "server" || !strings.HasSuffix(c.Subject, ":vault_default") {
		t.Fatalf("Verify: %+v %v", c, err)
	}
	if strings.Contains(fmt.Sprint(evs[0]), first) || strings.Contains(fmt.Sprintf("%#v", evs[0]), first) {
		t.Fatal("an event's String shows its token")
	}

	// Renewed well before the hour is up, not before it is due.
	due, ok := m.NextDue()
	if !ok || due.Before(imT0.Add(20*time.Minute)) || due.After(imT0.Add(50*time.Minute)) {
		t.Fatalf("NextDue: %v %v", due, ok)
	}
	if next, ok := m.Tick(due.Add(-time.Millisecond)); !ok || !next.Equal(due) {
		t.Fatalf("Tick before due: %v %v", next, ok)
	}
	if evs := drain(events); len(evs) != 0 {
		t.Fatalf("Tick before due delivered %v", evs)
	}
	if next, ok := m.Tick(due); !ok || !next.After(due) {
		t.Fatalf("Tick at due: %v %v", next, ok)
	}
	evs = drain(events)
	wantEvents(t, evs, "identity:vault_default:renewed:token")
	second, err := m.Current(serverVault, due)
	if err != nil || second == first || second != evs[0].Value {
		t.Fatalf("Current after renewal: %v (same: %v)", err, second == first)
	}
	h, err := m.Health(due)
	if err != nil {
		t.Fatal(err)
	}
	if h.AllocID != allocID || h.AtRisk || h.SignFailures != 0 || h.LastSignError != "" || len(h.Identities) != 1 ||
		h.Identities[0].Identity != serverVault || !h.Identities[0].Valid ||
		!h.Identities[0].ExpiresAt.Equal(due.Truncate(time.Second).Add(time.Hour)) ||
		h.Identities[0].ExpiresIn <= 59*time.Minute || len(h.Exchanges) != 0 {
		t.Fatalf("Health: %+v", h)
	}
	// An identity not managed here.
	if _, err := m.Current(IdentityID{"server", "consul"}, due); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Current of another identity: %v", err)
	}

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m.Close() // twice is fine
	if _, ok := <-events; ok {
		t.Fatal("the Watch channel is open after Close")
	}
	if _, err := m.Current(serverVault, due); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("Current after Close: %v", err)
	}
	if _, ok := m.Tick(due); ok {
		t.Fatal("Tick after Close: ok")
	}
	if err := m.Run(context.Background()); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, ok := <-m.Watch(); ok {
		t.Fatal("Watch after Close: an open channel")
	}
}

// goSigner signs through a Go Issuer, or fails as told.
type goSigner struct {
	mu    sync.Mutex
	iss   *Issuer
	fail  error
	panic bool
	alter func(*IssueRequest) // changes the request before signing
	calls int
	reqs  []*IssueRequest
}

func (s *goSigner) Sign(req *IssueRequest, now time.Time) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.reqs = append(s.reqs, req)
	if s.panic {
		panic("the signer fell over")
	}
	if s.fail != nil {
		return "", s.fail
	}
	if s.alter != nil {
		s.alter(req)
	}
	return s.iss.Issue(req, now)
}

func (s *goSigner) set(f func(s *goSigner)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func TestIdentityManagerGoSigner(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	errNoLeader := errors.New("rpc: no leader")
	s := &goSigner{iss: iss, fail: errNoLeader}
	m := newManager(t, kr, t.TempDir(), s)
	events := m.Watch()

	// A failing signer fails closed: no token, health says why. The error
	// is the Signer's, as a Go error: errors.Is reaches it, and the text
	// says which callback failed for which identity, in Go's words.
	err := m.Start(imT0)
	if err == nil || !errors.Is(err, errNoLeader) ||
		err.Error() != "wid: the Signer failed for server/vault_default: rpc: no leader" {
		t.Fatalf("Start with a failing signer: %v", err)
	}
	if evs := drain(events); len(evs) != 0 {
		t.Fatalf("a failing signer delivered %v", evs)
	}
	if _, err := m.Current(serverVault, imT0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Current after a failed signing: %v", err)
	}
	h, err := m.Health(imT0)
	if err != nil || !h.AtRisk || h.SignFailures != 1 || !strings.Contains(h.LastSignError, "rpc: no leader") ||
		h.NextSigning.IsZero() || h.Identities[0].Valid {
		t.Fatalf("Health after a failed signing: %+v %v", h, err)
	}
	if len(s.reqs) != 1 || IdentityOf(s.reqs[0]) != serverVault || s.reqs[0].Allocation.ID != allocID ||
		s.reqs[0].Identity.TTL != time.Hour {
		t.Fatalf("the signer was asked %+v", s.reqs)
	}

	// A panicking signer, the same.
	s.set(func(s *goSigner) { s.fail, s.panic = nil, true })
	m.Tick(h.NextSigning)
	if h, _ := m.Health(h.NextSigning); h.SignFailures != 2 || !strings.Contains(h.LastSignError, "panicked") {
		t.Fatalf("Health after a panic: %+v", h)
	}

	// A token of another identity, or of another allocation, is refused.
	for _, alter := range []func(*IssueRequest){
		func(r *IssueRequest) { r.Identity.Name = "consul_default" },
		func(r *IssueRequest) { r.Allocation.ID = "00000000-0000-4000-8000-000000000000" },
	} {
		s.set(func(s *goSigner) { s.panic, s.alter = false, alter })
		h, _ := m.Health(imT0)
		m.Tick(h.NextSigning)
		h2, _ := m.Health(h.NextSigning)
		if h2.SignFailures != h.SignFailures+1 || h2.Identities[0].Valid || h2.LastSignError == "" {
			t.Fatalf("a token of another identity was taken: %+v", h2)
		}
		t.Logf("refused: %s", h2.LastSignError)
	}
	if evs := drain(events); len(evs) != 0 {
		t.Fatalf("refused tokens were delivered: %v", evs)
	}

	// A working signer: the retry signs.
	s.set(func(s *goSigner) { s.alter = nil })
	h, _ = m.Health(imT0)
	m.Tick(h.NextSigning)
	wantEvents(t, drain(events), "identity:vault_default:initial:token")
	if h, _ := m.Health(h.NextSigning); h.AtRisk || h.SignFailures != 0 || h.LastSignError != "" {
		t.Fatalf("Health after success: %+v", h)
	}
	if _, err := m.Current(serverVault, h.NextSigning); err != nil {
		t.Fatal(err)
	}
}

// fakeExchange is a host Exchange that records its calls and answers as
// told.
type fakeExchange struct {
	name string
	id   IdentityID

	mu         sync.Mutex
	calls      []string
	n          int           // secrets derived
	refreshIn  time.Duration // RefreshAt after Derive and Refresh; 0: none
	refreshErr error
	outcome    RefreshOutcome // Refresh's answer (SecretReplaced derives a new secret)
	deriveErr  error
	panic      bool
	onRelease  func(secret string)
	released   []string
}

func newFakeExchange(name string) *fakeExchange {
	return &fakeExchange{name: name, id: serverVault, outcome: SecretKept}
}

func (x *fakeExchange) Name() string         { return x.name }
func (x *fakeExchange) Identity() IdentityID { return x.id }

func (x *fakeExchange) at(now time.Time) time.Time {
	if x.refreshIn == 0 {
		return time.Time{}
	}
	return now.Add(x.refreshIn)
}

func (x *fakeExchange) Derive(token string, now time.Time) (string, time.Time, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, "derive")
	if strings.Count(token, ".") != 2 {
		return "", time.Time{}, errors.New("not a token")
	}
	if x.panic {
		panic("derive fell over")
	}
	if x.deriveErr != nil {
		return "", time.Time{}, x.deriveErr
	}
	x.n++
	return fmt.Sprintf("%s-secret-%d", x.name, x.n), x.at(now), nil
}

func (x *fakeExchange) Refresh(secret, token string, reason RefreshReason, now time.Time) (RefreshResult, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, fmt.Sprintf("refresh(%s,%s)", secret, reason))
	if x.refreshErr != nil {
		return RefreshResult{}, x.refreshErr
	}
	r := RefreshResult{Outcome: x.outcome, RefreshAt: x.at(now)}
	if x.outcome == SecretReplaced {
		x.n++
		r.Secret = fmt.Sprintf("%s-secret-%d", x.name, x.n)
	}
	return r, nil
}

func (x *fakeExchange) Release(secret string) {
	x.mu.Lock()
	x.calls = append(x.calls, "release("+secret+")")
	x.released = append(x.released, secret)
	f := x.onRelease
	x.mu.Unlock()
	if f != nil {
		f(secret)
	}
}

func (x *fakeExchange) Calls() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := x.calls
	x.calls = nil
	return c
}

func (x *fakeExchange) set(f func(x *fakeExchange)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	f(x)
}

func TestIdentityManagerExchangeRestore(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	dir := t.TempDir()

	// A new allocation: the secret is delivered after its token.
	x := newFakeExchange("consul")
	x.refreshIn = 10 * time.Minute
	m := newManager(t, kr, dir, IssuerSigner(iss), WithExchange(x))
	events := m.Watch()
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	evs := drain(events)
	wantEvents(t, evs, "identity:vault_default:initial:token", "secret:consul:initial:consul-secret-1")
	if evs[1].Identity != serverVault || strings.Contains(evs[1].String(), "consul-secret-1") {
		t.Fatalf("secret event: %v", evs[1])
	}
	if got := x.Calls(); strings.Join(got, " ") != "derive" {
		t.Fatalf("calls: %v", got)
	}
	if s, err := m.Secret("consul"); err != nil || s != "consul-secret-1" {
		t.Fatalf("Secret: %q %v", s, err)
	}
	if _, err := m.Secret("vault"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Secret of no exchange: %v", err)
	}
	// Refreshed when it asked: kept, nothing delivered.
	if due, ok := m.NextDue(); !ok || !due.Equal(imT0.Add(10*time.Minute)) {
		t.Fatalf("NextDue: %v %v", due, ok)
	}
	m.Tick(imT0.Add(10 * time.Minute))
	if got := x.Calls(); strings.Join(got, " ") != "refresh(consul-secret-1,due)" {
		t.Fatalf("calls: %v", got)
	}
	if evs := drain(events); len(evs) != 0 {
		t.Fatalf("a kept secret was delivered again: %v", evs)
	}
	m.Close()

	// A restart: a new manager on the same directory asks the exchange to
	// confirm the saved secret, and delivers it once confirmed.
	x2 := newFakeExchange("consul")
	m2 := newManager(t, kr, dir, IssuerSigner(iss), WithExchange(x2))
	events = m2.Watch()
	rep, err := m2.Restore(imT0.Add(11 * time.Minute))
	if err != nil || !rep.Reused || rep.Reason != "" || len(rep.Rederived) != 0 {
		t.Fatalf("Restore: %+v %v", rep, err)
	}
	if got := x2.Calls(); strings.Join(got, " ") != "refresh(consul-secret-1,restored)" {
		t.Fatalf("calls: %v", got)
	}
	wantEvents(t, drain(events), "identity:vault_default:restored:token", "secret:consul:restored:consul-secret-1")
	m2.Close()

	// A restart where the saved secret cannot be confirmed: nothing is
	// delivered, the secret is held back, health says why.
	x3 := newFakeExchange("consul")
	x3.refreshErr = errors.New("consul: ACL not found")
	m3 := newManager(t, kr, dir, IssuerSigner(iss), WithExchange(x3))
	events = m3.Watch()
	t1 := imT0.Add(12 * time.Minute)
	if _, err := m3.Restore(t1); !errors.Is(err, ErrTokenExchangeFailed) {
		t.Fatalf("Restore with a failing refresh: %v", err)
	}
	wantEvents(t, drain(events), "identity:vault_default:restored:token")
	if _, err := m3.Secret("consul"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Secret of an unconfirmed exchange: %v", err)
	}
	h, err := m3.Health(t1)
	if err != nil || !h.AtRisk || len(h.Exchanges) != 1 {
		t.Fatalf("Health: %+v %v", h, err)
	}
	xh := h.Exchanges[0]
	if xh.Name != "consul" || xh.Identity != serverVault || xh.HasSecret || !xh.HeldBack || xh.Failures != 1 ||
		!strings.Contains(xh.LastError, "consul: ACL not found") || xh.NextAttempt.IsZero() ||
		strings.Contains(xh.LastError, "consul-secret-1") {
		t.Fatalf("exchange health: %+v", xh)
	}

	// The retry derives a new one (the held-back secret is never handed
	// out) and releases the old secret only after its successor was
	// delivered.
	var deliveredFirst []string
	x3.set(func(x *fakeExchange) {
		x.refreshErr, x.outcome = nil, SecretReplaced
		x.n = 1
		x.onRelease = func(string) { deliveredFirst = describe(drain(events)) }
	})
	x3.Calls()
	m3.Tick(xh.NextAttempt)
	calls := strings.Join(x3.Calls(), " ")
	if calls != "derive release(consul-secret-1)" {
		t.Fatalf("calls: %v", calls)
	}
	if strings.Join(deliveredFirst, " ") != "secret:consul:restored:consul-secret-2" {
		t.Fatalf("delivered before the release: %q (calls %v)", deliveredFirst, calls)
	}
	if s, err := m3.Secret("consul"); err != nil || s != "consul-secret-2" {
		t.Fatalf("Secret after the retry: %q %v", s, err)
	}
	if h, _ := m3.Health(xh.NextAttempt); h.AtRisk || h.Exchanges[0].HeldBack || h.Exchanges[0].Failures != 0 {
		t.Fatalf("Health after the retry: %+v", h)
	}
	t.Logf("calls: %s", calls)
}

// throttledError is an Exchange's own error type (errors.As).
type throttledError struct{ msg string }

func (e *throttledError) Error() string { return e.msg }

func TestIdentityManagerExchangeFailsClosed(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	for _, tc := range []struct {
		name string
		set  func(x *fakeExchange)
		want string
	}{
		{"error", func(x *fakeExchange) { x.deriveErr = &throttledError{"sts: throttled"} }, "sts: throttled"},
		{"panic", func(x *fakeExchange) { x.panic = true }, "panicked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newFakeExchange("aws")
			x.set(tc.set)
			m := newManager(t, kr, t.TempDir(), IssuerSigner(iss), WithExchange(x))
			events := m.Watch()
			err := m.Start(imT0)
			if !errors.Is(err, ErrTokenExchangeFailed) || !strings.Contains(err.Error(), tc.want) ||
				strings.Contains(err.Error(), "WID_RESULT") || strings.Contains(err.Error(), "callback") {
				t.Fatalf("Start: %v", err)
			}
			// The Exchange's error, as a Go error: errors.As reaches it.
			var throttled *throttledError
			if tc.name == "error" && (!errors.As(err, &throttled) ||
				err.Error() != `wid: the Exchange "aws" failed in Derive: sts: throttled`) {
				t.Fatalf("Start: %v", err)
			}
			if tc.name == "panic" && !strings.HasPrefix(err.Error(), `wid: the Exchange "aws" panicked in Derive: `) {
				t.Fatalf("Start: %v", err)
			}
			wantEvents(t, drain(events), "identity:vault_default:initial:token")
			if _, err := m.Current(serverVault, imT0); err != nil {
				t.Fatalf("the identity is not in use: %v", err)
			}
			h, _ := m.Health(imT0)
			if !h.AtRisk || h.Exchanges[0].HasSecret || h.Exchanges[0].Failures != 1 ||
				!strings.Contains(h.Exchanges[0].LastError, tc.want) {
				t.Fatalf("Health: %+v", h)
			}
			// Fixed: the retry derives and delivers.
			x.set(func(x *fakeExchange) { x.deriveErr, x.panic = nil, false })
			m.Tick(h.Exchanges[0].NextAttempt)
			wantEvents(t, drain(events), "secret:aws:initial:aws-secret-1")
		})
	}
}

func TestIdentityManagerOptionsAreChecked(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	dir := t.TempDir()
	reqs := []*IssueRequest{imRequest("vault_default")}
	signer := IssuerSigner(iss)
	vault := VaultLogin{Addr: "https://vault.example.com:8200", Workload: "server", Identity: "vault_default", Role: "web"}
	for _, tc := range []struct {
		name string
		kr   *Keyring
		dir  string
		reqs []*IssueRequest
		sig  Signer
		opts []ManagerOption
		code *Error
		want string
	}{
		{"nil keyring", nil, dir, reqs, signer, nil, ErrNullArgument, "nil *Keyring"},
		{"nil signer", kr, dir, reqs, nil, nil, ErrNullArgument, "nil Signer"},
		{"no identity", kr, dir, nil, signer, nil, ErrInvalidArgument, "no identity"},
		{"no state directory", kr, dir + "/missing", reqs, signer, nil, ErrIOError, "missing"},
		{"identity twice", kr, dir, []*IssueRequest{imRequest("a"), imRequest("a")}, signer, nil, ErrInvalidArgument, ""},
		{"closed issuer", kr, dir, reqs, IssuerSigner(newClosedIssuer(t, kr)), nil, ErrNullArgument, "closed Issuer"},
		{"duplicate exchange names", kr, dir, reqs, signer,
			[]ManagerOption{WithExchange(newFakeExchange("x")), WithExchange(newFakeExchange("x"))},
			ErrInvalidArgument, `two exchanges are named "x"`},
		{"a host exchange named as the Vault login", kr, dir, reqs, signer,
			[]ManagerOption{vault, WithExchange(newFakeExchange("vault"))},
			ErrInvalidArgument, `two exchanges are named "vault"`},
		{"an exchange of no identity", kr, dir, reqs, signer,
			[]ManagerOption{WithExchange(&fakeExchange{name: "x", id: IdentityID{"server", "other"}})},
			ErrInvalidArgument, "other"},
		{"event buffer", kr, dir, reqs, signer, []ManagerOption{WithEventBuffer(0)}, ErrInvalidArgument, "WithEventBuffer"},
		{"Vault over http", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: "http://vault.example.com:8200", Workload: "server", Identity: "vault_default", Role: "web"}},
			ErrInvalidArgument, "http"},
		{"Vault over http to a loopback host without AllowHTTPLoopback", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: "http://127.0.0.1:8200", Workload: "server", Identity: "vault_default", Role: "web"}},
			ErrInvalidArgument, "http"},
		{"Vault over http to a non-loopback host with AllowHTTPLoopback", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: "http://10.0.0.1:8200", Workload: "server", Identity: "vault_default", Role: "web", AllowHTTPLoopback: true}},
			ErrInvalidArgument, "http"},
		{"Vault timeout", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: vault.Addr, Workload: "server", Identity: "vault_default", Role: "web", Timeout: 11 * time.Minute}},
			ErrInvalidArgument, "Timeout"},
		{"Vault negative timeout", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: vault.Addr, Workload: "server", Identity: "vault_default", Role: "web", Timeout: -time.Second}},
			ErrInvalidArgument, "Timeout"},
		{"Vault min TTL", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: vault.Addr, Workload: "server", Identity: "vault_default", Role: "web", MinTTL: time.Hour}},
			ErrInvalidArgument, "MinTTL"},
		{"Vault without a role", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: vault.Addr, Workload: "server", Identity: "vault_default"}},
			ErrInvalidArgument, "role"},
		{"Vault of no identity", kr, dir, reqs, signer,
			[]ManagerOption{VaultLogin{Addr: vault.Addr, Workload: "server", Identity: "consul", Role: "web"}},
			ErrInvalidArgument, "consul"},
		{"Consul over http", kr, dir, reqs, signer,
			[]ManagerOption{ConsulLogin{Addr: "http://consul.example.com:8500", Workload: "server", Identity: "vault_default", AuthMethod: "nomad-workloads"}},
			ErrInvalidArgument, "http"},
		{"Consul leeway", kr, dir, reqs, signer,
			[]ManagerOption{ConsulLogin{Addr: "https://consul.example.com:8501", Workload: "server", Identity: "vault_default", AuthMethod: "nomad-workloads", Leeway: time.Hour}},
			ErrInvalidArgument, "Leeway"},
		{"Consul and a host exchange of one name", kr, dir, reqs, signer,
			[]ManagerOption{ConsulLogin{Addr: "https://consul.example.com:8501", Workload: "server", Identity: "vault_default", AuthMethod: "nomad-workloads"},
				WithExchange(newFakeExchange("consul"))},
			ErrInvalidArgument, `two exchanges are named "consul"`},
		{"Consul without an auth method", kr, dir, reqs, signer,
			[]ManagerOption{ConsulLogin{Addr: "https://consul.example.com:8501", Workload: "server", Identity: "vault_default"}},
			ErrInvalidArgument, "auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewIdentityManager(tc.kr, tc.dir, tc.reqs, tc.sig, tc.opts...)
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			wantCode(t, err, tc.code)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the error does not say %q: %v", tc.want, err)
			}
			t.Logf("%v", err)
		})
	}

	// What is accepted.
	for _, opts := range [][]ManagerOption{
		{vault},
		{VaultLogin{Addr: "http://127.0.0.1:8200", Workload: "server", Identity: "vault_default", Role: "web", AllowHTTPLoopback: true,
			Name: "vault-ns", Mount: "jwt-nomad", Namespace: "team-a", Timeout: 1500 * time.Microsecond, MinTTL: -1},
			WithExchange(newFakeExchange("consul")), WithEventBuffer(1)},
		{VaultLogin{Addr: "http://localhost:8200", Workload: "server", Identity: "vault_default", Role: "web", AllowHTTPLoopback: true,
			Timeout: 10 * time.Minute, MinTTL: 10 * time.Minute}},
		{vault, ConsulLogin{Addr: "http://127.0.0.1:8500", Workload: "server", Identity: "vault_default", AuthMethod: "nomad-workloads",
			AllowHTTPLoopback: true, Namespace: "team-a", Partition: "default", Datacenter: "dc1", NodeID: "node-1",
			Meta: map[string]string{"cluster": "east"}, Service: true, Timeout: time.Second, Leeway: -1, MinTTL: time.Minute}},
	} {
		m, err := NewIdentityManager(kr, dir, reqs, signer, opts...)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		m.Close()
	}
}

func newClosedIssuer(t *testing.T, kr *Keyring) *Issuer {
	iss := newIssuer(t, kr, IssuerOptions{})
	iss.Close()
	return iss
}

func TestIdentityManagerEventsNeverBlock(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	m := newManager(t, kr, t.TempDir(), IssuerSigner(iss), WithExchange(newFakeExchange("x")), WithEventBuffer(1))
	events, other := m.Watch(), m.Watch()
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	// One room: the newest event (the secret) is kept, the token dropped.
	wantEvents(t, drain(events), "secret:x:initial:x-secret-1")
	if n := m.DroppedEvents(); n != 2 { // one per channel
		t.Fatalf("DroppedEvents: %d", n)
	}
	// Renewals nobody reads do not block either.
	at := imT0
	for i := 0; i < 5; i++ {
		due, _ := m.NextDue()
		at = due
		m.Tick(due)
	}
	if evs := drain(other); len(evs) != 1 || evs[0].Kind != EventRenewed {
		t.Fatalf("other: %v", evs)
	}
	tok, err := m.Current(serverVault, at)
	if err != nil {
		t.Fatal(err)
	}
	_ = tok
}

func TestIdentityManagerConcurrentUse(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	x := newFakeExchange("x")
	x.outcome = SecretReplaced
	m := newManager(t, kr, t.TempDir(), &goSigner{iss: iss}, WithExchange(x))
	events := m.Watch()
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
	)
	readers := 4
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if tok, err := m.Current(serverVault, imT0); err == nil && strings.Count(tok, ".") != 2 {
					t.Errorf("Current: %q", tok)
				}
				if s, err := m.Secret("x"); err != nil || !strings.HasPrefix(s, "x-secret-") {
					t.Errorf("Secret: %q %v", s, err)
				}
				if _, err := m.Health(imT0); err != nil {
					t.Errorf("Health: %v", err)
				}
			}
		}()
	}
	seen := make(chan int)
	go func() { // a Watch reader
		n := 0
		for range events {
			n++
		}
		seen <- n
	}()
	for i := 0; i < 20; i++ {
		due, ok := m.NextDue()
		if !ok {
			t.Fatal("nothing due")
		}
		m.Tick(due)
	}
	close(stop)
	wg.Wait()
	m.Close() // ends the Watch reader
	if <-seen == 0 {
		t.Fatal("the Watch reader saw nothing")
	}
}

func TestIdentityManagerRun(t *testing.T) {
	kr, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(time.Now().Add(-10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	iss := newIssuer(t, kr, IssuerOptions{})
	x := newFakeExchange("x")
	x.refreshIn = 300 * time.Millisecond // then refreshed by Run: replaced
	x.outcome = SecretReplaced
	m := newManager(t, kr, t.TempDir(), IssuerSigner(iss), WithExchange(x))
	events := m.Watch()
	if err := m.Start(time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for renewed := 0; renewed < 2; {
		select {
		case ev := <-events:
			if ev.What == ManagedSecret && ev.Kind == EventRenewed {
				renewed++
			}
		case <-deadline:
			t.Fatal("Run refreshed nothing in 10 s")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if s, err := m.Secret("x"); err != nil || s == "x-secret-1" {
		t.Fatalf("Secret: %q %v", s, err)
	}
}

// Close wakes a Run that is waiting for its next tick (up to a minute
// away): Run returns ErrNullArgument, its goroutine gone, without the
// caller cancelling its context.
func TestIdentityManagerCloseStopsRun(t *testing.T) {
	kr, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer kr.Close()
	if _, err := kr.Rotate(time.Now().Add(-10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, kr, t.TempDir(), IssuerSigner(newIssuer(t, kr, IssuerOptions{})))
	if err := m.Start(time.Now()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	// Nothing is due for most of the token's hour: Run is asleep, or about
	// to be, when Close comes.
	if next, ok := m.NextDue(); !ok || time.Until(next) < runMaxWait {
		t.Fatalf("NextDue %v %v: expected nothing due within a minute", next, ok)
	}
	m.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNullArgument) {
			t.Fatalf("Run after Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		// Without Close waking it, Run would sleep its minute.
		t.Fatal("Run did not return within 30 s of Close")
	}
}

func TestIdentityManagerReplacedSecretIsReleasedAfterDelivery(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	x := newFakeExchange("db")
	x.refreshIn = time.Minute
	m := newManager(t, kr, t.TempDir(), IssuerSigner(iss), WithExchange(x))
	events := m.Watch()
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	drain(events)
	var deliveredFirst []string
	x.set(func(x *fakeExchange) {
		x.outcome = SecretReplaced
		x.onRelease = func(string) { deliveredFirst = describe(drain(events)) }
	})
	x.Calls()
	m.Tick(imT0.Add(time.Minute))
	if calls := strings.Join(x.Calls(), " "); calls != "refresh(db-secret-1,due) release(db-secret-1)" {
		t.Fatalf("calls: %v", calls)
	}
	if strings.Join(deliveredFirst, " ") != "secret:db:renewed:db-secret-2" {
		t.Fatalf("delivered before the release: %q", deliveredFirst)
	}
	if s, err := m.Secret("db"); err != nil || s != "db-secret-2" {
		t.Fatalf("Secret: %q %v", s, err)
	}
	// A Refresh answering no outcome fails closed: the secret in use stays.
	x.set(func(x *fakeExchange) { x.outcome = 0 })
	m.Tick(imT0.Add(2 * time.Minute))
	h, _ := m.Health(imT0.Add(2 * time.Minute))
	if s, err := m.Secret("db"); err != nil || s != "db-secret-2" || h.Exchanges[0].Failures != 1 ||
		!strings.Contains(h.Exchanges[0].LastError, "outcome") {
		t.Fatalf("after a bad outcome: %q %v %+v", s, err, h.Exchanges[0])
	}
	if evs := drain(events); len(evs) != 0 {
		t.Fatalf("a bad outcome delivered %v", evs)
	}
}

// A manager nobody closes is closed by its finalizer (its Watch channels
// then close), its callbacks' handles with it.
func TestIdentityManagerFinalizer(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	events := func() <-chan ManagedEvent {
		m, err := NewIdentityManager(kr, t.TempDir(), []*IssueRequest{imRequest("vault_default")},
			&goSigner{iss: iss}, WithExchange(newFakeExchange("x")))
		if err != nil {
			t.Fatal(err)
		}
		ch := m.Watch()
		if err := m.Start(imT0); err != nil {
			t.Fatal(err)
		}
		return ch
	}()
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; ; n++ {
		runtime.GC()
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
			continue
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forgotten manager was not finalized after %d collections", n)
		}
	}
}

// A zero time.Time is refused, naming the method, never signed at year 1.
func TestIdentityManagerZeroTime(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	m := newManager(t, kr, t.TempDir(), IssuerSigner(iss))
	var zero time.Time
	for name, err := range map[string]error{
		"IdentityManager.Start":   m.Start(zero),
		"IdentityManager.Restore": func() error { _, err := m.Restore(zero); return err }(),
		"IdentityManager.Current": func() error { _, err := m.Current(serverVault, zero); return err }(),
		"IdentityManager.Health":  func() error { _, err := m.Health(zero); return err }(),
	} {
		if e := wantCode(t, err, ErrInvalidArgument); !strings.Contains(e.Message, name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, ok := m.Tick(zero); ok {
		t.Error("Tick(time.Time{}) reported work")
	}
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
}

// An allocation that ended: a host that restarted builds a manager on the
// state directory and ends it without starting it; every saved secret is
// revoked and the state file removed, and nothing is signed again.
func TestIdentityManagerEndAllocation(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	dir := t.TempDir()
	x := newFakeExchange("db")
	x.refreshIn = time.Minute
	m := newManager(t, kr, dir, IssuerSigner(iss), WithExchange(x))
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}
	x.set(func(x *fakeExchange) { x.outcome = SecretReplaced })
	m.Tick(imT0.Add(time.Minute))
	if s, err := m.Secret("db"); err != nil || s != "db-secret-2" {
		t.Fatalf("Secret: %q %v", s, err)
	}
	m.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "*.identities"))
	if len(files) != 1 {
		t.Fatalf("state files: %v", files)
	}
	x.Calls()

	m = newManager(t, kr, dir, IssuerSigner(iss), WithExchange(x))
	if err := m.EndAllocation(); err != nil {
		t.Fatal(err)
	}
	if calls := strings.Join(x.Calls(), " "); calls != "release(db-secret-2)" {
		t.Fatalf("calls: %v", calls)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.identities")); len(files) != 0 {
		t.Fatalf("state files left: %v", files)
	}
	if err := m.Start(imT0.Add(2 * time.Minute)); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "was ended") {
		t.Fatalf("Start after EndAllocation: %v", err)
	}
	if _, err := m.Restore(imT0.Add(2 * time.Minute)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Restore after EndAllocation: %v", err)
	}
	if _, ok := m.Tick(imT0.Add(2 * time.Minute)); ok {
		t.Fatal("Tick after EndAllocation has work")
	}
	if _, err := m.Secret("db"); err == nil {
		t.Fatal("a secret after EndAllocation")
	}
	if err := m.EndAllocation(); err != nil {
		t.Fatalf("again: %v", err)
	}
	if calls := x.Calls(); len(calls) != 0 {
		t.Fatalf("callbacks after the end: %v", calls)
	}
	m.Close()
	if err := m.EndAllocation(); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("EndAllocation after Close: %v", err)
	}
}
