package interop

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/workload-identity/workload-identity/bindings/go/interop/internal/widcli"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The wid binary and runs of it, shared with the other interop checks
// (internal/widcli).
var (
	widBin = widcli.Bin
	runWid = widcli.Run
	widRun = widcli.RunErr
)

const widWait = widcli.Wait

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer = widcli.Output

// The `wid` CLI as the go-oidc and go-spiffe checks meet it: a keystore made
// and rotated with `wid keyring`, tokens from `wid issue`, and a running
// `wid serve` on loopback (a free port it picks, or one the test names when
// the issuer URL must carry it), killed when the test ends. As in
// wid/tests/cli.rs and tests/python/spiffe_bundle_interop.py.

// issueRequest is an IssueRequest as `wid issue --request` reads it (JSON
// with Go's field names), for audience aud, valid ten minutes from when
// `wid issue` signs it.
func issueRequest(t testing.TB, dir, aud string) string {
	t.Helper()
	req := map[string]interface{}{
		"Region": "global",
		"Allocation": map[string]interface{}{
			"ID":           allocID,
			"Namespace":    "default",
			"JobID":        "web",
			"TaskGroup":    "frontend",
			"ClientStatus": "running",
		},
		"Task":     "server",
		"Identity": map[string]interface{}{"Name": "default", "Audience": []string{aud}, "TTL": "10m"},
	}
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "request-"+aud+".json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// widKeystore makes a keystore in dir with one active bearer key of each
// algorithm, created at createdAt (Unix seconds; 0: now), and returns its
// path.
func widKeystore(t testing.TB, dir string, createdAt int64) string {
	t.Helper()
	ks := filepath.Join(dir, "keystore")
	args := []string{"keyring", "init", "--keystore", ks, "--alg", "EdDSA", "--alg", "ES256", "--alg", "RS256"}
	if createdAt != 0 {
		args = append(args, "--now", strconv.FormatInt(createdAt, 10))
	}
	runWid(t, args...)
	return ks
}

// widRotate rotates alg's bearer key (at Unix seconds now; 0: now) and
// returns the new key's kid.
func widRotate(t testing.TB, ks, alg string, now int64) string {
	t.Helper()
	args := []string{"keyring", "rotate", "--keystore", ks, "--alg", alg, "--json"}
	if now != 0 {
		args = append(args, "--now", strconv.FormatInt(now, 10))
	}
	raw := runWid(t, args...)
	return widcli.ChangedKid(t, raw)
}

// widIssue signs request with alg's active key; extra are more flags
// (--issuer, --spiffe-trust-domain).
func widIssue(t testing.TB, ks, request, alg string, extra ...string) string {
	t.Helper()
	args := append([]string{"issue", "--keystore", ks, "--request", request, "--alg", alg}, extra...)
	return strings.TrimSpace(runWid(t, args...))
}

// served is a running `wid serve`.
type served struct {
	base   string // "http://127.0.0.1:PORT" or "https://..."
	stderr *lockedBuffer
}

// errServeExited is a `wid serve` that exited before naming its address
// (a port taken since it was picked, a bad flag).
var errServeExited = errors.New("wid serve exited before listening")

// startServe starts `wid serve args...` and waits (within widWait) for the
// first line, "listening on <base>". Its output is drained all along (a
// chatty server never blocks on a full pipe); t.Cleanup kills it and waits
// for it, also when the test fails.
func startServe(t testing.TB, args ...string) (*served, error) {
	t.Helper()
	cmd := exec.Command(widBin(t), append([]string{"serve"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("wid serve: %v", err)
	}
	lines := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		r := bufio.NewReader(stdout)
		line, err := r.ReadString('\n')
		if err == nil {
			lines <- strings.TrimSpace(line)
		}
		// The rest of stdout, unread, until the server exits.
		_, _ = io.Copy(io.Discard, r)
	}()
	exited := make(chan struct{})
	go func() {
		<-readDone // Wait closes the pipe: read it to the end first.
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(widWait):
			t.Errorf("wid serve (pid %d) still running %v after SIGKILL", cmd.Process.Pid, widWait)
		}
	})
	select {
	case line := <-lines:
		base, ok := strings.CutPrefix(line, "listening on ")
		if !ok || !(strings.HasPrefix(base, "http://") || strings.HasPrefix(base, "https://")) {
			t.Fatalf("wid serve: first line %q; stderr:\n%s", line, stderr.String())
		}
		return &served{base: base, stderr: stderr}, nil
	case <-exited:
		return nil, fmt.Errorf("%w: %s", errServeExited, stderr.String())
	case <-time.After(widWait):
		t.Fatalf("wid serve named no address within %v; stderr:\n%s", widWait, stderr.String())
	}
	panic("unreachable")
}

// serveOn starts `wid serve` on a port picked here, for flags that must
// name the port before the server starts (an http issuer on loopback is
// the server's own URL: go-oidc requires the discovery document's issuer
// to be the URL it was given). A port taken by someone else between the
// pick and the bind is tried again with another, a few times.
func serveOn(t testing.TB, args func(port int) []string) *served {
	t.Helper()
	var errs []string
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		s, err := startServe(t, args(port)...)
		if err == nil {
			return s
		}
		errs = append(errs, fmt.Sprintf("port %d: %v", port, err))
	}
	t.Fatalf("wid serve never started:\n%s", strings.Join(errs, "\n"))
	return nil
}

// freePort is a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpClient is every client of the checks: bounded, so a hung server is a
// failure that names the request.
func httpClient() *http.Client { return &http.Client{Timeout: widWait} }

// requestsCounted is wid serve's count of answered requests of route with
// status 200 (/metrics, Prometheus text).
func (s *served) requestsCounted(t testing.TB, client *http.Client, route string) int {
	t.Helper()
	resp, err := client.Get(s.base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	re := regexp.MustCompile(`(?m)^wid_serve_requests_total\{route="` + regexp.QuoteMeta(route) + `",status="200"\} (\d+)$`)
	m := re.FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testPKI is a private CA and a server certificate it signed for
// 127.0.0.1, made with crypto/x509 (the https_web profile with a private
// CA, as wid/tests/cli_serve.rs makes one with openssl).
type testPKI struct {
	caPool   *x509.CertPool
	certFile string // the server certificate, PEM
	keyFile  string // its key, PKCS#8 PEM, mode 0600 (wid serve insists)
}

func newTestPKI(t testing.TB, dir, name string) *testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notBefore, notAfter := time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{
		caPool:   x509.NewCertPool(),
		certFile: filepath.Join(dir, name+"-server.pem"),
		keyFile:  filepath.Join(dir, name+"-server.key"),
	}
	p.caPool.AddCert(ca)
	if err := os.WriteFile(p.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
