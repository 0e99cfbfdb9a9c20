package wid

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// reenteringExchange calls back into its own manager from inside Derive,
// recording what each call answered.
type reenteringExchange struct {
	m       *IdentityManager
	mu      sync.Mutex
	answers []string
	n       int
}

func (x *reenteringExchange) Name() string         { return "reentering" }
func (x *reenteringExchange) Identity() IdentityID { return serverVault }

func (x *reenteringExchange) Derive(token string, now time.Time) (string, time.Time, error) {
	x.mu.Lock()
	x.n++
	first := x.n == 1
	x.mu.Unlock()
	if first {
		var got []string
		err := x.m.Start(now)
		got = append(got, "start "+errName(err))
		if err != nil && !strings.Contains(err.Error(), "from inside one of this manager's own callbacks") {
			got = append(got, "start message: "+err.Error())
		}
		_, err = x.m.Restore(now)
		got = append(got, "restore "+errName(err))
		_, ok := x.m.Tick(now.Add(time.Hour))
		got = append(got, "tick "+map[bool]string{true: "due", false: "none"}[ok])
		cur, err := x.m.Current(serverVault, now)
		got = append(got, "current "+map[bool]string{true: "token", false: "none"}[err == nil && cur == token])
		x.mu.Lock()
		x.answers = got
		x.mu.Unlock()
	}
	return "reentering-secret", time.Time{}, nil
}

func (x *reenteringExchange) Refresh(secret, token string, reason RefreshReason, now time.Time) (RefreshResult, error) {
	return RefreshResult{Outcome: SecretKept}, nil
}

func (x *reenteringExchange) Release(secret string) {}

func errName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInvalidArgument):
		return "invalid-argument"
	default:
		return err.Error()
	}
}

// Security round 4 (issue 51, item 7): an Exchange calling back into its
// own manager used to hang forever. From inside it, Start and Restore
// return ErrInvalidArgument (saying why), Tick does nothing, Current
// answers; the outer Start completes. Run in a goroutine, so that a
// regression fails here instead of hanging the suite.
func TestIdentityManagerCallbackCallingBackNeverHangs(t *testing.T) {
	kr := newKeyring(t)
	iss := newIssuer(t, kr, IssuerOptions{})
	x := &reenteringExchange{}
	m := newManager(t, kr, t.TempDir(), IssuerSigner(iss), WithExchange(x))
	x.m = m
	done := make(chan error, 1)
	go func() { done <- m.Start(imT0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Start deadlocked: an Exchange called back into its manager")
	}
	x.mu.Lock()
	got := strings.Join(x.answers, "; ")
	x.mu.Unlock()
	want := "start invalid-argument; restore invalid-argument; tick due; current token"
	if got != want {
		t.Fatalf("answers from inside Derive:\n got %s\nwant %s", got, want)
	}
	if s, err := m.Secret("reentering"); err != nil || s != "reentering-secret" {
		t.Fatalf("Secret: %q %v", s, err)
	}
}
