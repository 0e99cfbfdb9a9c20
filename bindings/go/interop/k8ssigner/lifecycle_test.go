package k8ssigner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestKillAndRestart: the socket's life as a node's supervisor sees it. A
// SIGKILLed signer leaves its socket file behind (stale), and one started
// again on the same path replaces it and signs with the same keys; tokens
// signed before the kill still verify. SIGTERM exits 0 and removes the
// socket. A regular file at --socket, or the socket of a live signer, is
// never taken over. The socket's mode is 0600 unless --socket-mode says
// otherwise, and an abstract @NAME socket works.
func TestKillAndRestart(t *testing.T) {
	dir := shortDir(t)
	st := newKeystore(t, dir, "kubernetes", "1h", "ES256")
	sock := filepath.Join(dir, "s.sock")

	t.Run("KillRestart", func(t *testing.T) {
		s := startSigner(t, st, testIssuer, sock)
		checkSocketMode(t, sock, 0o600)
		before := checkKeys(t, s.fetchKeys(t), "ES256")
		tok := s.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		// grpc-go's unix: target reaches the same signer.
		if tokU := s.via(t, grpcTarget(sock)).sign(t, saClaims(testIssuer, 30*time.Minute), "ES256"); tokU.kid != tok.kid {
			t.Fatalf("over unix:%s Sign used kid %s, over the apiserver's dial %s", sock, tokU.kid, tok.kid)
		}

		err := s.signal(t, syscall.SIGKILL)
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			t.Fatalf("after SIGKILL: exit %v, want killed", err)
		}
		fi, err := os.Lstat(sock)
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("after SIGKILL the socket file should stay (stale): %v %v", fi, err)
		}

		again := startSigner(t, st, testIssuer, sock)
		checkSocketMode(t, sock, 0o600)
		after := checkKeys(t, again.fetchKeys(t), "ES256")
		if !sameKeys(before, after) {
			t.Fatalf("FetchKeys after the restart lists %s, before %s", kidList(after), kidList(before))
		}
		if _, err := verifyWith(tok, after, "ES256"); err != nil {
			t.Fatalf("a token signed before the kill: %v", err)
		}
		tok2 := again.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if tok2.kid != tok.kid {
			t.Fatalf("after the restart Sign used kid %s, before %s", tok2.kid, tok.kid)
		}
		if _, err := verifyWith(tok2, after, "ES256"); err != nil {
			t.Fatal(err)
		}

		// A second signer on the live one's socket refuses and leaves it be.
		refuseStart(t, st, testIssuer, sock, nil)
		if !again.running() {
			t.Fatalf("the live signer exited when a second one was started on its socket:\n%s", again.stderr.String())
		}
		tok3 := again.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if _, err := verifyWith(tok3, after, "ES256"); err != nil {
			t.Fatalf("the live signer, after a second one tried its socket: %v", err)
		}

		if err := again.signal(t, syscall.SIGTERM); err != nil {
			t.Fatalf("after SIGTERM: exit %v, want status 0; stderr:\n%s", err, again.stderr.String())
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("after SIGTERM the socket file should be gone: %v", err)
		}
	})

	t.Run("RegularFile", func(t *testing.T) {
		path := filepath.Join(dir, "file.sock")
		content := []byte("not a socket: keep me\n")
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		refuseStart(t, st, testIssuer, path, nil)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
			t.Fatalf("the regular file at --socket was touched: %v %v", fi, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(content) {
			t.Fatalf("the regular file at --socket now holds %q (%v)", got, err)
		}
	})

	t.Run("SocketMode660", func(t *testing.T) {
		path := filepath.Join(dir, "g.sock")
		s := startSigner(t, st, testIssuer, path, "--socket-mode", "660")
		checkSocketMode(t, path, 0o660)
		checkKeys(t, s.fetchKeys(t), "ES256")
	})

	t.Run("SocketOwner", func(t *testing.T) {
		// Another owner needs root; otherwise our own IDs, given explicitly.
		uid, gid := os.Getuid(), os.Getgid()
		if uid == 0 {
			uid, gid = 65534, 65534
		}
		path := filepath.Join(dir, "o.sock")
		s := startSigner(t, st, testIssuer, path, "--socket-owner", fmt.Sprintf("%d:%d", uid, gid))
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		sys, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || int(sys.Uid) != uid || int(sys.Gid) != gid {
			t.Fatalf("socket %s owned by %v, want %d:%d", path, fi.Sys(), uid, gid)
		}
		checkSocketMode(t, path, 0o600)
		checkKeys(t, s.fetchKeys(t), "ES256")
	})

	t.Run("Abstract", func(t *testing.T) {
		name := fmt.Sprintf("@wid-k8s-test-%d-%d", os.Getpid(), time.Now().UnixNano())
		s := startSigner(t, st, testIssuer, name)
		keys := checkKeys(t, s.fetchKeys(t), "ES256")
		tok := s.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if _, err := verifyWith(tok, keys, "ES256"); err != nil {
			t.Fatal(err)
		}
		// And as grpc-go names it: unix-abstract:NAME.
		viaAbstract := s.via(t, grpcTarget(name))
		tokA := viaAbstract.sign(t, saClaims(testIssuer, 30*time.Minute), "ES256")
		if _, err := verifyWith(tokA, checkKeys(t, viaAbstract.fetchKeys(t), "ES256"), "ES256"); err != nil {
			t.Fatalf("over %s: %v", grpcTarget(name), err)
		}
		if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("an abstract socket made a file %q: %v", name, err)
		}
		if err := s.signal(t, syscall.SIGTERM); err != nil {
			t.Fatalf("after SIGTERM: exit %v, want status 0; stderr:\n%s", err, s.stderr.String())
		}
	})
}

// checkSocketMode wants a socket file at path with permission bits perm.
func checkSocketMode(t testing.TB, path string, perm os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("socket %s: %v", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is a %v, not a socket", path, fi.Mode())
	}
	if fi.Mode().Perm() != perm {
		t.Fatalf("socket %s has mode %04o, want %04o", path, fi.Mode().Perm(), perm)
	}
}
