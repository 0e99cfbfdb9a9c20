package wid

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var nmT0 = time.UnixMilli(1700000000000)

const nmDay = 24 * time.Hour

func newNodeManager(t *testing.T, iss *Issuer, kr *Keyring, dir string) *NodeIdentityManager {
	t.Helper()
	m, err := NewNodeIdentityManager(iss, kr, nodeRequest(), dir)
	if err != nil {
		t.Fatalf("NewNodeIdentityManager: %v", err)
	}
	return m
}

func TestNodeIdentityManagerLifecycle(t *testing.T) {
	kr := newKeyring(t)
	defer kr.Close()
	iss, err := NewIssuer(kr, IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := newNodeManager(t, iss, kr, dir)

	if _, err := m.Current(nmT0); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "no valid node identity") {
		t.Fatalf("Current before Start: %v", err)
	}
	if _, err := m.NextDue(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NextDue before Start: %v", err)
	}
	if err := m.Start(time.Time{}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "zero time.Time") {
		t.Fatalf("Start(time.Time{}): %v", err)
	}
	if err := m.Start(nmT0); err != nil {
		t.Fatal(err)
	}
	first, err := m.Current(nmT0)
	if err != nil || strings.Count(first, ".") != 2 {
		t.Fatalf("Current: %q %v", first, err)
	}
	due, err := m.NextDue()
	if err != nil || due.Before(nmT0.Add(nmDay*2/3-nmDay/20)) || due.After(nmT0.Add(nmDay*2/3)) {
		t.Fatalf("NextDue: %v %v", due, err)
	}
	// Before due: nothing happens.
	if err := m.Tick(due.Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	h, err := m.Health(nmT0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if h.Signed != 1 || h.AtRisk || h.Failures != 0 || h.ConsecutiveFailures != 0 ||
		h.ExpiresIn != nmDay-time.Second || !h.ExpiresAt.Equal(nmT0.Add(nmDay)) ||
		!h.NextAttempt.Equal(due) ||
		h.ExpiresBeforeNextAttempt || h.LastError != "" || h.RenewalOverdue != 0 {
		t.Fatalf("Health: %+v", h)
	}

	// A "restart": a new manager on the same directory takes it back.
	m.Close()
	m.Close() // twice is fine
	if err := m.Tick(nmT0); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("Tick after Close: %v", err)
	}
	m2 := newNodeManager(t, iss, kr, dir)
	defer m2.Close()
	iss.Close() // the manager keeps its own reference
	reused, err := m2.Restore(nmT0.Add(time.Minute))
	if err != nil || !reused {
		t.Fatalf("Restore: %v %v", reused, err)
	}
	if tok, _ := m2.Current(nmT0.Add(time.Minute)); tok != first {
		t.Fatal("Restore did not take the saved token back")
	}
	due2, _ := m2.NextDue()
	if err := m2.Tick(due2); err != nil {
		t.Fatal(err)
	}
	if tok, _ := m2.Current(due2); tok == first || tok == "" {
		t.Fatal("Tick when due did not renew")
	}
	if h, _ := m2.Health(due2); h.Signed != 1 {
		t.Fatalf("Health after renewal: %+v", h)
	}

	// Another directory: a new token.
	iss2, _ := NewIssuer(kr, IssuerOptions{})
	defer iss2.Close()
	m3 := newNodeManager(t, iss2, kr, t.TempDir())
	defer m3.Close()
	if reused, err := m3.Restore(nmT0); err != nil || reused {
		t.Fatalf("Restore of an empty directory: %v %v", reused, err)
	}
}

func TestNodeIdentityManagerErrors(t *testing.T) {
	kr := newKeyring(t)
	defer kr.Close()
	iss, err := NewIssuer(kr, IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	dir := t.TempDir()
	if _, err := NewNodeIdentityManager(nil, kr, nodeRequest(), dir); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("nil issuer: %v", err)
	}
	if _, err := NewNodeIdentityManager(iss, nil, nodeRequest(), dir); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("nil keyring: %v", err)
	}
	if _, err := NewNodeIdentityManager(iss, kr, &NodeIdentityRequest{Region: "global", Node: &Node{}}, dir); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("invalid request: %v", err)
	}
	if _, err := NewNodeIdentityManager(iss, kr, nodeRequest(), filepath.Join(dir, "missing")); !errors.Is(err, ErrIOError) {
		t.Fatalf("missing dir: %v", err)
	}
	if _, err := NewNodeIdentityManager(iss, kr, nodeRequest(), ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty dir: %v", err)
	}

	empty, err := NewKeyring()
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	eiss, err := NewIssuer(empty, IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer eiss.Close()
	m := newNodeManager(t, eiss, empty, dir)
	defer m.Close()
	if err := m.Start(nmT0); !errors.Is(err, ErrNoActiveKey) {
		t.Fatalf("Start without a key: %v", err)
	}
	h, err := m.Health(nmT0)
	if err != nil || !h.AtRisk || h.Failures != 1 || h.ConsecutiveFailures != 1 ||
		h.LastError == "" || h.ExpiresIn != 0 || !h.ExpiresAt.IsZero() || !h.NextAttempt.Equal(nmT0.Add(time.Second)) {
		t.Fatalf("Health after a failure: %+v %v", h, err)
	}
	// Before the backoff ends: nothing; after: the failure again.
	if err := m.Tick(nmT0.Add(999 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := m.Tick(nmT0.Add(time.Second)); !errors.Is(err, ErrNoActiveKey) {
		t.Fatalf("Tick: %v", err)
	}
}

func TestNodeIdentityManagerConcurrent(t *testing.T) {
	kr := newKeyring(t)
	defer kr.Close()
	iss, err := NewIssuer(kr, IssuerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer iss.Close()
	m := newNodeManager(t, iss, kr, t.TempDir())
	if err := m.Start(nmT0); err != nil {
		t.Fatal(err)
	}
	first, _ := m.Current(nmT0)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				now := nmT0.Add(time.Duration(i*1000+j) * time.Millisecond)
				if err := m.Tick(now); err != nil {
					t.Error(err)
					return
				}
				if tok, err := m.Current(now); err != nil || tok != first {
					t.Errorf("Current: %v", err)
					return
				}
				if h, err := m.Health(now); err != nil || h.Signed != 1 {
					t.Errorf("Health: %+v %v", h, err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	m.Close()
	if _, err := m.Health(nmT0); !errors.Is(err, ErrNullArgument) {
		t.Fatalf("Health after Close: %v", err)
	}
}
