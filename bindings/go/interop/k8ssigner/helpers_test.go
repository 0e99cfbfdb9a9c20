package k8ssigner

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/workload-identity/workload-identity/bindings/go/interop/internal/widcli"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/externaljwt/apis/v1"
)

// The wid binary and runs of it, shared with the other interop checks
// (internal/widcli).
var (
	widBin = widcli.Bin
	runWid = widcli.Run
)

const widWait = widcli.Wait

// lockedBuffer is a process's output, read while it runs.
type lockedBuffer = widcli.Output

// The issuer of the signers whose issuer does not matter to the check.
const testIssuer = "https://kubernetes.default.svc.cluster.local"

// shortDir is a fresh directory directly under the system temp directory
// (/tmp/k8sXXXX): a Unix socket's path must fit in 108 bytes, which
// t.TempDir()'s long per-test names may not. Removed when the test ends.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "k8s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// store is a keyring the signers are started on: a keystore file or a
// prefix in etcd, and the KEK that wraps its keys.
type store struct {
	flags []string // --keystore FILE --kek-file KEK, or the --etcd flags and --kek-file
}

// newKEK writes a KEK in dir.
func newKEK(t testing.TB, dir string) string {
	t.Helper()
	kek := filepath.Join(dir, "kek")
	runWid(t, "keyring", "generate-kek", "--kek-file", kek)
	return kek
}

// newKeystore makes a wrapped keystore in dir with one active key of each
// alg for purpose, and longestTTL ("" leaves it unknown) as its policy.
func newKeystore(t testing.TB, dir, purpose, longestTTL string, algs ...string) *store {
	t.Helper()
	kek := newKEK(t, dir)
	ks := filepath.Join(dir, "ks.json")
	args := []string{"keyring", "init", "--keystore", ks, "--kek-file", kek, "--purpose", purpose}
	for _, alg := range algs {
		args = append(args, "--alg", alg)
	}
	if longestTTL != "" {
		args = append(args, "--longest-ttl", longestTTL)
	}
	runWid(t, args...)
	return &store{flags: []string{"--keystore", ks, "--kek-file", kek}}
}

// keyring runs `wid keyring <sub> <store flags> args...`.
func (st *store) keyring(t testing.TB, sub string, args ...string) string {
	t.Helper()
	return runWid(t, append(append([]string{"keyring", sub}, st.flags...), args...)...)
}

// rotate makes a new active (keystore) or prepublished (etcd) kubernetes
// key of alg and returns its kid.
func (st *store) rotate(t testing.TB, alg string) string {
	t.Helper()
	raw := st.keyring(t, "rotate", "--purpose", "kubernetes", "--alg", alg, "--json")
	return widcli.ChangedKid(t, raw)
}

// listedKey is a key as `wid keyring list --json` shows it.
type listedKey struct {
	Kid         string `json:"kid"`
	Algorithm   string `json:"algorithm"`
	Purpose     string `json:"purpose"`
	State       string `json:"state"`
	CreateTime  *int64 `json:"create_time"`
	PublishTime *int64 `json:"publish_time"`
	RetiredTime *int64 `json:"retired_time"`
}

// list is every key of the keyring.
func (st *store) list(t testing.TB) []listedKey {
	t.Helper()
	raw := st.keyring(t, "list", "--json")
	var out struct {
		Keys []listedKey `json:"keys"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatalf("wid keyring list --json: %v\n%s", err, raw)
	}
	return out.Keys
}

// proc is a running process whose first stdout line has been read; the
// rest of its output is drained all along (a chatty process never blocks
// on a full pipe).
type proc struct {
	name    string
	cmd     *exec.Cmd
	first   string
	stderr  *lockedBuffer
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// errExited is a process that exited before its first line.
var errExited = errors.New("exited before its first line")

// startProc starts bin args... and waits (within widWait) for its first
// stdout line. t.Cleanup kills it and waits for it, also when the test
// fails. A process that exits first is returned with errExited (its stderr
// and exit status in the proc).
func startProc(t testing.TB, name, bin string, args ...string) (*proc, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
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
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		<-readDone // Wait closes the pipe: read it to the end first.
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(widWait):
			t.Errorf("%s (pid %d) still running %v after SIGKILL", name, cmd.Process.Pid, widWait)
		}
	})
	select {
	case line := <-lines:
		p.first = line
		return p, nil
	case <-p.exited:
		return p, errExited
	case <-time.After(widWait):
		t.Fatalf("%s: no first line within %v; stderr:\n%s", name, widWait, p.stderr.String())
	}
	panic("unreachable")
}

// signal sends sig and waits for the exit; it returns the exit error
// (nil: status 0).
func (p *proc) signal(t testing.TB, sig os.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(widWait):
		t.Fatalf("%s (pid %d) still running %v after %v; stderr:\n%s", p.name, p.cmd.Process.Pid, widWait, sig, p.stderr.String())
	}
	panic("unreachable")
}

// running says whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signer is a running `wid k8s-signer` and a client of its socket.
type signer struct {
	*proc
	socket string // the --socket argument: a path or @NAME
	client v1.ExternalJWTSignerClient
}

// startSignerErr starts `wid k8s-signer <st flags> --issuer issuer --socket
// socket extra...`. A signer that exits before its first line is returned
// with errExited; one whose first line is not `listening on unix:<socket>`
// fails the test.
func startSignerErr(t testing.TB, st *store, issuer, socket string, extra ...string) (*signer, error) {
	t.Helper()
	args := append([]string{"k8s-signer"}, st.flags...)
	args = append(args, "--issuer", issuer, "--socket", socket)
	args = append(args, extra...)
	p, err := startProc(t, "wid k8s-signer", widBin(t), args...)
	s := &signer{proc: p, socket: socket}
	if err != nil {
		return s, err
	}
	if want := "listening on unix:" + socket; p.first != want {
		t.Fatalf("wid %s: first line %q, want %q; stderr:\n%s", strings.Join(args, " "), p.first, want, p.stderr.String())
	}
	s.dial(t)
	return s, nil
}

// startSigner is startSignerErr for a signer that must start.
func startSigner(t testing.TB, st *store, issuer, socket string, extra ...string) *signer {
	t.Helper()
	s, err := startSignerErr(t, st, issuer, socket, extra...)
	if err != nil {
		t.Fatalf("wid k8s-signer %v: %v (exit: %v); stderr:\n%s", append(append(st.flags, "--socket", socket), extra...), err, s.waitErr, s.stderr.String())
	}
	return s
}

// refuseStart starts a signer that must refuse to start: it exits non-zero
// before its first line, and its stderr contains each of want. It returns
// the stderr.
func refuseStart(t testing.TB, st *store, issuer, socket string, extra []string, want ...string) string {
	t.Helper()
	s, err := startSignerErr(t, st, issuer, socket, extra...)
	if err == nil {
		t.Fatalf("wid k8s-signer %v started (%q), want a refusal naming %q", extra, s.first, want)
	}
	stderr := s.stderr.String()
	var exitErr *exec.ExitError
	if !errors.As(s.waitErr, &exitErr) || exitErr.ExitCode() == 0 {
		t.Fatalf("wid k8s-signer %v: exit %v, want a non-zero status; stderr:\n%s", extra, s.waitErr, stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("wid k8s-signer %v: stderr does not name %q:\n%s", extra, w, stderr)
		}
	}
	t.Logf("refused to start (%v): %s", s.waitErr, strings.TrimSpace(stderr))
	return stderr
}

// grpcTarget is a gRPC target naming the socket with grpc-go's own
// resolvers: unix:PATH, or unix-abstract:NAME for @NAME.
func grpcTarget(socket string) string {
	if name, ok := strings.CutPrefix(socket, "@"); ok {
		return "unix-abstract:" + name
	}
	return "unix:" + socket
}

// dial connects (lazily) exactly as kube-apiserver's externaljwt plugin
// does with its --service-account-signing-endpoint: the endpoint as given
// (a path, or @NAME, which Go dials as an abstract socket) through a
// context dialer of network "unix", insecure credentials, authority
// localhost, calls waiting for the connection to be ready. (The plugin
// calls grpc.Dial, whose default scheme is passthrough; grpc.NewClient's
// is dns, hence the explicit passthrough:///.) Closed when the test ends.
func (s *signer) dial(t testing.TB) {
	t.Helper()
	s.dialTarget(t, "passthrough:///"+s.socket,
		grpc.WithContextDialer(func(ctx context.Context, path string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}))
}

// via is the signer with a client of its own dialing target (grpc-go's
// unix: or unix-abstract: resolvers) instead of the apiserver's way.
func (s *signer) via(t testing.TB, target string) *signer {
	t.Helper()
	other := &signer{proc: s.proc, socket: s.socket}
	other.dialTarget(t, target)
	return other
}

// dialTarget connects to target (lazily) with insecure credentials and
// authority localhost, and makes it the signer's client.
func (s *signer) dialTarget(t testing.TB, target string, opts ...grpc.DialOption) {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
	}, opts...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", target, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.client = v1.NewExternalJWTSignerClient(conn)
}

// callWait bounds a gRPC call (which waits for the connection to be ready,
// as the apiserver's do).
const callWait = time.Minute

func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callWait)
}

// fetchKeys calls FetchKeys; an error fails the test.
func (s *signer) fetchKeys(t testing.TB) *v1.FetchKeysResponse {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := s.client.FetchKeys(ctx, &v1.FetchKeysRequest{})
	if err != nil {
		t.Fatalf("FetchKeys on %s: %v; stderr:\n%s", s.socket, err, s.stderr.String())
	}
	return resp
}

// metadata calls Metadata; an error fails the test.
func (s *signer) metadata(t testing.TB) *v1.MetadataResponse {
	t.Helper()
	ctx, cancel := callCtx()
	defer cancel()
	resp, err := s.client.Metadata(ctx, &v1.MetadataRequest{})
	if err != nil {
		t.Fatalf("Metadata on %s: %v; stderr:\n%s", s.socket, err, s.stderr.String())
	}
	return resp
}

// signRaw calls Sign with claims as given (already encoded, or not).
func (s *signer) signRaw(claims string) (*v1.SignJWTResponse, error) {
	ctx, cancel := callCtx()
	defer cancel()
	return s.client.Sign(ctx, &v1.SignJWTRequest{Claims: claims})
}

// signed is a token the signer made, as the apiserver assembles it.
type signed struct {
	token     string
	kid       string
	claimsB64 string
	claims    []byte // the JSON sent
}

// sign sends claims (JSON-encoded, then base64url) and assembles the token
// `header.claims.signature`, failing the test on an error or on a header
// kube-apiserver would refuse.
func (s *signer) sign(t testing.TB, claims map[string]any, wantAlg string) *signed {
	t.Helper()
	raw, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString(raw)
	resp, err := s.signRaw(b64)
	if err != nil {
		t.Fatalf("Sign(%s) on %s: %v; stderr:\n%s", raw, s.socket, err, s.stderr.String())
	}
	kid := checkHeader(t, resp.GetHeader(), wantAlg)
	sig, err := base64.RawURLEncoding.DecodeString(resp.GetSignature())
	if err != nil {
		t.Fatalf("Sign: signature %q is not base64url without padding: %v", resp.GetSignature(), err)
	}
	switch wantAlg {
	case "ES256":
		if len(sig) != 64 {
			t.Fatalf("Sign: an ES256 signature of %d bytes, want 64 (raw r||s)", len(sig))
		}
	case "RS256":
		if len(sig) < 256 {
			t.Fatalf("Sign: an RS256 signature of %d bytes, want at least 256 (2048-bit RSA)", len(sig))
		}
	}
	out := &signed{
		token:     resp.GetHeader() + "." + b64 + "." + resp.GetSignature(),
		kid:       kid,
		claimsB64: b64,
		claims:    raw,
	}
	return out
}

// checkHeader holds the apiserver's checks of a signed header (its
// externaljwt plugin): base64url JSON with exactly alg, kid and typ; typ
// JWT; alg one of RS256, ES256, ES384, ES512; kid 1 to 1024 bytes. Ours
// is also exactly {"alg":ALG,"kid":KID,"typ":"JWT"}, alg the signer's
// --alg. It returns the kid.
func checkHeader(t testing.TB, header, wantAlg string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		t.Fatalf("Sign: header %q is not base64url without padding: %v", header, err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatalf("Sign: header %s is not a JSON object: %v", raw, err)
	}
	if len(fields) != 3 {
		t.Fatalf("Sign: header %s has %d fields, want exactly alg, kid, typ", raw, len(fields))
	}
	alg, _ := fields["alg"].(string)
	kid, _ := fields["kid"].(string)
	typ, _ := fields["typ"].(string)
	if typ != "JWT" {
		t.Fatalf("Sign: header %s: typ %q, want JWT", raw, typ)
	}
	switch alg {
	case "RS256", "ES256", "ES384", "ES512":
	default:
		t.Fatalf("Sign: header %s: alg %q, not one kube-apiserver accepts (RS256, ES256, ES384, ES512)", raw, alg)
	}
	if alg != wantAlg {
		t.Fatalf("Sign: header %s: alg %q, want the signer's --alg %s", raw, alg, wantAlg)
	}
	if n := len(kid); n < 1 || n > 1024 {
		t.Fatalf("Sign: header %s: kid of %d bytes, want 1 to 1024", raw, n)
	}
	exact, err := json.Marshal(struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
		Typ string `json:"typ"`
	}{alg, kid, "JWT"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, exact) {
		t.Fatalf("Sign: header %s, want exactly %s", raw, exact)
	}
	return kid
}

// fetched is one FetchKeys key, parsed.
type fetched struct {
	kid     string
	der     []byte
	pub     any
	exclude bool
}

// checkKeys holds the apiserver's checks of a FetchKeys answer (at least
// one key, each kid 1 to 1024 bytes, each key PKIX DER it can parse, a
// valid data_timestamp, a refresh hint > 0) and ours (wantAlg's key type:
// ES256 a P-256 *ecdsa.PublicKey, RS256 an *rsa.PublicKey; "" either), and
// returns the keys by kid.
func checkKeys(t testing.TB, resp *v1.FetchKeysResponse, wantAlg string) map[string]fetched {
	t.Helper()
	if len(resp.GetKeys()) == 0 {
		t.Fatal("FetchKeys: no keys (kube-apiserver needs at least one)")
	}
	if ts := resp.GetDataTimestamp(); ts == nil {
		t.Fatal("FetchKeys: no data_timestamp")
	} else if err := ts.CheckValid(); err != nil {
		t.Fatalf("FetchKeys: data_timestamp %v: %v", ts, err)
	}
	if h := resp.GetRefreshHintSeconds(); h <= 0 {
		t.Fatalf("FetchKeys: refresh_hint_seconds %d, want > 0", h)
	}
	keys := map[string]fetched{}
	for _, k := range resp.GetKeys() {
		if n := len(k.GetKeyId()); n < 1 || n > 1024 {
			t.Fatalf("FetchKeys: key_id %q of %d bytes, want 1 to 1024", k.GetKeyId(), n)
		}
		if _, dup := keys[k.GetKeyId()]; dup {
			t.Fatalf("FetchKeys: key_id %q listed twice", k.GetKeyId())
		}
		pub, err := x509.ParsePKIXPublicKey(k.GetKey())
		if err != nil {
			t.Fatalf("FetchKeys: key %s is not PKIX SubjectPublicKeyInfo DER: %v", k.GetKeyId(), err)
		}
		switch p := pub.(type) {
		case *ecdsa.PublicKey:
			if p.Curve != elliptic.P256() {
				t.Fatalf("FetchKeys: key %s is ECDSA on %s, want P-256", k.GetKeyId(), p.Curve.Params().Name)
			}
			if wantAlg == "RS256" {
				t.Fatalf("FetchKeys: key %s is ECDSA, want RSA for an RS256 keyring", k.GetKeyId())
			}
		case *rsa.PublicKey:
			if wantAlg == "ES256" {
				t.Fatalf("FetchKeys: key %s is RSA, want ECDSA P-256 for an ES256 keyring", k.GetKeyId())
			}
		default:
			t.Fatalf("FetchKeys: key %s is a %T, want ECDSA P-256 or RSA", k.GetKeyId(), pub)
		}
		keys[k.GetKeyId()] = fetched{kid: k.GetKeyId(), der: k.GetKey(), pub: pub, exclude: k.GetExcludeFromOidcDiscovery()}
	}
	return keys
}

// verifyWith verifies tok with the key of its kid in keys (as the apiserver
// verifies with the set it fetched: an unknown kid is an error), allowing
// only alg, and returns the payload.
func verifyWith(tok *signed, keys map[string]fetched, alg jose.SignatureAlgorithm) ([]byte, error) {
	k, ok := keys[tok.kid]
	if !ok {
		return nil, fmt.Errorf("kid %s is not among the %d keys listed (%s)", tok.kid, len(keys), kidList(keys))
	}
	jws, err := jose.ParseSignedCompact(tok.token, []jose.SignatureAlgorithm{alg})
	if err != nil {
		return nil, fmt.Errorf("go-jose ParseSigned: %w", err)
	}
	payload, err := jws.Verify(k.pub)
	if err != nil {
		return nil, fmt.Errorf("go-jose Verify with key %s: %w", tok.kid, err)
	}
	if !bytes.Equal(payload, tok.claims) {
		return nil, fmt.Errorf("payload %s, want the claims sent %s", payload, tok.claims)
	}
	return payload, nil
}

// kidList is the kids of keys, sorted, for messages.
func kidList(keys map[string]fetched) string {
	kids := make([]string, 0, len(keys))
	for kid := range keys {
		kids = append(kids, kid)
	}
	sort.Strings(kids)
	return strings.Join(kids, ", ")
}

// sameKeys says whether two key sets hold the same kids with the same DER
// and exclude flags.
func sameKeys(a, b map[string]fetched) bool {
	if len(a) != len(b) {
		return false
	}
	for kid, ka := range a {
		kb, ok := b[kid]
		if !ok || !bytes.Equal(ka.der, kb.der) || ka.exclude != kb.exclude {
			return false
		}
	}
	return true
}

// sameAnswer says whether two FetchKeys answers are the same to the
// apiserver's keysChanged: data_timestamp, and the keys in order with their
// exclude flags (and here their DER too).
func sameAnswer(a, b *v1.FetchKeysResponse) bool {
	if !a.GetDataTimestamp().AsTime().Equal(b.GetDataTimestamp().AsTime()) || len(a.GetKeys()) != len(b.GetKeys()) {
		return false
	}
	for i, ka := range a.GetKeys() {
		kb := b.GetKeys()[i]
		if ka.GetKeyId() != kb.GetKeyId() || ka.GetExcludeFromOidcDiscovery() != kb.GetExcludeFromOidcDiscovery() || !bytes.Equal(ka.GetKey(), kb.GetKey()) {
			return false
		}
	}
	return true
}

// saClaims are claims shaped as kube-apiserver builds them for a pod's
// projected service-account token, issued now for ttl.
func saClaims(issuer string, ttl time.Duration) map[string]any {
	now := time.Now().Unix()
	return map[string]any{
		"iss": issuer,
		"sub": "system:serviceaccount:default:builder",
		"aud": []any{"https://kubernetes.default.svc"},
		"exp": now + int64(ttl/time.Second),
		"nbf": now,
		"iat": now,
		"jti": fmt.Sprintf("jti-%d", time.Now().UnixNano()),
		"kubernetes.io": map[string]any{
			"namespace": "default",
			"serviceaccount": map[string]any{
				"name": "builder",
				"uid":  "6b2f5a0e-3c55-4d0b-9a3e-8f1a2c4d5e6f",
			},
			"pod": map[string]any{
				"name": "builder-7d9f8c6b5-x2x9q",
				"uid":  "0d8e3c1a-9b7f-4e2d-8c6a-5f4e3d2c1b0a",
			},
		},
	}
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

// httpClient is bounded, so a hung server is a failure that names the request.
func httpClient() *http.Client { return &http.Client{Timeout: widWait} }

// httpGet GETs url, wants 200, and returns the body.
func httpGet(t testing.TB, url string) []byte {
	t.Helper()
	resp, err := httpClient().Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	return body
}

// serveOn starts `wid serve` on a loopback port picked here, args(port)
// being its flags (an issuer URL must name the port before it starts), and
// returns the base URL from its first line. A port taken by someone else
// between the pick and the bind is tried again with another, a few times.
func serveOn(t testing.TB, args func(port int) []string) string {
	t.Helper()
	var errs []string
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		p, err := startProc(t, "wid serve", widBin(t), append([]string{"serve"}, args(port)...)...)
		if err != nil {
			errs = append(errs, fmt.Sprintf("port %d: %v: %s", port, p.waitErr, p.stderr.String()))
			continue
		}
		base, ok := strings.CutPrefix(p.first, "listening on ")
		if want := fmt.Sprintf("http://127.0.0.1:%d", port); !ok || base != want {
			t.Fatalf("wid serve: first line %q, want \"listening on %s\"; stderr:\n%s", p.first, want, p.stderr.String())
		}
		return base
	}
	t.Fatalf("wid serve never started:\n%s", strings.Join(errs, "\n"))
	return ""
}

// startEtcd starts a single-member etcd (from PATH) on free loopback ports
// with its data in a temp directory, waits until it is healthy and returns
// its client URL. Missing etcd fails the test. Stopped when the test ends.
func startEtcd(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd is not on PATH (%v): the etcd checks need a real etcd", err)
	}
	var errs []string
	for attempt := 0; attempt < 5; attempt++ {
		client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		dir := t.TempDir()
		cmd := exec.Command(bin,
			"--name", "default",
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", "default="+peer,
			"--initial-cluster-state", "new",
		)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("etcd: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		healthy := false
		deadline := time.Now().Add(widWait)
	poll:
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				break poll
			default:
			}
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(client + "/health")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"true"`)) {
					healthy = true
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if healthy {
			t.Cleanup(stop)
			return client
		}
		stop()
		errs = append(errs, fmt.Sprintf("client %s peer %s: not healthy:\n%s", client, peer, out.String()))
	}
	t.Fatalf("etcd never became healthy:\n%s", strings.Join(errs, "\n"))
	return ""
}
