// Package widcli runs the `wid` CLI for the interop checks (the interop
// package's go-oidc and go-spiffe checks, and k8ssigner's kube-apiserver
// client): the binary from $WID_BIN, commands run to completion within
// Wait, a non-zero exit failing the test with what wid said.
package widcli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Wait bounds every wait on `wid` (a command, a server's first line, a
// call to it): long, since CI is a loaded 2-core machine, and only there to
// turn a hang into a failure that says what hung.
const Wait = 2 * time.Minute

// Bin is $WID_BIN, the `wid` binary. Unset is a failure, not a skip: CI
// always sets it, and a check that silently does not run is no check.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("WID_BIN")
	if bin == "" {
		t.Fatal("WID_BIN is not set: set it to the wid CLI (cargo build --release --locked -p wid; " +
			"WID_BIN=$PWD/target/release/wid); scripts/go-tests.sh and CI set it")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("WID_BIN=%s is not an executable file (%v)", bin, err)
	}
	return bin
}

// Run runs `wid args...` to completion (within Wait) and returns its
// stdout; a non-zero exit fails the test with its stderr.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, stderr, err := RunErr(t, args...)
	if err != nil {
		t.Fatalf("wid %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// RunErr runs `wid args...` and returns stdout, stderr and the error of a
// non-zero exit (*exec.ExitError).
func RunErr(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, Bin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("wid %s: no exit within %v\n%s", strings.Join(args, " "), Wait, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

// Output is a process's output, written by it and read while it runs.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ChangedKid is the key of the first change `wid keyring rotate --json`
// printed (raw); none fails the test.
func ChangedKid(t testing.TB, raw string) string {
	t.Helper()
	var out struct {
		Changes []struct {
			Kid string `json:"kid"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil || len(out.Changes) == 0 || out.Changes[0].Kid == "" {
		t.Fatalf("wid keyring rotate --json: %v\n%s", err, raw)
	}
	return out.Changes[0].Kid
}
