package wid

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeakManagerAndTrustSetUnderLoad runs an identity manager (IssuerSigner,
// a host Exchange kept in memory: no network), a Verifier and a TrustSet
// under 32 goroutines calling Current, Health, Secret and Verify while
// another drives Tick through renewals and four more consume Watch channels;
// then closes everything and checks that nothing is left behind: every
// goroutine the test started has ended (runtime.NumGoroutine back to its
// baseline, and no goroutine alive that was not alive before), every
// cgo.Handle the handles made is deleted, and the objects the library held
// through those handles (the event hub, the Exchange, the StateStores, the
// Watch consumers, the handles themselves) are collected.
//
// It asserts no timing: waits are bounded polls (30 s), and the fake clock
// moves only on the Tick goroutine, so the verdicts do not depend on how
// the goroutines are scheduled (see leakWorker).
func TestLeakManagerAndTrustSetUnderLoad(t *testing.T) {
	before := settledGoroutines()
	tr := newCollectTracker()
	handles := runLeakWorkload(t, tr)

	// Goroutine exit is asynchronous: poll until the count is back to the
	// baseline and no goroutine started since is alive.
	waitFor(t, "the goroutines started by the test to end", func() (bool, string) {
		n := runtime.NumGoroutine()
		left := newGoroutines(before.ids)
		if n <= before.count && len(left) == 0 {
			return true, ""
		}
		return false, fmt.Sprintf("%d goroutines, %d before the test; alive and not there before:\n%s\n\nall goroutines:\n%s",
			n, before.count, strings.Join(left, "\n\n"), stacks())
	})

	for _, h := range handles {
		if handleLive(h.h) {
			t.Errorf("%s: its cgo.Handle is still live after Close", h.owner)
		}
	}

	// Finalizers run after the GC finds the objects unreachable, on the
	// runtime's finalizer goroutine: poll.
	waitFor(t, "the objects the library held to be collected", func() (bool, string) {
		runtime.GC()
		left := tr.pending()
		return len(left) == 0, "not collected: " + strings.Join(left, ", ")
	})
}

// leakTTL is the identities' lifetime: renewed every 6 or 7 minutes of the
// fake clock, which the Tick goroutine moves leakStep at a time over
// leakTicks ticks (30 minutes: at least four renewals).
const (
	leakTTL     = 10 * time.Minute
	leakStep    = 5 * time.Second
	leakTicks   = 360
	leakWorkers = 32
	leakWatches = 4
	eastIss     = "https://east.example"
	westIss     = "https://west.example"
)

type ownedHandle struct {
	owner string
	h     cgo.Handle
}

// runLeakWorkload does the work and closes everything. It returns the
// handles the binding made (to check that Close deleted them), and nothing
// else: once it returns, nothing of the test holds the objects tr watches.
func runLeakWorkload(t *testing.T, tr *collectTracker) []ownedHandle {
	east, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	west, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	// One kid, two keys: a token of one issuer never verifies as the other's.
	if err := east.Insert("key-1", material(7), DerivationHKDFV1, KeyStateActive, imT0.Add(-100*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := west.Insert("key-1", material(8), DerivationHKDFV1, KeyStateActive, imT0.Add(-100*time.Second)); err != nil {
		t.Fatal(err)
	}
	iss, err := NewIssuer(east, IssuerOptions{Issuer: eastIss})
	if err != nil {
		t.Fatal(err)
	}
	req := imRequest("vault_default")
	req.Identity.TTL = leakTTL
	x := &leakExchange{prefix: "secret-"}
	m, err := NewIdentityManager(east, t.TempDir(), []*IssueRequest{req}, IssuerSigner(iss), WithExchange(x))
	if err != nil {
		t.Fatal(err)
	}
	store := &leakStore{name: "verifier"}
	v, err := NewVerifier(east, aud, store, &VerifierOptions{Leeway: time.Hour, KeyWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	tsStore := &leakStore{name: "trust set"}
	ts, err := NewTrustSet([]TrustedIssuer{
		{Iss: eastIss, Keyring: east, Audience: aud, Store: tsStore},
		{Iss: westIss, Keyring: west, Audience: aud, Store: tsStore},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The trust set's tokens: valid (an hour) over the whole fake half hour.
	tsTokens := map[string]string{}
	for iss, kr := range map[string]*Keyring{eastIss: east, westIss: west} {
		tok, err := kr.IssueWithIssuer(request(allocID, aud), iss, imT0)
		if err != nil {
			t.Fatal(err)
		}
		tsTokens[iss] = tok
	}

	var handles []ownedHandle
	for _, h := range m.handles {
		handles = append(handles, ownedHandle{"IdentityManager", h})
	}
	for _, h := range ts.handles {
		handles = append(handles, ownedHandle{"TrustSet", h})
	}
	handles = append(handles, ownedHandle{"Verifier", v.handle})
	if len(handles) != 2+2+1 { // the exchange's and the hub's, one per store, the verifier's
		t.Fatalf("%d handles: %v", len(handles), handles)
	}

	tr.finalizer("the Exchange", x)
	tr.finalizer("the manager's event hub", m.hub)
	tr.finalizer("the Verifier's StateStore", store)
	tr.finalizer("the TrustSet's StateStore", tsStore)
	tr.cleanup("the IdentityManager", m)
	tr.cleanup("the Verifier", v)
	tr.cleanup("the TrustSet", ts)
	tr.cleanup("the Issuer", iss)
	tr.cleanup("the east Keyring", east)
	tr.cleanup("the west Keyring", west)

	// Watch consumers: each ends when Close closes its channel.
	consumed := make(chan int, leakWatches)
	for i := 0; i < leakWatches; i++ {
		c := &watchConsumer{ch: m.Watch()}
		tr.finalizer(fmt.Sprintf("Watch consumer %d", i), c)
		go func(c *watchConsumer) { consumed <- c.run(t) }(c)
	}

	var clock atomic.Int64 // Unix ms: moved by the Tick goroutine only
	clock.Store(imT0.UnixMilli())
	if err := m.Start(imT0); err != nil {
		t.Fatal(err)
	}

	var closing atomic.Bool
	stop := make(chan struct{})
	ready := make(chan struct{}, leakWorkers)
	iterations := make([]atomic.Int64, leakWorkers)
	var workers sync.WaitGroup
	for i := 0; i < leakWorkers; i++ {
		w := &leakWorker{id: i, t: t, m: m, v: v, ts: ts, tsTokens: tsTokens, clock: &clock, closing: &closing,
			iterations: &iterations[i]}
		workers.Add(1)
		go func() {
			defer workers.Done()
			w.run(stop, ready)
		}()
	}
	for i := 0; i < leakWorkers; i++ { // each has done one round before Tick starts
		<-ready
	}

	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for i := 1; i <= leakTicks; i++ {
			now := imT0.Add(time.Duration(i) * leakStep)
			clock.Store(now.UnixMilli())
			if _, ok := m.Tick(now); !ok {
				t.Errorf("Tick at %v: nothing due ever again", now)
				return
			}
		}
	}()
	waitClosed(t, ticked, "the Tick goroutine")
	// Every worker has gone round a few more times (while Tick ran, or since).
	waitFor(t, "every worker to go round three times", func() (bool, string) {
		for i := range iterations {
			if n := iterations[i].Load(); n < 3 {
				return false, fmt.Sprintf("worker %d: %d rounds", i, n)
			}
		}
		return true, ""
	})
	end := time.UnixMilli(clock.Load())
	h, err := m.Health(end)
	if err != nil || h.AtRisk || len(h.Identities) != 1 || !h.Identities[0].Valid ||
		len(h.Exchanges) != 1 || !h.Exchanges[0].HasSecret || h.SignFailures != 0 {
		t.Errorf("Health at the end: %+v %v", h, err)
	}
	if d := m.DroppedEvents(); d != 0 {
		t.Errorf("%d events dropped", d)
	}

	// Close everything while the workers still call.
	closing.Store(true)
	m.Close()
	ts.Close()
	v.Close()
	iss.Close()
	east.Close()
	west.Close()
	close(stop)
	waitGroup(t, &workers, "the workers")
	var rounds int64
	for i := range iterations {
		rounds += iterations[i].Load()
	}
	t.Logf("%d workers went round %d times in all, %d ticks to %v, %d lookups", leakWorkers, rounds, leakTicks,
		end.Sub(imT0), store.n.Load()+tsStore.n.Load())
	for i := 0; i < leakWatches; i++ {
		select {
		case n := <-consumed:
			t.Logf("a Watch consumer got %d events", n)
			// The initial token and secret, then a token and a secret per
			// renewal (at least four), and the secret's refreshes.
			if n < 2+2*4 {
				t.Errorf("a Watch consumer got %d events", n)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("a Watch consumer did not end after Close:\n%s", stacks())
		}
	}
	return handles
}

// leakWorker calls the readers of the manager, the verifier and the trust
// set in a loop. Every verdict holds whatever the scheduling: Current(now)
// has a token for any now the clock has shown (a token is valid until its
// exp, and renewals come well before it), the verifier's hour of leeway
// covers the fake half hour (a token renewed after the worker read the
// clock is "from the future" by less than that), and the trust set's
// tokens are valid for an hour.
type leakWorker struct {
	id         int
	t          *testing.T
	m          *IdentityManager
	v          *Verifier
	ts         *TrustSet
	tsTokens   map[string]string
	clock      *atomic.Int64
	closing    *atomic.Bool
	iterations *atomic.Int64
}

func (w *leakWorker) run(stop <-chan struct{}, ready chan<- struct{}) {
	for first := true; ; first = false {
		select {
		case <-stop:
			return
		default:
		}
		if !w.round() {
			if first {
				ready <- struct{}{}
			}
			return
		}
		w.iterations.Add(1)
		if first {
			ready <- struct{}{}
		}
	}
}

// round is one call of each reader; false: stop (closed, or failed).
func (w *leakWorker) round() bool {
	now := time.UnixMilli(w.clock.Load())
	tok, err := w.m.Current(serverVault, now)
	if !w.ok("Current", err) {
		return false
	}
	c, err := w.v.Verify(tok, now)
	if !w.ok("Verify", err) {
		return false
	}
	if c.AllocationID != allocID || !strings.HasSuffix(c.Subject, ":vault_default") || c.Issuer != eastIss {
		w.t.Errorf("worker %d: the manager's token has claims %+v", w.id, c)
		return false
	}
	h, err := w.m.Health(now)
	if !w.ok("Health", err) {
		return false
	}
	if h.AllocID != allocID || len(h.Identities) != 1 || len(h.Exchanges) != 1 || h.Identities[0].Identity != serverVault {
		w.t.Errorf("worker %d: Health %+v", w.id, h)
		return false
	}
	s, err := w.m.Secret("memory")
	if !w.ok("Secret", err) {
		return false
	}
	if !strings.HasPrefix(s, "secret-") {
		w.t.Errorf("worker %d: Secret %q", w.id, s)
		return false
	}
	want := eastIss
	if w.id%2 == 1 {
		want = westIss
	}
	c, issuer, err := w.ts.Verify(w.tsTokens[want], now)
	if !w.ok("TrustSet.Verify", err) {
		return false
	}
	if issuer != want || c.AllocationID != allocID {
		w.t.Errorf("worker %d: the trust set says %q, claims %+v (want %q)", w.id, issuer, c, want)
		return false
	}
	return true
}

// ok: err is nil; a closed handle once closing is set stops the worker
// quietly; anything else is a failure.
func (w *leakWorker) ok(what string, err error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, ErrNullArgument) && w.closing.Load() {
		return false
	}
	w.t.Errorf("worker %d: %s: %v", w.id, what, err)
	return false
}

// watchConsumer reads one Watch channel until it is closed.
type watchConsumer struct {
	ch <-chan ManagedEvent
}

func (c *watchConsumer) run(t *testing.T) int {
	n := 0
	for ev := range c.ch {
		n++
		if ev.Identity != serverVault || ev.What == ManagedSecret && ev.Exchange != "memory" || ev.Value == "" {
			t.Errorf("event %v", ev)
		}
	}
	return n
}

// leakExchange is a host Exchange kept in memory: a new secret per token.
// (It and leakStore hold a pointer: a finalizer on a tiny pointer-free
// object may never run, batched with its neighbours.)
type leakExchange struct {
	prefix string
	n      atomic.Int64
}

func (x *leakExchange) Name() string         { return "memory" }
func (x *leakExchange) Identity() IdentityID { return serverVault }
func (x *leakExchange) Derive(token string, now time.Time) (string, time.Time, error) {
	return x.prefix + strconv.FormatInt(x.n.Add(1), 10), now.Add(2 * time.Minute), nil
}
func (x *leakExchange) Refresh(secret, token string, reason RefreshReason, now time.Time) (RefreshResult, error) {
	if reason == ReasonResigned {
		s, at, err := x.Derive(token, now)
		return RefreshResult{Outcome: SecretReplaced, Secret: s, RefreshAt: at}, err
	}
	return RefreshResult{Outcome: SecretKept, RefreshAt: now.Add(2 * time.Minute)}, nil
}
func (x *leakExchange) Release(string) {}

// leakStore says every allocation is live.
type leakStore struct {
	name string
	n    atomic.Int64
}

func (s *leakStore) AllocationState(string, Consistency) (AllocState, error) {
	s.n.Add(1)
	return Live, nil
}

// collectTracker knows which watched objects were not collected yet.
type collectTracker struct {
	mu   sync.Mutex
	left map[string]bool
}

func newCollectTracker() *collectTracker { return &collectTracker{left: make(map[string]bool)} }

func (c *collectTracker) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left[name] {
		panic("watched twice: " + name)
	}
	c.left[name] = true
}

func (c *collectTracker) collected(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.left, name)
}

// finalizer watches obj (a pointer with no finalizer of its own) with
// runtime.SetFinalizer.
func (c *collectTracker) finalizer(name string, obj interface{}) {
	c.add(name)
	runtime.SetFinalizer(obj, func(interface{}) { c.collected(name) })
}

// cleanup watches p with runtime.AddCleanup: for the binding's handle
// types, which set finalizers of their own (one finalizer per object).
func addCleanup[T any](c *collectTracker, name string, p *T) {
	c.add(name)
	runtime.AddCleanup(p, func(name string) { c.collected(name) }, name)
}

func (c *collectTracker) cleanup(name string, p interface{}) {
	switch p := p.(type) {
	case *IdentityManager:
		addCleanup(c, name, p)
	case *Verifier:
		addCleanup(c, name, p)
	case *TrustSet:
		addCleanup(c, name, p)
	case *Issuer:
		addCleanup(c, name, p)
	case *Keyring:
		addCleanup(c, name, p)
	default:
		panic(fmt.Sprintf("cleanup of a %T", p))
	}
}

func (c *collectTracker) pending() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for n := range c.left {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// handleLive reports whether h still names a value (Value panics once it
// is deleted).
func handleLive(h cgo.Handle) (live bool) {
	defer func() {
		if recover() != nil {
			live = false
		}
	}()
	h.Value()
	return true
}

type goroutineSnapshot struct {
	count int
	ids   map[string]bool
}

// settledGoroutines is the goroutines alive now, after a GC (so that the
// runtime's finalizer goroutine has had its turn).
func settledGoroutines() goroutineSnapshot {
	runtime.GC()
	s := goroutineSnapshot{count: runtime.NumGoroutine(), ids: make(map[string]bool)}
	for _, g := range goroutineStacks() {
		s.ids[goroutineID(g)] = true
	}
	return s
}

// newGoroutines is the stacks of the goroutines alive now that were not in
// before, except the one calling it.
func newGoroutines(before map[string]bool) []string {
	var left []string
	gs := goroutineStacks()
	self := goroutineID(gs[0]) // runtime.Stack puts the caller first
	for _, g := range gs {
		if id := goroutineID(g); id != self && !before[id] {
			left = append(left, g)
		}
	}
	return left
}

// goroutineStacks is runtime.Stack(all) split per goroutine.
func goroutineStacks() []string {
	return strings.Split(strings.TrimSpace(stacks()), "\n\n")
}

func stacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID is the ID in a stack's first line, "goroutine 7 [running]:".
func goroutineID(stack string) string {
	line, _, _ := strings.Cut(stack, "\n")
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "goroutine" {
		return line
	}
	return f[1]
}

// waitFor polls cond until it holds, failing the test with cond's account
// after 30 s.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s: %s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not finish in 60 s:\n%s", what, stacks())
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	waitClosed(t, done, what)
}
